"""OpenAI Chat Completions (``/v1/chat/completions``)."""
