"""The worker model client: background LLM calls off the request path."""
