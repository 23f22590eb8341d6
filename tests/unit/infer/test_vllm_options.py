"""How --vllm_* options become vLLM's engine arguments."""
def test_vllm_enforce_eager_defaults_to_eager_on_cpu_and_an_explicit_false_compiles():
    """None (the default) is eager on CPU and compiled on a GPU; an explicit choice holds on either."""
    from swiftlike.infer.engine.vllm_engine import VllmOptions, engine_kwargs, on_cpu
    assert engine_kwargs("/m", VllmOptions())["enforce_eager"] is on_cpu()
    assert engine_kwargs("/m", VllmOptions(enforce_eager=False))["enforce_eager"] is False
    assert engine_kwargs("/m", VllmOptions(enforce_eager=True))["enforce_eager"] is True
