"""`swiftlike deploy`: the OpenAI API over any engine; concurrent requests go through the engine's
`generate_async` / `stream_async`, which batch them where the engine can (vLLM, SGLang, LMDeploy)."""
