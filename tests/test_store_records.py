"""How an exchange becomes message records: what full-text search and the embeddings see."""

from __future__ import annotations

from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT, Block, Exchange, Message, RequestView
from lore_core.store import records_from_exchange


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
