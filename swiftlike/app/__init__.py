"""The Gradio chat app (`swiftlike app`)."""
