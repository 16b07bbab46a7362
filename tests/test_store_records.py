"""How an exchange becomes message records: what full-text search and the embeddings see."""

from __future__ import annotations

import attrs

from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT, Block, Exchange, Message, RequestView, Usage
from lore_core.storage.convert import records_from_exchange
from lore_core.storage.identity import ChainMemo, chain_ids, logical_messages


def _exchange(messages: list[Message]) -> Exchange:
    view = RequestView(api="anthropic-messages", raw={}, body=b"", messages=messages)
    return Exchange(
        api=view.api,
        path="/v1/messages",
        request=view,
        harness="generic",
        session_id="s",
        project="/p",
        upstream="u",
    )


def test_recall_results_stay_in_the_history_but_out_of_search() -> None:
    echo = "[t:abc] (message) the websocket reconnect loop backs off 2 s"
    messages = [
        Message("user", [Block(TEXT, text="why does the websocket drop?")]),
        Message(
            "assistant",
            [
                Block(TOOL_CALL, tool_name="recall", tool_call_id="r1", tool_input={"query": "websocket"}),
                Block(TOOL_CALL, tool_name="read_file", tool_call_id="c1", tool_input={"path": "ws.py"}),
            ],
        ),
        Message(
            "user",
            [
                Block(TOOL_RESULT, text=echo, tool_call_id="r1"),
                Block(TOOL_RESULT, text="def reconnect(): sleep(backoff)", tool_call_id="c1"),
            ],
        ),
    ]
    rows = records_from_exchange(_exchange(messages)).messages
    results = rows[2]
    # The client's own tool result is searchable; the recall result, an echo of stored
    # memories, is not - but it is kept in the stored history.
    assert "def reconnect(): sleep(backoff)" in results.text
    assert "backs off 2 s" not in results.text
    assert any(b.get("text") == echo for b in results.blocks)
    # The call itself stays searchable as "recall {query}".
    assert 'recall {"query": "websocket"}' in rows[1].text


def test_the_chain_memo_gives_the_ids_of_chain_ids() -> None:
    def history(n: int, edit: int | None = None) -> list[Message]:
        out = []
        for i in range(n):
            text = "edited" if i == edit else f"turn {i}"
            out.append(Message("user" if i % 2 == 0 else "assistant", [Block(TEXT, text=text)]))
        return out

    memo = ChainMemo(max_sessions=2)
    # Growing, edited (a new branch), shorter (a rewind), then another session in between.
    for session, n, edit in [
        ("s", 3, None),
        ("s", 5, None),
        ("s", 5, 1),
        ("s", 2, None),
        ("t", 4, None),
        ("s", 6, None),
    ]:
        logical = logical_messages(history(n, edit))
        assert memo.ids(session, logical) == chain_ids(session, logical)
    # Least recently used sessions are dropped beyond max_sessions.
    memo.ids("u", logical_messages(history(1)))
    assert memo.ids("t", logical_messages(history(4))) == chain_ids("t", logical_messages(history(4)))


def count_hashed(monkeypatch) -> list[int]:
    """How many messages each chain_ids call hashes, from now on."""
    from lore_core.storage import identity as store_module

    hashed: list[int] = []

    def counting(session_id, messages, start=0, parent=None):
        hashed.append(len(messages) - start)
        return chain_ids(session_id, messages, start, parent)

    monkeypatch.setattr(store_module, "chain_ids", counting)
    return hashed


def test_the_chain_memo_keeps_a_main_conversation_while_sub_agents_alternate(monkeypatch) -> None:
    def history(prefix: str, n: int) -> list[Message]:
        return [
            Message("user" if i % 2 == 0 else "assistant", [Block(TEXT, text=f"{prefix} {i}")])
            for i in range(n)
        ]

    hashed = count_hashed(monkeypatch)
    memo = ChainMemo()
    main, agent = history("main", 40), history("sub-agent", 6)
    for n in (38, 39, 40):
        for messages in (main[:n], agent[: n - 34]):
            assert memo.ids("s", logical_messages(messages)) == chain_ids("s", logical_messages(messages))
    # After the first of each, only what each request added was hashed.
    assert hashed == [38, 4, 1, 1, 1, 1]


def test_the_chain_memo_recognises_a_resent_history_by_its_json(monkeypatch) -> None:
    """Parsed requests as a client resends them: the history compares by its wire JSON, a
    cache breakpoint moving to the newest message (other JSON, same content) still counts
    as the same message, an edit starts a new branch, and the ids are chain_ids' own."""
    import json

    from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

    codec = AnthropicMessagesCodec()
    turns = [
        {"role": "user", "content": [{"type": "text", "text": "run the tests"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {"cmd": "pytest"}}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "running them"}]},  # coalesced
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "3 failed"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "three fail"}]},
        {"role": "user", "content": [{"type": "text", "text": "fix them"}]},
    ]

    def request(n: int, edit: int | None = None) -> list[Message]:
        messages = json.loads(json.dumps(turns[:n]))  # a new parse each time, as on the wire
        if edit is not None:
            messages[edit]["content"][0]["text"] = "edited"
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}  # the breakpoint moves
        body = {"model": "m", "max_tokens": 8, "messages": messages}
        return codec.parse(body, json.dumps(body).encode()).messages

    hashed = count_hashed(monkeypatch)
    memo = ChainMemo()
    for n, edit in [(1, None), (4, None), (5, None), (6, None), (6, 5), (6, None)]:
        logical = logical_messages(request(n, edit))
        assert memo.ids("s", logical) == chain_ids("s", logical)
    # Each resend hashed only what it added (the two assistant items are one message), the
    # edit of the newest message and the way back from it one message each.
    assert hashed == [1, 2, 1, 1, 1, 1]


def test_records_are_the_same_with_a_chain_memo() -> None:
    messages = [
        Message("user", [Block(TEXT, text="why does the websocket drop?")]),
        Message(
            "assistant", [Block(TOOL_CALL, tool_name="read_file", tool_call_id="c1", tool_input={"p": 1})]
        ),
        Message("user", [Block(TOOL_RESULT, text="def reconnect(): ...", tool_call_id="c1")]),
    ]
    memo = ChainMemo()
    for n in (1, 3, 3):
        exchange = _exchange(messages[:n])
        exchange.finished_at = 1_000.0
        assert records_from_exchange(exchange, memo=memo) == records_from_exchange(exchange)


def test_a_stored_answers_usage_names_every_usage_field() -> None:
    # Usage.as_dict is written out for speed: a field added to Usage must appear in it.
    usage = Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4)
    assert usage.as_dict() == attrs.asdict(usage)
