"""Recall at passage level on the shapes real coding sessions have, with data these tests make:
a 100K-character run of assistant steps, logs beside the message that states a decision,
sessions named by their first prompt, questions about the first, last and most frequent
events, and opening a result to read on around it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT, Block, Message
from lore_core.recall.engine import RecallResponse
from lore_core.recall.intent import parse
from lore_core.recall.ranking import RecallResult, distinct, group_passages
from lore_core.recall.store_engine import recall, store_recall_engine
from lore_core.recall.tool import MAX_RESULT_CHARS, TOOL_NAME, format_response, run_recall
from lore_core.testing.builders import batch_of, exchange, text
from lore_core.testing.fake_upstream import FakeUpstream, Reply, ToolCall
from lore_core.testing.server import ThreadedServer

PROJECT = "/work/alpha"


def filler(lines: int, word: str) -> str:
    return "\n".join(f"{word} {i}: copied the build artefacts into the shared cache" for i in range(lines))


def bash(call_id: str, command: str, say: str = "") -> Message:
    blocks = [Block(TEXT, text=say)] if say else []
    blocks.append(Block(TOOL_CALL, tool_name="Bash", tool_call_id=call_id, tool_input={"command": command}))
    return Message("assistant", blocks)


def output(call_id: str, content: str) -> Message:
    return Message("user", [Block(TOOL_RESULT, text=content, tool_call_id=call_id)])


def edit(call_id: str, path: str, new: str, old: str = "") -> Message:
    args = {"file_path": path, "old_string": old, "new_string": new}
    return Message("assistant", [Block(TOOL_CALL, tool_name="Edit", tool_call_id=call_id, tool_input=args)])


def search(store: MemoryStore, query: str, **kwargs: Any) -> RecallResponse:
    engine = store_recall_engine(store)
    return asyncio.run(engine.search(query, "project", None, PROJECT, kwargs.pop("limit", 30)))


def stored(*exchanges: Any) -> MemoryStore:
    store = MemoryStore()

    async def go() -> None:
        await store.open()
        for ex in exchanges:
            await store.write(batch_of(ex))

    asyncio.run(go())
    return store


# -- a coalesced 100K run, through a real gateway ----------------------------------------------


def test_a_long_coalesced_run_brings_back_facts_from_its_middle_and_its_end(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Responses items of one model turn (a message and many calls) are stored as one
    assistant message of ~100K characters; two facts in it, one near the middle and one at
    the end, both come back in the one tool result the model reads."""
    pytest.importorskip("lore_store_duckdb")
    server = start_gateway(
        config={"store": {"backend": "duckdb", "path": str(tmp_path / "db")}, "embedding": {"index": False}}
    )
    patches = []
    for i in range(56):
        body = filler(30, f"patch{i}")
        if i == 24:
            body += "\nthe deploy token is read from vault path secret/ci/kestrel-deploy"
        if i == 55:
            body += "\nrollback is done with helm rollback kestrel 42"
        patches.append(
            {"type": "custom_tool_call", "call_id": f"p{i}", "name": "apply_patch",
             "input": f"*** Begin Patch\n*** Update File: src/m{i}.py\n{body}\n*** End Patch"}
        )  # fmt: skip
    run = [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Patching."}]}
    ]
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "ship the kestrel release"}],
        },
        *run,
        *patches,
    ]
    assert len(json.dumps(items)) > 100_000
    headers = {"authorization": "Bearer sk-test", "session-id": "s-long", "x-lore-project": PROJECT}
    tools = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]
    with httpx.Client(base_url=server.url, timeout=60) as client:
        first = {"model": "gpt-test", "input": items, "tools": tools}
        assert client.post("/v1/responses", json=first, headers=headers).status_code == 200
        query = "kestrel deploy token vault path and the helm rollback"
        fake_upstream.enqueue(
            Reply(text="", tool_calls=[ToolCall(TOOL_NAME, {"query": query})]), Reply(text="ok")
        )
        question = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "how?"}]}
        asked = {"model": "gpt-test", "input": [*items, question], "tools": tools}
        assert (
            client.post("/v1/responses", json=asked, headers=headers | {"session-id": "s-ask"}).status_code
            == 200
        )
    follow_up = fake_upstream.api_requests()[-1].json
    result = next(i["output"] for i in follow_up["input"] if i.get("type") == "function_call_output")
    assert "secret/ci/kestrel-deploy" in result and "helm rollback kestrel 42" in result
    assert len(result) <= MAX_RESULT_CHARS


# -- ranking --------------------------------------------------------------------------------------


def test_a_log_does_not_outrank_the_message_that_states_the_decision() -> None:
    log = "\n".join(
        f"cache: redis session cache warmup {i} ok (memcached fallback off, redis cache hit ratio {i % 90}%)"
        for i in range(600)
    )
    store = stored(
        exchange(
            [
                text("user", "the sessions are slow, what should we cache them in?"),
                bash("c1", "make bench-cache"),
                output("c1", log),
                text(
                    "assistant",
                    "Decision: we keep sessions in Redis, not memcached, because it persists them.",
                ),
            ],
            session="s-cache",
        )
    )
    response = search(store, "why did we choose redis over memcached for the session cache?")
    assert response.results[0].text.endswith("because it persists them.")


def _session_with_events() -> MemoryStore:
    fail = "=== RUN   {name}\n    x_test.go:{line}: {msg}\n--- FAIL: {name} (0.00s)\nFAIL\nExit code 1"
    turns = [
        text("user", "port the ledger module to the new clock"),
        edit("e1", "ledger/clock.go", "package ledger"),
        bash("t1", "go test ./ledger/..."),
        output(
            "t1", filler(40, "ok") + "\n" + fail.format(name="TestLedgerOpen", line=12, msg="got 3, want 4")
        ),
        edit("e2", "ledger/ledger.go", "func Open() {}"),
        bash("g1", 'git commit -m "Port the ledger to the new clock"'),
        output(
            "g1",
            "[feature/clock 1a2b3c4] Port the ledger to the new clock\n 2 files changed, 9 insertions(+)",
        ),
        edit("e3", "ledger/clock.go", "func Now() {}", old="package ledger"),
        bash("t2", "go test ./ledger/..."),
        output("t2", fail.format(name="TestLedgerClose", line=40, msg="close twice")),
        edit("e4", "ledger/clock.go", "func Since() {}", old="func Now() {}"),
        bash("g2", 'git commit -m "Close the ledger once"'),
        output("g2", "[feature/clock 5d6e7f8] Close the ledger once\n 1 file changed, 2 insertions(+)"),
    ]
    other = [
        text("user", "write the release notes for the ledger"),
        text("assistant", "Release notes drafted."),
    ]
    return stored(
        exchange(turns, session="s-clock", at=1000.0), exchange(other, session="s-notes", at=2000.0)
    )


def _first(response: RecallResponse) -> str:
    return response.results[0].text


def test_first_last_after_and_most_often_are_about_time_and_events() -> None:
    """The asked events, their order and the anchor weigh results up within bounds
    (``engine.boost``): the event asked about is in the tool result the model reads, with
    its message, even where the question's words match something else better."""
    store = _session_with_events()

    def shown(query: str) -> str:
        return format_response(search(store, query))

    assert "--- FAIL: TestLedgerOpen" in shown("which test failed first?")
    assert "--- FAIL: TestLedgerClose" in shown("which test was the last one we saw failing?")
    assert "1a2b3c4" in shown("what short hash did the first commit get?")
    after = search(store, "what did we commit right after 'Port the ledger to the new clock'?")
    assert "Close the ledger once" in _first(after)
    assert "ledger/clock.go" in _first(search(store, "which file did we change most often?"))
    assert "ledger/clock.go" in _first(search(store, "which file did we edit first?"))
    both = shown("which test failed first, and with what message?")
    assert "TestLedgerOpen" in both and "got 3, want 4" in both


def test_a_quoted_first_prompt_names_the_session_to_search() -> None:
    store = _session_with_events()
    named = search(store, 'In the session that started with "write the release notes ...", what did we do?')
    assert named.metadata["session"] == "s-notes"
    assert {r.meta["session"] for r in named.results} == {"s-notes"}
    assert any("s-notes" in note for note in named.notes)
    # The session's name is not searched for: its first message is not the answer.
    assert "Release notes drafted." in format_response(named)
    # A quote that names no session is searched as words.
    plain = search(store, 'what failed with "got 3, want 4"?')
    assert "session" not in plain.metadata and "TestLedgerOpen" in format_response(plain)


def test_intent_parsing() -> None:
    i = parse('In the session that started with "port the ledger ...", which linter flagged something first?')
    assert i.session_quote == "port the ledger" and i.order == "first" and i.events == ("lintfinding",)
    assert "session" not in i.text and "first" not in i.text
    j = parse("what did we commit right after 'Fix the 'old' parser'?")
    assert (j.anchor, j.anchor_side, j.events) == ("Fix the 'old' parser", "after", ("gitcommit",))
    assert parse("which command was the first to fail (exit code 3)?").events[:2] == (
        "exitcode3",
        "failedcommand",
    )
    assert parse("which file did we change most often?").order == "most"
    assert parse("how does the cache work?").plain


# -- opening, merging -----------------------------------------------------------------------------


def test_opening_a_passage_shows_its_region_and_pages_through_the_item() -> None:
    store = stored(exchange([bash("c1", "make all"), output("c1", filler(400, "step"))], session="s-open"))
    engine = store_recall_engine(store)
    hit = asyncio.run(engine.search("step 200", "project", None, PROJECT, 5)).results[0]
    opened = asyncio.run(recall(engine, hit.id))
    first, last, total = opened.results[0].meta["region"]
    index = int(hit.id.rsplit(":", 1)[1])
    assert first == index - 1 and last > index and total > last
    shown = format_response(opened)
    assert "step 200:" in shown and "step 0:" not in shown
    assert f'after: recall(id="{opened.results[0].meta["next"]}")' in shown
    assert opened.results[0].meta["previous"].endswith(f":{first - 1}")
    # The tool takes the same ids.
    assert "step 200:" in asyncio.run(run_recall(engine, {"id": hit.id}))


def _result(rid: str, item: str, passage: int, text_: str, score: float) -> RecallResult:
    return RecallResult(
        rid,
        "message",
        score,
        text_,
        {"item": item, "passage": passage, "span": (passage * 10, passage * 10 + 9)},
    )


def test_passages_of_one_item_are_one_result_and_repeats_drop() -> None:
    results = [
        _result("t:a:3", "a", 3, "[tool] part 4/9\nthree", 0.9),
        _result("t:b:0", "b", 0, "[user]\nsame words", 0.8),
        _result("t:a:4", "a", 4, "[tool] part 5/9\nfour", 0.7),
        _result("t:a:7", "a", 7, "[tool] part 8/9\nseven", 0.6),
        _result("t:c:0", "c", 0, "[user]\nsame words", 0.5),
        _result("t:a:1", "a", 1, "[tool] part 2/9\none", 0.4),
    ]
    grouped = distinct(group_passages(results))
    assert [r.id for r in grouped] == ["t:a:3", "t:b:0"]
    # In the item's order; a gap where they are not adjacent; at most three of one item.
    assert grouped[0].text == "[tool] part 4/9\nthree\n[tool] part 5/9\nfour\n[...]\n[tool] part 8/9\nseven"
    assert grouped[0].meta["span"] == (30, 79) and grouped[0].meta["passages"] == [3, 4, 7]


def _tagged(item: str, passage: int, score: float, tags: list[str]) -> RecallResult:
    header = f"[assistant -> Task] part {passage + 1}/30" + "".join(f" #{t}" for t in tags)
    r = _result(f"t:{item}:{passage}", item, passage, f"{header}\nstep {passage}", score)
    r.meta["tags"] = tags
    return r


def test_an_items_passages_recording_the_asked_event_are_the_ones_shown() -> None:
    """A run of subagent calls stored as one item: the vectors like three passages of
    reports best, but the question asks which job was handed to a subagent, and the first:
    the item shows its tagged passages, the earliest of them, and still ranks by its best."""
    results = [
        _tagged("a", 5, 0.9, []),
        _tagged("a", 6, 0.8, []),
        _tagged("b", 0, 0.75, []),
        _tagged("a", 20, 0.7, ["subagent"]),
        _tagged("a", 9, 0.6, ["subagent"]),
        _tagged("a", 7, 0.5, []),
        _tagged("a", 1, 0.4, ["subagent"]),
        _tagged("a", 14, 0.3, ["subagent"]),
    ]
    plain = group_passages(results)
    assert plain[0].meta["passages"] == [5, 6, 20]  # by score: the event's first call is not shown
    first = group_passages(results, ["subagent"], "first")
    assert [r.id for r in first] == ["t:a:5", "t:b:0"] and first[0].score == 0.9
    assert first[0].meta["passages"] == [1, 9, 14] and first[0].meta["tags"] == ["subagent"]
    assert group_passages(results, ["subagent"], "last")[0].meta["passages"] == [9, 14, 20]
    assert group_passages(results, ["subagent"])[0].meta["passages"] == [1, 9, 20]  # by score


def test_a_long_failing_log_is_shown_from_its_failures() -> None:
    """Several passages of one test log in one result are each cut where the asked event
    shows, not where the question's words are densest (every line of a Go test run says
    "test")."""
    noisy = "\n".join(f"ok   shop/integration_test/pkg{i}_test   (cached)" for i in range(13))
    log = "\n".join(f"{noisy}\n--- FAIL: TestCheckout{n} (0.02s)" for n in ("Totals", "Taxes", "Refunds"))
    store = stored(exchange([bash("c1", "go test ./..."), output("c1", log)], session="s-log"))
    response = search(store, "which tests failed?")
    assert len(response.results[0].meta["texts"]) == 3  # three passages of the log, one result
    shown = format_response(response)
    assert all(f"--- FAIL: TestCheckout{n}" in shown for n in ("Totals", "Taxes", "Refunds"))
