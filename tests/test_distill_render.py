"""The observer's input: rendering (long tool outputs, housekeeping, secrets) and segmentation."""

from __future__ import annotations

from lore_core.curation import DistillInput
from lore_core.distill.render import render_message, render_segment, strip_housekeeping
from lore_core.distill.segment import SegmentPolicy, estimate_tokens, split_segments
from lore_core.model import IMAGE, TEXT, THINKING, TOOL_CALL, TOOL_RESULT, Block

T0 = 1_790_000_000.0  # 2026-09-21 14:13:20 UTC

PATHS = [
    "tests/test_api.py",
    "lore_core/routes.py",
    "/home/dev/project/pyproject.toml",
    "src/components/Button.tsx",
    "setup.cfg",
]
ERRORS = [
    "E       AssertionError: expected 200, got 404",
    "FAILED tests/test_api.py::test_get_user - KeyError: 'user_id'",
    "ModuleNotFoundError: No module named 'lore_core.http.api'",
]


def big_test_log(size: int = 50_000) -> str:
    """A pytest run of about ``size`` bytes: mostly noise, a few paths and error lines."""
    lines = ["============================= test session starts =============================="]
    lines.append(f"rootdir: {PATHS[2].rsplit('/', 1)[0]}, configfile: {PATHS[2]}")
    noise = 0
    while sum(len(line) + 1 for line in lines) < size:
        noise += 1
        lines.append(f"DEBUG worker heartbeat {noise:06d} queue depth nominal, nothing to report here")
        if noise == 150:
            lines += [f"{PATHS[0]}:41: in test_get_user", ERRORS[0]]
        if noise == 300:
            lines += [f'  File "{PATHS[1]}", line 12, in <module>', ERRORS[2]]
        if noise == 450:
            lines.append(f"collected from {PATHS[3]} and {PATHS[4]}")
    lines += [ERRORS[1], "=================== 1 failed, 117 passed in 4.21s ==================="]
    return "\n".join(lines)


def msg(i: int, role: str, *blocks: Block, at: float | None = None) -> DistillInput:
    return DistillInput(f"m{i}", role, T0 + i * 10 if at is None else at, list(blocks))


def text(s: str) -> Block:
    return Block(TEXT, text=s)


# -- long tool outputs ---------------------------------------------------------------------------


def test_50kb_tool_output_is_annotated_under_the_cap_keeping_paths_and_errors():
    log = big_test_log()
    assert len(log.encode()) >= 50_000
    messages = [
        msg(0, "user", text("run the API tests")),
        msg(
            1,
            "assistant",
            Block(TOOL_CALL, tool_name="Bash", tool_call_id="c1", tool_input={"command": "pytest"}),
        ),
        msg(2, "user", Block(TOOL_RESULT, tool_call_id="c1", text=log, is_error=True)),
        msg(3, "assistant", text("One failure, in tests/test_api.py.")),
    ]
    policy = SegmentPolicy()
    rendered = render_segment(messages, policy.tool_output_max_chars)

    assert estimate_tokens(rendered) < policy.max_tokens
    output_part = rendered.split("tool <- Bash (error):\n", 1)[1].split("\n[14:13:50]", 1)[0]
    assert len(output_part) <= policy.tool_output_max_chars
    assert "long output of Bash omitted" in output_part
    assert f"{len(log.splitlines())} lines" in output_part and "errors: yes" in output_part
    for path in PATHS:
        assert path in output_part, path
    for error in ERRORS:
        assert error.strip() in output_part, error
    assert "1 failed, 117 passed in 4.21s" in output_part  # the last lines survive
    assert "heartbeat 000777" not in rendered  # the noise does not


def test_short_tool_output_is_kept_verbatim_and_named_after_its_call():
    messages = [
        msg(
            0,
            "assistant",
            Block(TOOL_CALL, tool_name="Read", tool_call_id="r1", tool_input={"file_path": "a.py"}),
        ),
        msg(1, "user", Block(TOOL_RESULT, tool_call_id="r1", text="line one\nline two")),
    ]
    rendered = render_segment(messages)
    assert 'assistant -> Read {"file_path": "a.py"}' in rendered
    assert "tool <- Read:\nline one\nline two" in rendered


def test_the_annotation_never_exceeds_the_limit_even_with_thousands_of_paths_and_errors():
    log = "\n".join(f"ERROR in pkg/mod{i}/file{i}.py: failed with code {i}" for i in range(5000))
    block = Block(TOOL_RESULT, tool_name="Bash", text=log)
    for limit in (500, 1000, 4000):
        out = render_message(msg(0, "user", block), tool_output_max_chars=limit)
        body = out.split(":\n", 1)[1]
        assert len(body) <= limit
        assert "pkg/mod0/file0.py" in body and "(+" in body  # says how many more there were


def test_huge_tool_inputs_are_cut_down():
    content = "x = 1\n" * 20_000
    call = Block(TOOL_CALL, tool_name="Write", tool_input={"file_path": "big.py", "content": content})
    out = render_message(msg(0, "assistant", call))
    assert "big.py" in out and len(out) < 1000 and "lines]" in out


# -- housekeeping and secrets --------------------------------------------------------------------


def test_system_reminders_never_reach_the_observer():
    reminder = "<system-reminder>\nThe TodoWrite tool hasn't been used recently. ZEBRA-1\n</system-reminder>"
    messages = [
        msg(0, "user", text(f"{reminder}\nfix the login bug")),
        msg(1, "user", Block(TOOL_RESULT, tool_name="Read", text=f"def login(): ...\n{reminder}")),
        msg(2, "user", text(reminder)),  # housekeeping only: nothing left to render
        msg(3, "user", text("<environment_context><cwd>/x</cwd></environment_context>go on")),
        msg(4, "user", text("cut short <system-reminder>ZEBRA-2 never closed")),
    ]
    rendered = render_segment(messages)
    assert "ZEBRA" not in rendered and "system-reminder" not in rendered
    assert "environment_context" not in rendered
    assert "fix the login bug" in rendered and "def login()" in rendered and "go on" in rendered
    assert "cut short" in rendered
    assert render_message(messages[2]) == ""
    assert strip_housekeeping("a <system-reminder x='1'>b</system-reminder> c") == "a c"


def test_obvious_secrets_are_masked_everywhere():
    anthropic = "sk-ant-api03-" + "a1B2" * 10
    openai = "sk-proj-" + "Zz9" * 10
    private = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"
    long_output = ("noise line\n" * 600) + f"Error: auth failed for {openai}\n"
    messages = [
        msg(0, "user", text(f"use {anthropic} for now")),
        msg(
            1, "assistant", Block(TOOL_CALL, tool_name="Bash", tool_input={"command": f"export KEY={openai}"})
        ),
        msg(2, "user", Block(TOOL_RESULT, tool_name="Bash", text=f"wrote id_rsa:\n{private}")),
        msg(3, "user", Block(TOOL_RESULT, tool_name="Bash", text=long_output)),  # annotated
    ]
    rendered = render_segment(messages)
    for secret in (anthropic, openai, "MIIEowIBAAKCAQEA"):
        assert secret not in rendered
    assert "[REDACTED:anthropic-key]" in rendered and "[REDACTED:private-key]" in rendered
    assert "Error: auth failed for [REDACTED:openai-key]" in rendered


def test_roles_dates_and_block_kinds():
    messages = [
        msg(0, "system", text("You are Claude Code")),
        msg(1, "developer", text("instructions")),
        msg(2, "user", text("first"), Block(IMAGE)),
        msg(3, "assistant", Block(THINKING, text="private reasoning"), text("answer")),
        msg(4, "user", text("next day"), at=T0 + 86_400),
    ]
    rendered = render_segment(messages)
    assert "You are Claude Code" not in rendered and "instructions" not in rendered
    assert "private reasoning" not in rendered
    assert rendered.splitlines() == [
        "## 2026-09-21",
        "[14:13:40] user: first",
        "[image]",
        "[14:13:50] assistant: answer",
        "## 2026-09-22",
        "[14:13:20] user: next day",
    ]


# -- segmentation --------------------------------------------------------------------------------


def chat(count: int, words: int = 20, start: float = T0, step: float = 10) -> list[DistillInput]:
    body = " ".join(f"word{i}" for i in range(words))
    return [
        DistillInput(f"m{i}", "user" if i % 2 == 0 else "assistant", start + i * step, [text(body)])
        for i in range(count)
    ]


def test_first_segment_needs_five_messages_and_64_tokens():
    assert split_segments(chat(4, words=100)) == []  # enough tokens, too few messages
    assert split_segments(chat(5, words=1)) == []  # enough messages, too few tokens
    [segment] = split_segments(chat(5, words=20))
    assert segment.ids == ["m0", "m1", "m2", "m3", "m4"] and segment.reason == "end"
    # Later segments have no minimum.
    assert len(split_segments(chat(1, words=1), first=False)) == 1


def test_long_pause_splits_but_not_a_first_segment_below_the_minimum():
    messages = chat(3) + chat(6, start=T0 + 7200)
    for i, m in enumerate(messages):
        m.id = f"m{i}"
    # The pause comes after 3 messages: the first segment keeps growing past it.
    [first] = split_segments(messages)
    assert len(first.ids) == 9
    # With earlier distillations, the same pause ends a segment.
    later = split_segments(messages, first=False)
    assert [len(s.ids) for s in later] == [3, 6] and later[0].reason == "gap"
    # A pause after the minimum ends the first segment too.
    messages = chat(5) + chat(2, start=T0 + 7200)
    assert [len(s.ids) for s in split_segments(messages)] == [5, 2]


def test_token_cap_splits_and_uses_the_given_estimate():
    messages = chat(40, words=200)  # ~1.6K chars, ~400 tokens each
    segments = split_segments(messages, SegmentPolicy(max_tokens=2000))
    assert len(segments) > 1
    assert all(s.tokens <= 2000 for s in segments)
    assert [m.id for s in segments for m in s.messages] == [m.id for m in messages]
    assert {s.reason for s in segments[:-1]} == {"cap"}
    # A word-counting estimate sees fewer tokens, so fewer segments.
    by_words = split_segments(messages, SegmentPolicy(max_tokens=2000), estimate=lambda s: len(s.split()))
    assert len(by_words) < len(segments)


def test_a_segment_with_a_huge_tool_output_is_measured_after_annotation():
    messages = [*chat(5), msg(5, "user", Block(TOOL_RESULT, tool_name="Bash", text=big_test_log(200_000)))]
    [segment] = split_segments(messages, SegmentPolicy(max_tokens=4000))
    assert segment.tokens < 4000  # the raw output alone would be ~50K tokens


def test_inputs_from_stored_block_dicts():
    stored = [
        {"type": "tool_call", "tool_name": "Bash", "tool_call_id": "c9", "tool_input": {"command": "make"}},
        {"type": "tool_result", "tool_call_id": "c9", "text": "make: *** [all] Error 2", "is_error": True},
    ]
    item = DistillInput.from_block_dicts("id1", "assistant", T0, stored)
    assert [b.type for b in item.blocks] == [TOOL_CALL, TOOL_RESULT]
    rendered = render_segment([item])
    assert 'assistant -> Bash {"command": "make"}' in rendered
    assert "tool <- Bash (error):\nmake: *** [all] Error 2" in rendered
