"""The Gradio pages: `swiftlike web-ui` (forms that build and run the CLI, and a runtime panel over its jobs) and
the chat page of `swiftlike app`."""
