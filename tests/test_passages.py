"""The passage rules (lore_core/storage/passages.py): where items are cut, what each passage says
about where it came from, the events it records, and that every backend gets the same."""

from __future__ import annotations

import json

from lore_core.storage.facets import MAX_FACETS, facets
from lore_core.storage.passages import (
    MAX_CHARS,
    CallMemo,
    cut,
    cut_text,
    item_text,
    message_passages,
    passage_key,
    split_key,
)
from lore_core.storage.tags import (
    BUILD_ERROR,
    CODE_SEARCH,
    FAILED_COMMAND,
    FILE_CREATED,
    FILE_EDITED,
    GIT_COMMIT,
    LINT_FINDING,
    SUBAGENT,
    TASK_PLAN,
    TEST_FAILURE,
    TEST_WRITTEN,
    TICKET,
    tags_of,
)
from lore_core.storage.toolcalls import call_source, render_call, result_text


def call(name: str, call_id: str, tool_input: object) -> dict:
    return {"type": "tool_call", "tool_name": name, "tool_call_id": call_id, "tool_input": tool_input}


def result(call_id: str, text: str, **extra: object) -> dict:
    return {"type": "tool_result", "tool_call_id": call_id, "text": text, **extra}


def log(lines: int, word: str = "ok") -> str:
    return "\n".join(
        f"{word}   pkg/module{i}   0.{i:02d}s   nothing to see on this line" for i in range(lines)
    )


def go_failure() -> str:
    """A Go test run whose failing test's message sits a passage before its FAIL line (long
    log lines between them)."""
    long_lines = "\n".join(f"    session_test.go:{80 + i}: state: {'{' + 'x' * 260 + '}'}" for i in range(3))
    return (
        log(60)
        + "\n=== RUN   TestSession\n    session_test.go:50: Session A has 1 checkpoint(s)\n"
        + log(4)
        + "\n"
        + long_lines
        + "\n--- FAIL: TestSession (0.53s)\nFAIL\n"
    )


def test_passages_are_bounded_and_their_spans_are_the_items_text() -> None:
    blocks = [
        {"type": "text", "text": "Let me run the whole suite."},
        call("Bash", "c1", {"command": "go test ./...", "description": "run tests"}),
    ]
    output = [result("c1", log(300), tool_name="Bash", tool_source="go test ./...")]
    for role, bs in (("assistant", blocks), ("user", output)):
        passages = cut(role, bs)
        text = item_text(role, bs)
        assert [p.index for p in passages] == list(range(len(passages)))
        for p in passages:
            assert len(p.text) <= MAX_CHARS + 200  # the header line on top of the body
            assert text[p.start : p.end] == p.body
        # Nothing of the text is lost between passages (only blank lines at the cuts).
        assert "".join(text[p.start : p.end] for p in passages).replace("\n", "") == text.replace("\n", "")
    # A short text and the call it introduces read as one passage.
    (first,) = cut("assistant", blocks)
    assert first.text.startswith("[assistant -> Bash]\nLet me run the whole suite.\n\nBash: go test ./...")


def test_a_tool_output_says_which_call_produced_it_in_every_passage() -> None:
    output = log(120) + "\nExit code 1"
    passages = cut("user", [result("c9", output, tool_name="Bash", tool_source="make check")])
    assert len(passages) > 2
    for n, p in enumerate(passages, start=1):
        assert p.text.startswith(f"[tool Bash, exit 1: make check] part {n}/{len(passages)}")
        assert (p.tool, p.source) == ("Bash", "make check")
    # The exit status is an event of the output's first passage only (one event, one hit).
    assert FAILED_COMMAND in passages[0].tags and all(FAILED_COMMAND not in p.tags for p in passages[1:])


def test_results_stored_without_their_tool_are_named_from_earlier_calls() -> None:
    memo = CallMemo()
    memo.cut("s1", "assistant", [call("Grep", "g1", {"pattern": "TODO"})])
    (passage,) = memo.cut("s1", "user", [result("g1", "a.py:3: TODO")])
    assert passage.text.startswith("[tool Grep: TODO]")
    # Another session's call of the same id is not this one's.
    (other,) = memo.cut("s2", "user", [result("g1", "b.py:1: TODO")])
    assert other.text.startswith("[tool output]")


def test_tool_calls_render_as_readable_lines_and_patches_name_their_files() -> None:
    text = render_call("Edit", {"file_path": "a.go", "old_string": "x := 1", "new_string": "x := 2\ny := 3"})
    assert text == "Edit: a.go\nnew_string:\nx := 2\ny := 3\nold_string: x := 1"
    assert "\\n" not in render_call("Bash", {"command": "printf 'a\nb'", "timeout": 1000})
    assert "timeout" not in render_call("Bash", {"command": "ls", "timeout": 1000})
    patch = "*** Begin Patch\n*** Update File: /r/a.go\n@@\n-a\n+b\n*** Add File: /r/b.go\n+c\n*** End Patch"
    assert call_source(patch) == "/r/a.go, /r/b.go"
    # A harness's JSON envelope around an output is read as the output.
    wrapped = json.dumps({"output": "Success.\nA /r/b.go\n", "metadata": {"exit_code": 2}})
    assert result_text(wrapped) == "Exit code 2\nSuccess.\nA /r/b.go\n"


def test_events_are_tagged_where_their_evidence_is() -> None:
    failing = (
        log(60)
        + "\n=== RUN   TestParser\n    parser_test.go:12: got 1, want 2\n--- FAIL: TestParser (0.00s)\n"
        + log(60)
    )
    passages = cut("user", [result("t", failing, tool_name="Bash", tool_source="go test ./...")])
    tagged = [p for p in passages if TEST_FAILURE in p.tags]
    assert any("--- FAIL: TestParser" in p.text for p in tagged)
    assert any("parser_test.go:12: got 1, want 2" in p.text for p in tagged)
    assert len(tagged) < len(passages)

    # Go prints a test's messages before its FAIL line; long lines between them push the
    # FAIL line deep into the next passage, whose tag then marks the one before it too.
    passages = cut("user", [result("g", go_failure(), tool_name="Bash", tool_source="go test ./...")])
    failing = next(p for p in passages if "--- FAIL: TestSession" in p.text)
    assert "session_test.go:50" not in failing.text and TEST_FAILURE in failing.tags
    before = passages[failing.index - 1]
    assert "session_test.go:50: Session A has 1 checkpoint(s)" in before.text
    assert TEST_FAILURE in before.tags

    lint = "internal/a.go:85:1: directive `//nolint` is unused (nolintlint)\n1 issues."
    (p,) = cut("user", [result("l", lint, tool_name="Bash", tool_source="golangci-lint run")])
    assert LINT_FINDING in p.tags and BUILD_ERROR not in p.tags
    compile_error = "# pkg\ninternal/a.go:36:24: cannot use x (variable of type int) as string value"
    (p,) = cut("user", [result("b", compile_error, tool_name="Bash", tool_source="go build ./...")])
    assert BUILD_ERROR in p.tags
    # A file read or a search shows code, not events.
    (p,) = cut("user", [result("r", compile_error, tool_name="Read", tool_source="notes.txt")])
    assert p.tags == ()
    commit = "[main 1a2b3c4] Fix the parser\n 2 files changed, 10 insertions(+), 1 deletion(-)"
    (p,) = cut("user", [result("c", commit, tool_name="Bash", tool_source='git commit -m "Fix the parser"')])
    assert GIT_COMMIT in p.tags and "diffstat" in p.tags


def test_file_edits_plans_agents_and_searches_are_tagged_on_their_call() -> None:
    new_test = {"file_path": "p_test.go", "content": "package p\n\nfunc TestNew(t *testing.T) {}\n"}
    (write,) = cut("assistant", [call("Write", "w", new_test)])
    assert {FILE_CREATED, FILE_EDITED, TEST_WRITTEN} <= set(write.tags)
    # Editing an existing test is not writing a new one.
    existing = {
        "file_path": "p_test.go",
        "old_string": "func TestOld(t *testing.T) {}",
        "new_string": "func TestOld(t *testing.T) { t.Skip() }",
    }
    (edit,) = cut("assistant", [call("Edit", "e", existing)])
    assert FILE_EDITED in edit.tags and TEST_WRITTEN not in edit.tags
    assert TASK_PLAN in cut("assistant", [call("TodoWrite", "p", {"todos": [{"content": "a"}]})])[0].tags
    assert (
        SUBAGENT in cut("assistant", [call("Task", "a", {"description": "explore", "prompt": "x"})])[0].tags
    )
    assert CODE_SEARCH in cut("assistant", [call("Bash", "s", {"command": "rg -n parse src"})])[0].tags
    # Tags are single words in the header, so a full-text search for one finds them.
    assert set(tags_of(write.text)) == set(write.tags)


def test_a_ticket_is_tagged_on_its_call_and_on_the_output_naming_it() -> None:
    tool = "mcp__linear-server__create_issue"
    (made,) = cut("assistant", [call(tool, "t", {"title": "Auto-summarise", "team": "ENT"})])
    (named,) = cut("user", [result("t", '{"id": "ENT-163", "url": "https://linear.app/x"}', tool_name=tool)])
    assert TICKET in made.tags and TICKET in named.tags and "ENT-163" in named.text
    (failed,) = cut("user", [result("t", "team not found", tool_name=tool, is_error=True)])
    assert TICKET not in failed.tags and FAILED_COMMAND in failed.tags
    (listed,) = cut("user", [result("l", '{"id": "ENT-96"}', tool_name="mcp__linear-server__list_issues")])
    assert listed.tags == ()


def test_recall_results_and_housekeeping_are_not_passages() -> None:
    blocks = [
        {"type": "text", "text": "<system-reminder>internal note</system-reminder>"},
        result("r1", "copied memories", tool_name="recall"),
        {"type": "text", "text": "the real question"},
    ]
    passages = cut("user", blocks)
    assert [p.body for p in passages] == ["the real question"]


def test_distillations_and_plain_texts_are_cut_on_lines() -> None:
    log_text = "## 2026-03-01\n" + "\n".join(
        f"- [10:{i:02d}] did step {i} of the migration" for i in range(80)
    )
    passages = cut_text(log_text)
    assert len(passages) > 1 and passages[0].text.startswith("[distillation]")
    assert passages[1].text.startswith("[distillation 2026-03-01] part 2/")
    # A message written without blocks is cut from its text.
    assert message_passages("user", [], "hand written")[0].text == "[user]\nhand written"


def test_passage_keys() -> None:
    assert passage_key("abc", 3) == "abc:3"
    assert split_key("abc:3") == ("abc", 3)
    assert split_key("d:abc:0") == ("d:abc", 0)
    assert split_key("abc") == ("abc", None)


def test_evidence_offset_points_at_the_line_that_shows_the_event() -> None:
    from lore_core.storage.tags import evidence_offset

    body = (
        "\n".join(f"ok   pkg/integration_test{i}   (cached)" for i in range(15)) + "\n--- FAIL: TestX (0.1s)"
    )
    (p,) = cut("user", [result("t", body, tool_name="Bash", tool_source="go test ./...")])
    at = evidence_offset(p.text, [TEST_FAILURE])
    assert at is not None and p.text[at:].lstrip().startswith("--- FAIL: TestX")
    assert evidence_offset(p.text, [LINT_FINDING]) is None  # not shown here


def test_facets_are_the_sentences_of_what_the_user_wrote() -> None:
    remark = (
        "I'm looking for workout playlists for my runs. Something upbeat would be great! "
        "By the way, I take Zumba classes on Tuesdays and Thursdays at 7 PM.\nThanks."
    )
    (passage,) = cut("user", [{"type": "text", "text": remark}])
    assert facets("user", passage) == [
        "I'm looking for workout playlists for my runs.",
        "Something upbeat would be great! By the way, I take Zumba classes on Tuesdays and "
        "Thursdays at 7 PM. Thanks.",
    ]  # a short sentence joins the next one, a short tail the last
    # One sentence is the passage itself; the assistant's words and tool output get none.
    (single,) = cut("user", [{"type": "text", "text": "Please rename the config loader to settings."}])
    assert facets("user", single) == []
    (said,) = cut("assistant", [{"type": "text", "text": remark}])
    assert facets("assistant", said) == []
    result = {"type": "tool_result", "tool_call_id": "c1", "tool_name": "Bash", "text": remark}
    assert all(facets("user", p) == [] for p in cut("user", [result]))
    # A long paste is capped per passage.
    paste = "\n".join(f"line {i} of a log that the user pasted into the prompt" for i in range(40))
    assert all(len(facets("user", p)) <= MAX_FACETS for p in cut("user", [{"type": "text", "text": paste}]))


def test_markup_and_code_lines_are_no_facets() -> None:
    echo = (
        "<command-name>/exit</command-name> <command-message>exit</command-message>\n"
        "<local-command-stdout>Catch you later!</local-command-stdout>"
    )
    (passage,) = cut("user", [{"type": "text", "text": echo}])
    assert facets("user", passage) == []
    pasted = (
        "Why does this fail on the second run of the nightly job?\n"
        "2026-01-23T10:41:07.123Z 0x7f3a 4096 8192 16384 -> 502 /v1/a/b/c/d/e/f\n"
        "It looks like the cache is never cleared between runs."
    )
    (passage,) = cut("user", [{"type": "text", "text": pasted}])
    assert facets("user", passage) == [
        "Why does this fail on the second run of the nightly job?",
        "It looks like the cache is never cleared between runs.",
    ]


def test_a_cut_until_a_passage_makes_the_same_passages_up_to_it() -> None:
    """Reading one passage of a long item cuts it only that far (``until``): every passage
    up to it is the one the whole cut makes, tags included (a Go failure's FAIL line in a
    later passage still tags the passage before it)."""
    go = go_failure() + log(80)
    items = [
        ("user", [result("g", go, tool_name="Bash", tool_source="go test ./...")]),
        (
            "assistant",
            [
                {"type": "text", "text": "Let me look."},
                call("Bash", "c1", {"command": "ls"}),
                {"type": "thinking", "text": "The parser. " * 150},
                call("Read", "c2", {"file_path": "a.go"}),
                {"type": "text", "text": "Now the tests."},
                call("Bash", "c3", {"command": "go test ./..."}),
                result("c3", log(200), tool_name="Bash", tool_source="go test ./..."),
                {"type": "text", "text": "Done: " + "all green. " * 40},
            ],
        ),
    ]
    for role, blocks in items:
        whole = cut(role, blocks)
        assert len(whole) > 5
        for until in range(len(whole) + 2):
            part = cut(role, blocks, until=until)
            assert part[: until + 1] == whole[: until + 1], (role, until)
            assert len(part) <= len(whole)
        assert message_passages(role, blocks, until=2)[:3] == whole[:3]
    # The failure's passage and the one before it carry the tag in both.
    tagged = [p.index for p in cut("user", items[0][1]) if TEST_FAILURE in p.tags]
    assert len(tagged) >= 2 and all(TEST_FAILURE in cut("user", items[0][1], until=i)[i].tags for i in tagged)
