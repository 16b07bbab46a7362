"""Anthropic Messages (``/v1/messages``)."""
