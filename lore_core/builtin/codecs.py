"""Registers the built-in wire codecs."""

from __future__ import annotations

from collections.abc import Callable

from lore_core.hookspecs import hookimpl
from lore_core.interfaces import Codec
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_chat.codec import OpenAIChatCodec
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec


@hookimpl
def lore_register_codecs(register: Callable[[Codec], None]) -> None:
    register(AnthropicMessagesCodec())
    register(OpenAIChatCodec())
    register(OpenAIResponsesCodec())
