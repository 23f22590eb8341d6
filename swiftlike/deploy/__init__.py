"""`swiftlike deploy`: the OpenAI API (server.py) over our engines, with concurrent requests batched onto
one engine (serving.py)."""
