"""Registers the built-in wire codecs."""

from __future__ import annotations

from collections.abc import Callable

from lore_core.codecs.anthropic import AnthropicMessagesCodec
from lore_core.codecs.openai_chat import OpenAIChatCodec
from lore_core.codecs.openai_responses import OpenAIResponsesCodec
from lore_core.hookspecs import hookimpl
from lore_core.interfaces import Codec


@hookimpl
def lore_register_codecs(register: Callable[[Codec], None]) -> None:
    register(AnthropicMessagesCodec())
    register(OpenAIChatCodec())
    register(OpenAIResponsesCodec())
