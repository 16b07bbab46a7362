"""The three built-in codecs pass the codec conformance suite.

Golden cases: ``tests/data/codecs/<api>/`` (request bodies and answers as JSON and SSE, in
each API's documented wire format; see its README) plus the request bodies captured from the
real clients in the harness plugins' fixtures, each under the codec that owns its path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lore_core.testing.conformance.codec import CodecConformance, load_golden
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_chat.codec import OpenAIChatCodec
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec

DATA = Path(__file__).parent / "data" / "codecs"
CAPTURES = sorted((Path(__file__).resolve().parents[1] / "plugins").glob("harness_*/tests/fixtures/*.json"))


def captured_bodies(suffix: str) -> list[tuple[str, dict[str, Any]]]:
    """Request bodies captured from real clients, sent to a path ending in ``suffix``."""
    return [
        (f"captured-{r['tag']}", r["body"])
        for path in CAPTURES
        for r in json.loads(path.read_text())
        if r["path"].endswith(suffix)
    ]


ANTHROPIC = load_golden(DATA / "anthropic-messages")
CHAT = load_golden(DATA / "openai-chat")
RESPONSES = load_golden(DATA / "openai-responses")


class TestAnthropicMessagesCodec(CodecConformance):
    requests = [*ANTHROPIC.requests, *captured_bodies("/v1/messages")]
    responses = ANTHROPIC.responses
    error_message_path = ("error", "message")
    error_type_path = ("error", "type")

    @pytest.fixture
    def codec(self) -> AnthropicMessagesCodec:
        return AnthropicMessagesCodec()


class TestOpenAIChatCodec(CodecConformance):
    requests = [*CHAT.requests, *captured_bodies("/chat/completions")]
    responses = CHAT.responses

    @pytest.fixture
    def codec(self) -> OpenAIChatCodec:
        return OpenAIChatCodec()


class TestOpenAIResponsesCodec(CodecConformance):
    requests = [*RESPONSES.requests, *captured_bodies("/responses")]
    responses = RESPONSES.responses

    @pytest.fixture
    def codec(self) -> OpenAIResponsesCodec:
        return OpenAIResponsesCodec()
