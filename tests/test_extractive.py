"""The extractive observer writes a log small enough to stand in for the conversation: a
tool call and its output become one line plus the output's first error lines and the
identifiers and paths not logged yet; user requests stay verbatim, assistant prose keeps
its decisions and findings. Deterministic, no LLM."""

from __future__ import annotations

import asyncio
import random

from lore_core.curation import DistillInput
from lore_core.distill.extractive import extractive_observe
from lore_core.distill.observer import ExtractiveObserver
from lore_core.model import TEXT, THINKING, TOOL_CALL, TOOL_RESULT, Block

T0 = 1_790_000_000.0  # 2026-09-21 14:13:20 UTC


def m(i: int, role: str, *blocks: Block) -> DistillInput:
    return DistillInput(f"m{i}", role, T0 + 60 * i, list(blocks))


def text(s: str) -> Block:
    return Block(TEXT, text=s)


def call(call_id: str, tool: str, tool_input: object) -> Block:
    return Block(TOOL_CALL, tool_name=tool, tool_call_id=call_id, tool_input=tool_input)


def result(call_id: str, output: str, is_error: bool = False) -> Block:
    return Block(TOOL_RESULT, tool_call_id=call_id, text=output, is_error=is_error)


SESSION = [
    m(0, "user", text("The login endpoint returns 500 since yesterday.\nThanks, you're great!")),
    m(
        1,
        "assistant",
        text("Sure! Let me take a look at that for you.\nI'll start by reading the handler."),
        call("r1", "Read", {"file_path": "app/auth/login.py"}),
    ),
    m(2, "user", result("r1", "def login(req):\n    return handle(req)\n")),
    m(3, "assistant", call("b1", "Bash", {"command": "pytest -q"})),
    m(
        4,
        "user",
        result(
            "b1",
            "....F....\n"
            "app/auth/login.py:14: in login\n"
            "E   KeyError: 'session_token'\n"
            "FAILED tests/test_login.py::test_login_ok - KeyError: 'session_token'\n"
            "1 failed, 57 passed in 2.84s\n",
            is_error=True,
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
            "Okay."
        ),
    ),
    m(6, "user", text("does it also need a migration?\n$ alembic upgrade head")),
]


def test_keeps_requests_tool_outcomes_error_lines_and_decisions():
    out = extractive_observe(SESSION)
    lines = out.splitlines()
    assert lines[0] == "## 2026-09-21"
    # The user's requests, verbatim (one line each).
    assert "[14:13] user: The login endpoint returns 500 since yesterday. Thanks, you're great!" in lines
    assert "[14:19] user: does it also need a migration? $ alembic upgrade head" in lines
    # A call and its outcome on one line; the output's error lines and summary below it.
    assert "[14:14] assistant: -> Read app/auth/login.py => 2 lines" in lines
    assert "[14:16] assistant: -> $ pytest -q => error, 5 lines" in lines
    assert "[14:17] tool <- Bash: E KeyError: 'session_token'" in lines
    assert "FAILED tests/test_login.py::test_login_ok - KeyError: 'session_token'" in out
    assert "1 failed, 57 passed in 2.84s" in out
    assert "app/auth/login.py:14: in login" in out
    # Decisions and findings of the assistant, not its chatter.
    assert "Root cause: the cookie middleware renamed session_token to sid in v2.3.1." in out
    assert "I decided to read `sid` and fall back to session_token instead of pinning" in out
    for chatter in ("Sure! Let me take a look", "I'll start by reading", "Looks good so far", "Okay."):
        assert chatter not in out
    # What a file read showed is not an event.
    assert "return handle(req)" not in out


def test_does_not_repeat_previous_observations_or_itself():
    first = extractive_observe(SESSION[:5])
    again = extractive_observe(SESSION, previous=first)
    assert "KeyError: 'session_token'" not in again.split("Root cause")[0]
    assert "Root cause" in again
    assert "-> Read app/auth/login.py" not in again  # the same outcome as before
    doubled = extractive_observe(
        [
            *SESSION,
            m(7, "user", text("The login endpoint returns 500 since yesterday.\nThanks, you're great!")),
        ]
    )
    assert doubled.count("returns 500 since yesterday") == 1


def test_is_deterministic_masks_secrets_and_skips_housekeeping():
    key = "sk-ant-api03-" + "x9" * 20
    extra = [
        m(
            7,
            "user",
            text(f"<system-reminder>todo list 42 items</system-reminder>\nuse key {key} on port 8443"),
        ),
    ]
    out = extractive_observe(SESSION + extra)
    assert out == extractive_observe(SESSION + extra)
    assert key not in out and "[REDACTED:anthropic-key]" in out and "8443" in out
    assert "todo list" not in out


def test_extractive_observer_provenance():
    result_ = asyncio.run(ExtractiveObserver().observe(SESSION))
    prov = result_.provenance
    assert prov.method == "extractive" and prov.generation == 0
    assert prov.source_ids == [f"m{i}" for i in range(7)]
    assert prov.worker_model is None and prov.cost == 0
    assert prov.start == T0 and prov.end == T0 + 360
    assert prov.output_tokens > 0 and prov.source_tokens > 0
    assert prov.compression_ratio == round(prov.source_tokens / prov.output_tokens, 2)


# -- a tool-heavy segment: compression and retention -------------------------------------------


class ToolHeavySegment:
    """A generated stretch of agent work: files read, searched, tests run (long noisy logs,
    some failing), edits, commits, PRs. It records the facts it plants, so retention is
    checked against the truth rather than against a pattern."""

    def __init__(self, tasks: int = 24, seed: int = 3) -> None:
        self.rng = random.Random(seed)
        self.messages: list[DistillInput] = []
        self.paths: set[str] = set()
        self.errors: set[str] = set()
        self.ids: set[str] = set()
        self.commands: set[str] = set()
        self.noise: list[str] = []
        self.calls = 0
        for task in range(tasks):
            self.task(task)

    def add(self, role: str, *blocks: Block) -> None:
        at = T0 + 20 * len(self.messages)
        self.messages.append(DistillInput(f"g{len(self.messages)}", role, at, list(blocks)))

    def tool(self, tool: str, tool_input: dict, output: str, is_error: bool = False) -> None:
        self.calls += 1
        call_id = f"toolu_{self.calls:04d}"
        self.add("assistant", call(call_id, tool, tool_input))
        self.add("user", result(call_id, output, is_error))
        if tool == "Bash":
            self.commands.add(tool_input["command"])

    def source_file(self, n: int) -> str:
        return f"shop/{self.rng.choice(['orders', 'cart', 'billing', 'users'])}/mod_{n}.py"

    def test_log(self, test_file: str, failing: str | None) -> str:
        rng = self.rng
        lines = [f"{test_file}::test_case_{i} PASSED" for i in range(rng.randint(150, 250))]
        lines += [f"DEBUG worker heartbeat seq={i} queue=ok" for i in range(rng.randint(100, 200))]
        self.noise.append(lines[-1])
        if failing:
            error = (
                f"E       AssertionError: expected {rng.randint(1, 99)} items, got {rng.randint(100, 199)}"
            )
            failed = f"FAILED {test_file}::{failing} - AssertionError"
            lines += ["", f"    def {failing}():", error, failed]
            self.errors |= {" ".join(error.split()), failed}
            self.ids.add(failing)
        passed = len(lines) - 2
        lines.append(f"{'1 failed, ' if failing else ''}{passed} passed in {rng.uniform(1, 9):.2f}s")
        return "\n".join(lines)

    def task(self, n: int) -> None:
        rng = self.rng
        target, test_file = self.source_file(n), f"tests/test_mod_{n}.py"
        self.paths |= {target, test_file}
        self.add("user", text(f"Task {n}: the totals in {target} are off, please fix them."))
        self.add("assistant", text("Sure, let me look at that."))
        code = "\n".join(f"def helper_{n}_{i}(x):\n    return x * {i}\n" for i in range(60))
        self.tool("Read", {"file_path": target}, code)
        hits = [self.source_file(100 + n * 10 + i) for i in range(6)]
        self.paths |= set(hits)
        grep = "\n".join(f"{path}:{rng.randint(1, 300)}:    total = compute_total(cart)" for path in hits)
        self.tool("Grep", {"pattern": "compute_total", "path": "shop/"}, grep)
        failing = f"test_totals_{n}" if n % 2 == 0 else None
        self.tool(
            "Bash", {"command": f"pytest -q {test_file}"}, self.test_log(test_file, failing), bool(failing)
        )
        self.add(
            "assistant",
            text(
                f"Let me check.\nThe root cause is a rounding step applied twice in {target}, "
                "so I'll remove it."
            ),
        )
        self.tool(
            "Edit",
            {
                "file_path": target,
                "old_string": "    total = round(total)\n" * 2,
                "new_string": "    total = round(total)",
            },
            f"The file {target} has been updated successfully.",
        )
        self.tool("Bash", {"command": f"pytest -q {test_file}"}, self.test_log(test_file, None))
        sha = f"c{rng.getrandbits(24):06x}"  # a letter in it: all digits would be a number
        self.ids.add(sha)
        self.tool(
            "Bash",
            {"command": f"git commit -am 'Fix totals in mod_{n}'"},
            f"[fix/totals-{n} {sha}] Fix totals in mod_{n}\n 1 file changed, 1 insertion(+), 2 deletions(-)",
        )
        if n % 4 == 3:
            pr = 100 + n
            self.ids.add(f"#{pr}")
            self.tool("Bash", {"command": "gh pr create --fill"}, f"https://github.com/acme/shop/pull/{pr}")


def test_a_tool_heavy_segment_is_compressed_8x_and_keeps_its_facts():
    segment = ToolHeavySegment()
    dist = asyncio.run(ExtractiveObserver().observe(segment.messages))
    out, prov = dist.text, dist.provenance
    assert prov.compression_ratio >= 8, prov.compression_ratio

    def share(facts: set[str], found: callable) -> float:
        return sum(1 for f in facts if found(f)) / len(facts)

    assert share(segment.paths, lambda p: p in out) >= 0.9
    assert share(segment.errors, lambda e: e in out) >= 0.9
    assert share(segment.ids, lambda i: i in out) >= 0.9
    assert share(segment.commands, lambda c: c in out) >= 0.9
    # A passing run's log and the code read are not in it.
    assert not any(line in out for line in segment.noise)
    assert "def helper_" not in out


# -- tool calls and outputs ----------------------------------------------------------------------


def test_shell_outcomes_from_both_harnesses_and_reruns():
    codex = (
        "Chunk ID: 1a2b3c\nWall time: 0.2 seconds\nProcess exited with code 2\n"
        "Original token count: 9\nOutput:\nmain.go:12:3: undefined: Frobnicate\n"
    )
    session = [
        m(0, "assistant", call("c1", "exec_command", {"cmd": "go build ./...", "workdir": "/w/proj"})),
        m(1, "tool", result("c1", codex)),
        m(2, "assistant", call("c2", "Bash", {"command": "go build ./..."})),
        m(3, "user", result("c2", "Exit code 2\nmain.go:12:3: undefined: Frobnicate", is_error=True)),
        m(4, "assistant", call("c3", "Bash", {"command": "go build ./..."})),
        m(5, "user", result("c3", "")),
    ]
    out = extractive_observe(session)
    assert "-> $ go build ./... => exit 2" in out
    assert out.count("-> $ go build ./...") == 2  # the rerun with the same outcome is not news
    assert out.count("main.go:12:3: undefined: Frobnicate") == 1
    assert "-> $ go build ./... => ok" in out
    assert "Chunk ID" not in out and "Wall time" not in out and "Exit code" not in out


def test_a_search_lists_the_files_it_matched_not_the_code():
    grep = "src/a.py:3:    x = open('/etc/hosts')\nsrc/b.py:9:    y = 1\nsrc/b.py-10-    z = 2"
    session = [
        m(0, "assistant", call("g", "Grep", {"pattern": "open", "path": "src"})),
        m(1, "user", result("g", grep)),
        m(2, "assistant", call("r", "Bash", {"command": "rg -n nothing-here"})),
        m(3, "user", result("r", "Exit code 1\n", is_error=True)),
    ]
    out = extractive_observe(session)
    assert '-> Grep "open" src => 3 lines' in out
    assert "files: src/a.py, src/b.py" in out and "/etc/hosts" not in out
    assert "-> $ rg -n nothing-here => no matches" in out


def test_edits_and_patches_say_where_how_much_and_which_tests():
    patch = (
        "*** Begin Patch\n*** Update File: pkg/conn.go\n@@\n-old line\n+func Dial() {}\n+// more\n"
        "*** Add File: pkg/conn_test.go\n+func TestDialTimeout(t *testing.T) {}\n*** End Patch"
    )
    session = [
        m(
            0,
            "assistant",
            call("e", "Edit", {"file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2\ny = 3"}),
        ),
        m(1, "user", result("e", "The file a.py has been updated successfully.")),
        m(2, "assistant", call("p", "apply_patch", patch)),
        m(3, "tool", result("p", '{"output":"Success.","metadata":{"exit_code":0}}')),
        m(
            4,
            "assistant",
            call("w", "Write", {"file_path": "t.py", "content": "def test_new():\n    pass\n"}),
        ),
        m(5, "user", result("w", "File created successfully at: t.py")),
    ]
    out = extractive_observe(session)
    assert "-> Edit a.py (+2 -1) => ok" in out
    assert (
        "-> apply_patch: M pkg/conn.go (+2 -1); A pkg/conn_test.go (+1); adds TestDialTimeout, Dial => ok"
        in out
    )
    assert "-> Write t.py (2 lines); adds test_new => ok" in out


def test_an_edit_that_rewrites_a_test_names_it():
    before = "func TestSessionStruct(t *testing.T) {\n\tnow := time.Now()\n"
    after = "func TestSessionStruct(t *testing.T) {\n\tnow := time.Unix(0, 0)\n"
    session = [
        m(
            0,
            "assistant",
            call("e", "Edit", {"file_path": "s_test.go", "old_string": before, "new_string": after}),
        ),
        m(1, "user", result("e", "The file s_test.go has been updated successfully.")),
    ]
    assert "-> Edit s_test.go (+2 -2); changes TestSessionStruct => ok" in extractive_observe(session)


def test_the_commits_and_tests_an_assistant_names_in_code_are_kept():
    reply = (
        "The state file looks like this:\n\n```json\n"
        '{"base_commit": "1e17868abc", "test": "TestCondense"}\n```\n\nThat is all there is to it.'
    )
    out = extractive_observe(
        [m(0, "user", text("what is in the state file?")), m(1, "assistant", text(reply))]
    )
    assert "names in code: 1e17868abc, TestCondense" in out
    assert "base_commit" not in out  # the code itself stays out


def test_a_todo_list_logs_only_what_changed():
    todos = [
        {"content": "write the test", "status": "in_progress"},
        {"content": "fix it", "status": "pending"},
    ]
    done = [{"content": "write the test", "status": "completed"}, {"content": "fix it", "status": "pending"}]
    session = [
        m(0, "assistant", call("t1", "TodoWrite", {"todos": todos})),
        m(1, "user", result("t1", "Todos have been modified successfully.")),
        m(2, "assistant", call("t2", "TodoWrite", {"todos": done})),
        m(3, "user", result("t2", "Todos have been modified successfully.")),
        m(4, "assistant", call("t3", "TodoWrite", {"todos": done})),
        m(5, "user", result("t3", "Todos have been modified successfully.")),
    ]
    lines = [line for line in extractive_observe(session).splitlines() if "TodoWrite" in line]
    assert lines == [
        "[14:13] assistant: -> TodoWrite: [in_progress] write the test; [pending] fix it => ok",
        "[14:15] assistant: -> TodoWrite: [completed] write the test => ok",
    ]


def test_paths_are_written_relative_to_the_project_directory():
    root = "/home/dev/shop"
    session = [
        m(0, "assistant", call("r", "Read", {"file_path": f"{root}/src/cart/totals.py"})),
        m(1, "user", result("r", "x = 1")),
        m(2, "assistant", call("g", "Grep", {"pattern": "total", "path": root})),
        m(3, "user", result("g", "src/cart/totals.py:1:x = 1\nsrc/cart/tax.py:4:y")),
        m(4, "assistant", call("b", "Bash", {"command": f"cd {root} && pytest -q"})),
        m(5, "user", result("b", "3 passed in 0.1s")),
    ]
    out = extractive_observe(session)
    assert f"note: paths are relative to {root}" in out
    assert "-> Read src/cart/totals.py => 1 lines" in out
    assert '-> Grep "total" . => 2 lines' in out
    assert "files: src/cart/tax.py" in out  # totals.py is known already
    assert "-> $ pytest -q => ok" in out  # the cd into the project says nothing
    assert f"{root}/src" not in out
    # The next segment keeps the root without saying it again.
    more = [m(6, "assistant", call("r2", "Read", {"file_path": f"{root}/src/cart/tax.py"}))]
    assert (
        extractive_observe(more, previous=out) == "## 2026-09-21\n[14:19] assistant: -> Read src/cart/tax.py"
    )


def test_results_of_calls_made_before_the_segment_are_named():
    session = [m(0, "user", result("old-call", "Exit code 1\nerror: cannot find module", is_error=True))]
    out = extractive_observe(session, tool_names={"old-call": "Bash"})
    assert "tool <- Bash: exit 1" in out and "tool <- Bash: error: cannot find module" in out


def test_a_rejected_call_keeps_what_the_user_said_instead():
    rejected = (
        "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a "
        "file edit, the new_string was NOT written to the file). To tell you how to proceed, the user "
        "said:\nuse a dry run by default"
    )
    session = [
        m(0, "assistant", call("w", "Bash", {"command": "./migrate.sh"})),
        m(1, "user", result("w", rejected, is_error=True)),
    ]
    out = extractive_observe(session)
    assert "-> $ ./migrate.sh => rejected by the user" in out
    assert "user said: use a dry run by default" in out


# -- text ----------------------------------------------------------------------------------------


def test_harness_text_in_the_users_turn_is_reduced_to_a_line():
    skill = "Base directory for this skill: /home/dev/.skills/review\n\n# Review\n" + "Do this.\n" * 80
    summary = (
        "This session is being continued from a previous conversation that ran out of context.\n"
        + "The user asked for things.\n" * 60
        + "The last commit was 3f2a1bc on branch fix/totals.\n"
    )
    session = [
        m(0, "user", text("<command-name>/review</command-name>\n<command-args>42</command-args>")),
        m(1, "user", text(skill)),
        m(2, "user", text(summary)),
    ]
    out = extractive_observe(session)
    assert "user: /review 42" in out
    assert "user: Base directory for this skill: /home/dev/.skills/review [82 lines]" in out
    assert "user: This session is being continued from a previous conversation" in out
    assert "The last commit was 3f2a1bc on branch fix/totals." in out  # it names something new
    assert "Do this." not in out and "The user asked for things." not in out


def test_a_long_paste_keeps_its_head_and_its_error_lines():
    pasted = "this build fails:\n" + "\n".join(f"INFO step {i} fine" for i in range(200))
    pasted += "\npanic: runtime error: index out of range [3] with length 3\n" + "INFO done\n" * 50
    out = extractive_observe([m(0, "user", text(pasted))])
    assert "user: this build fails: INFO step 0 fine" in out and "[252 lines]" in out
    assert "user: panic: runtime error: index out of range [3] with length 3" in out
    assert "INFO step 150" not in out


def test_thinking_keeps_at_most_a_decision():
    thinking = Block(
        THINKING,
        text="Hmm, maybe the cache? Let me look again. The real issue is that the TTL is read in ms. "
        "I'll go with seconds everywhere instead of converting.",
    )
    out = extractive_observe([m(0, "assistant", thinking)])
    assert out.splitlines()[1:] == [
        "[14:13] assistant (thinking): The real issue is that the TTL is read in ms."
    ]


def test_a_question_to_the_user_keeps_the_options_offered():
    ask = (
        "I can do this two ways:\n\n1. **Subagent-driven** - one fresh agent per task\n"
        "2. **Parallel session** - a separate session runs the plan\n\nWhich approach do you prefer?"
    )
    out = extractive_observe([m(0, "assistant", text(ask)), m(1, "user", text("1"))])
    assert "Which approach do you prefer? options: Subagent-driven | Parallel session" in out
    assert "[14:14] user: 1" in out
