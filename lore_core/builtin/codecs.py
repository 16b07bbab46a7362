"""Registers the built-in wire codecs and the providers they speak."""

from __future__ import annotations

from collections.abc import Callable

from lore_core.hookspecs import hookimpl
from lore_core.interfaces import Codec, Provider
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_chat.codec import OpenAIChatCodec
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec
from lore_core.wire.providers import BUILTIN_PROVIDERS


@hookimpl
def lore_register_codecs(register: Callable[[Codec], None]) -> None:
    register(AnthropicMessagesCodec())
    register(OpenAIChatCodec())
    register(OpenAIResponsesCodec())


@hookimpl
def lore_register_providers(register: Callable[[Provider], None]) -> None:
    for provider in BUILTIN_PROVIDERS:
        register(provider)
