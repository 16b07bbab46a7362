"""The extractive observer keeps the lines with facts (paths, errors, commands, numbers,
decisions) and drops the chatter, deterministically and without any LLM."""

from __future__ import annotations

import asyncio

from lore_core.distill.extractive import extractive_observe
from lore_core.distill.inputs import DistillInput
from lore_core.distill.observer import ExtractiveObserver
from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT, Block

T0 = 1_790_000_000.0  # 2026-09-21 14:13:20 UTC


def m(i: int, role: str, *blocks: Block) -> DistillInput:
    return DistillInput(f"m{i}", role, T0 + 60 * i, list(blocks))


def text(s: str) -> Block:
    return Block(TEXT, text=s)


SESSION = [
    m(0, "user", text("The login endpoint returns 500 since yesterday.\nThanks, you're great!")),
    m(
        1,
        "assistant",
        text("Sure! Let me take a look at that for you.\nI'll start by reading the handler."),
        Block(TOOL_CALL, tool_name="Read", tool_call_id="r1", tool_input={"file_path": "app/auth/login.py"}),
    ),
    m(2, "user", Block(TOOL_RESULT, tool_call_id="r1", text="def login(req):\n    return handle(req)\n")),
    m(
        3,
        "assistant",
        Block(TOOL_CALL, tool_name="Bash", tool_call_id="b1", tool_input={"command": "pytest -q"}),
    ),
    m(
        4,
        "user",
        Block(
            TOOL_RESULT,
            tool_call_id="b1",
            is_error=True,
            text=(
                "....F....\n"
                "app/auth/login.py:14: in login\n"
                "E   KeyError: 'session_token'\n"
                "FAILED tests/test_login.py::test_login_ok - KeyError: 'session_token'\n"
                "1 failed, 57 passed in 2.84s\n"
            ),
        ),
    ),
    m(
        5,
        "assistant",
        text(
            "Looks good so far.\n"
            "Root cause: the cookie middleware renamed session_token to sid in v2.3.1.\n"
            "I decided to read `sid` and fall back to session_token instead of pinning the middleware, "
            "because other services already send sid.\n"
            "Run `git diff app/auth` to see it.\n"
            "Okay."
        ),
    ),
    m(6, "user", text("does it also need a migration?\n$ alembic upgrade head")),
]


def test_keeps_paths_errors_commands_numbers_and_decisions():
    out = extractive_observe(SESSION)
    # Paths, from text, tool calls and tool output.
    assert "app/auth/login.py" in out and "tests/test_login.py" in out
    # Error lines and the test summary.
    assert "E KeyError: 'session_token'" in out
    assert "FAILED tests/test_login.py::test_login_ok - KeyError: 'session_token'" in out
    assert "1 failed, 57 passed in 2.84s" in out
    # Commands: tool calls, shell prompts and backticked commands.
    assert "-> Bash: pytest -q" in out and "-> Read: app/auth/login.py" in out
    assert "$ alembic upgrade head" in out and "`git diff app/auth`" in out
    # Numbers and decisions.
    assert "returns 500 since yesterday" in out and "v2.3.1" in out
    assert "I decided to read `sid` and fall back to session_token instead of pinning" in out
    # Dated and timestamped.
    assert out.splitlines()[0] == "## 2026-09-21"
    assert "[14:13] user:" in out and "[14:18] assistant:" in out


def test_drops_chatter_and_plain_file_contents():
    out = extractive_observe(SESSION)
    for chatter in ("Thanks, you're great", "Sure! Let me take a look", "Looks good so far", "Okay."):
        assert chatter not in out
    assert "return handle(req)" not in out


def test_marks_user_questions_apart_from_assertions():
    out = extractive_observe(SESSION)
    assert "user: (asks) does it also need a migration?" in out
    assert "user: The login endpoint returns 500 since yesterday." in out


def test_does_not_repeat_previous_observations_or_itself():
    first = extractive_observe(SESSION[:5])
    again = extractive_observe(SESSION, previous=first)
    assert "KeyError: 'session_token'" not in again.split("Root cause")[0]
    assert "Root cause" in again
    doubled = extractive_observe(
        [*SESSION, m(7, "user", text("The login endpoint returns 500 since yesterday."))]
    )
    assert doubled.count("returns 500 since yesterday") == 1


def test_is_deterministic_masks_secrets_and_skips_housekeeping():
    key = "sk-ant-api03-" + "x9" * 20
    extra = [
        m(
            8,
            "user",
            text(f"<system-reminder>todo list 42 items</system-reminder>\nuse key {key} on port 8443"),
        ),
    ]
    out = extractive_observe(SESSION + extra)
    assert out == extractive_observe(SESSION + extra)
    assert key not in out and "[REDACTED:anthropic-key]" in out and "8443" in out
    assert "todo list" not in out


def test_extractive_observer_provenance():
    result = asyncio.run(ExtractiveObserver().observe(SESSION))
    prov = result.provenance
    assert prov.method == "extractive" and prov.generation == 0
    assert prov.source_ids == [f"m{i}" for i in range(7)]
    assert prov.worker_model is None and prov.cost == 0
    assert prov.start == T0 and prov.end == T0 + 360
    assert prov.output_tokens > 0 and prov.source_tokens > 0
    assert prov.compression_ratio == round(prov.source_tokens / prov.output_tokens, 2)


def test_file_reads_contribute_paths_not_error_lines_and_paths_are_listed_once():
    code = "def load():\n    # see app/core/config.py\n    raise ValueError('error: invalid config')\n"
    session = [
        m(0, "user", text("look at app/loader.py please")),
        m(
            1,
            "assistant",
            Block(TOOL_CALL, tool_name="Read", tool_call_id="r", tool_input={"file_path": "app/loader.py"}),
        ),
        m(2, "user", Block(TOOL_RESULT, tool_call_id="r", text=code)),
        m(
            3,
            "assistant",
            Block(TOOL_CALL, tool_name="Bash", tool_call_id="b", tool_input={"command": "ls app"}),
        ),
        m(4, "user", Block(TOOL_RESULT, tool_call_id="b", text="app/core/config.py\napp/main.py")),
    ]
    out = extractive_observe(session)
    assert "invalid config" not in out
    assert "tool <- Read: files: app/core/config.py" in out  # app/loader.py was named already
    assert "tool <- Bash: files: app/main.py" in out  # only the path not seen before
    assert out.count("app/core/config.py") == 1
