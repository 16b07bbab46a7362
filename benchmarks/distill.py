"""How fast the distillation front end is, and how much the extractive observer keeps.

Generates a long, realistic coding session deterministically (a seed): tasks in which the
user asks for something, the agent reads files, greps, runs the tests (failures with
tracebacks, now and then a 50 KB+ log), explains a root cause and a decision with the
alternatives it rejected, edits, and re-runs the tests; harness reminders, a pasted key and
pauses (minutes, lunch, the next day) included. Then it measures:

* the renderer and the segmenter: messages per second;
* the extractive observer over every segment (each seeing the previous output, as in real
  use): messages per second, compression ratio (source tokens / output tokens) and fact
  retention: the fraction of file paths, error lines and numbers of the source that survive
  in the output. The same is shown for the rendered observer input (what an LLM observer
  would read), which bounds what any observer can keep.

Facts are found with the same patterns the extractive observer keeps lines by
(:mod:`lore_core.distill.facts`), so retention measures what the filtering, caps and
annotations drop, not what the patterns miss. Tokens are estimated at four characters each.
This is a benchmark, not a test; run it by hand::

    python benchmarks/distill.py                  # ~2,000 messages, a few seconds
    python benchmarks/distill.py --tasks 400      # a longer session
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections.abc import Callable, Sequence

from lore_core.distill.extractive import READ_TOOLS, extractive_observe
from lore_core.distill.facts import find_error_lines, find_numbers, find_paths
from lore_core.distill.inputs import DistillInput
from lore_core.distill.render import render_message, render_segment, tool_names_of
from lore_core.distill.segment import SegmentPolicy, estimate_tokens, split_segments
from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT, Block

START = 1_790_000_000.0  # 2026-09-21 14:13:20 UTC

MODULES = [
    "api/routes",
    "api/auth",
    "api/schemas",
    "core/config",
    "core/cache",
    "core/retry",
    "db/models",
    "db/migrations",
    "db/session",
    "workers/queue",
    "workers/scheduler",
    "cli/main",
    "utils/time",
    "utils/paths",
    "billing/invoices",
    "billing/stripe_client",
    "search/index",
    "search/ranking",
]
FRONTEND = ["web/src/components/LoginForm.tsx", "web/src/hooks/useSession.ts", "web/package.json"]
FUNCS = [
    "load_config",
    "get_user",
    "refresh_token",
    "enqueue",
    "retry_after",
    "build_index",
    "rank_hits",
    "create_invoice",
    "parse_duration",
    "resolve_path",
    "open_session",
    "migrate",
]
ERRORS = [
    ("KeyError", "'{name}'"),
    ("AssertionError", "assert {a} == {b}"),
    ("TypeError", "{func}() got an unexpected keyword argument 'timeout'"),
    ("ModuleNotFoundError", "No module named 'app.{mod}'"),
    ("ConnectionRefusedError", "[Errno 111] Connection refused (127.0.0.1:{port})"),
    ("ValueError", "invalid literal for int() with base 10: '{a}ms'"),
    ("sqlalchemy.exc.IntegrityError", "UNIQUE constraint failed: users.email"),
]
ALTERNATIVES = [
    ("a per-request retry budget", "a global retry counter", "it starves unrelated requests"),
    ("DuckDB for the analytics tables", "SQLite", "no columnar scans for the reporting queries"),
    ("httpx with an explicit timeout", "requests", "no async support"),
    ("a shim module re-exporting the old names", "updating 40 imports", "plugins import the old path"),
    ("an LRU cache of 512 entries", "an unbounded dict", "memory grew to 2 GB in the soak test"),
    ("freezing time in the tests", "sleeping for 2 s", "the suite took 90 s longer"),
]
CHATTER = [
    "Sure, let me look into that.",
    "Great, thanks!",
    "Let me check.",
    "Okay, continuing.",
    "I'll take a look now.",
    "Sounds good.",
]
SECRET = "sk-ant-api03-" + "Qx7" * 14


class SessionGenerator:
    """A deterministic coding session, as the store would hand it to distillation."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = START
        self.messages: list[DistillInput] = []
        self.calls = 0

    # -- helpers -----------------------------------------------------------------------------

    def path(self) -> str:
        if self.rng.random() < 0.1:
            return self.rng.choice(FRONTEND)
        mod = self.rng.choice(MODULES)
        return f"app/{mod}.py" if self.rng.random() < 0.7 else f"tests/test_{mod.split('/')[-1]}.py"

    def add(self, role: str, *blocks: Block, pause: tuple[float, float] = (4, 40)) -> None:
        self.now += self.rng.uniform(*pause)
        self.messages.append(DistillInput(f"m{len(self.messages):06d}", role, self.now, list(blocks)))

    def call(self, tool: str, tool_input: dict, output: str, is_error: bool = False) -> None:
        self.calls += 1
        call_id = f"toolu_{self.calls:08d}"
        self.add("assistant", Block(TOOL_CALL, tool_name=tool, tool_call_id=call_id, tool_input=tool_input))
        self.add(
            "user", Block(TOOL_RESULT, tool_call_id=call_id, text=output, is_error=is_error), pause=(1, 25)
        )

    def code(self, path: str) -> str:
        rng = self.rng
        lines = [f'"""{path}: generated module."""', "", "import logging", "from pathlib import Path", ""]
        for _ in range(rng.randint(4, 14)):
            func = rng.choice(FUNCS)
            lines += [
                f"def {func}(value, timeout={rng.choice([5, 10, 30, 120])}):",
                f"    # see {self.path()} for the caller",
                f"    limit = {rng.randint(2, 4096)}",
                "    if value is None:",
                f"        raise ValueError('missing value for {func}')",
                "    return min(value, limit)",
                "",
            ]
        return "\n".join(lines)

    def error(self) -> tuple[str, str]:
        kind, template = self.rng.choice(ERRORS)
        msg = template.format(
            name=self.rng.choice(["user_id", "session_token", "sid", "tenant"]),
            a=self.rng.randint(1, 500),
            b=self.rng.randint(1, 500),
            func=self.rng.choice(FUNCS),
            mod=self.rng.choice(MODULES).split("/")[-1],
            port=self.rng.choice([5432, 6379, 8377, 9200]),
        )
        return kind, msg

    def test_run(self, failures: int, huge: bool) -> str:
        rng = self.rng
        passed = rng.randint(80, 400)
        lines = [
            "============================= test session starts ==============================",
            f"platform linux -- Python 3.12.{rng.randint(1, 8)}, pytest-8.3.{rng.randint(0, 5)}",
            f"collected {passed + failures} items",
            "",
        ]
        for _ in range(rng.randint(3, 8)):
            lines.append(f"{self.path()} " + "." * rng.randint(5, 60))
        noise = 0
        if huge:
            # A chatty run: 50 KB+ of captured log lines around the failures.
            while sum(len(x) for x in lines) < 55_000:
                noise += 1
                lines.append(
                    f"{time.strftime('%H:%M:%S', time.gmtime(self.now))} DEBUG worker.heartbeat "
                    f"seq={noise} depth={rng.randint(0, 9)} ok"
                )
        for _ in range(failures):
            path, func = self.path(), rng.choice(FUNCS)
            kind, msg = self.error()
            lines += [
                "",
                f"____________________ test_{func} ____________________",
                "",
                f"    def test_{func}():",
                f">       assert {func}(None)",
                "",
                f"{path}:{rng.randint(10, 400)}: ",
                f"E       {kind}: {msg}",
            ]
        lines.append("=========================== short test summary info ============================")
        for _ in range(failures):
            kind, msg = self.error()
            lines.append(f"FAILED {self.path()}::test_{rng.choice(FUNCS)} - {kind}: {msg}")
        summary = f"{failures} failed, {passed} passed" if failures else f"{passed} passed"
        lines.append(f"==================== {summary} in {rng.uniform(1, 90):.2f}s ====================")
        return "\n".join(lines)

    # -- a task ------------------------------------------------------------------------------

    def task(self, index: int) -> None:
        rng = self.rng
        target = self.path()
        # Pauses between tasks: minutes, sometimes lunch, sometimes the next morning.
        gap = rng.choice([(60, 600)] * 8 + [(3600, 7200), (50_000, 60_000)])
        self.now += rng.uniform(*gap)
        reminder = (
            "<system-reminder>\nThe task tools haven't been used recently. "
            "This is a reminder only; ignore if not applicable.\n</system-reminder>\n"
        )
        ask = rng.choice(
            [
                f"The {rng.choice(FUNCS)} call in {target} fails since the last deploy, can you fix it?",
                f"Please add a timeout of {rng.choice([15, 30, 45])}s to {target}.",
                f"Why does {target} take {rng.randint(2, 40)} seconds on startup?",
                f"Refactor {target} so it no longer imports app/core/config.py directly.",
            ]
        )
        if index == 7:
            ask += f"\nUse this key for the staging API: {SECRET}"
        self.add("user", Block(TEXT, text=(reminder if rng.random() < 0.4 else "") + ask))
        self.add("assistant", Block(TEXT, text=rng.choice(CHATTER)))
        self.call("Read", {"file_path": target}, self.code(target))
        matches = "\n".join(
            f"{self.path()}:{rng.randint(1, 300)}:    {rng.choice(FUNCS)}(value)"
            for _ in range(rng.randint(2, 12))
        )
        self.call("Grep", {"pattern": rng.choice(FUNCS), "path": "app/"}, matches)
        failures = rng.choice([0, 1, 1, 2, 3, 5])
        self.call(
            "Bash",
            {"command": "pytest -q -x tests/", "description": "run the tests"},
            self.test_run(failures, huge=index % 9 == 4),
            is_error=failures > 0,
        )
        kind, msg = self.error()
        chosen, rejected, why = rng.choice(ALTERNATIVES)
        self.add(
            "assistant",
            Block(
                TEXT,
                text=(
                    f"{rng.choice(CHATTER)}\n"
                    f"Root cause: `{rng.choice(FUNCS)}` in {target} raised {kind}: {msg} because the "
                    f"default of {rng.randint(2, 120)} was applied twice.\n"
                    f"I decided to use {chosen} instead of {rejected}, because {why}.\n"
                    "Making the change now."
                ),
            ),
        )
        old = f"    limit = {rng.randint(2, 4096)}"
        self.call(
            "Edit",
            {
                "file_path": target,
                "old_string": old,
                "new_string": old + f"\n    limit = min(limit, {rng.randint(64, 1024)})",
            },
            f"The file {target} has been updated.",
        )
        self.call("Bash", {"command": f"pytest -q {self.path()}"}, self.test_run(0, huge=False))
        self.add("assistant", Block(TEXT, text=f"Fixed: {target} now passes. {rng.choice(CHATTER)}"))
        if rng.random() < 0.3:
            self.add(
                "user",
                Block(
                    TEXT,
                    text=rng.choice(
                        [
                            "We never deploy on Fridays, keep that in mind.",
                            f"Is the limit of {rng.randint(100, 900)} still right?",
                            "Prefer small commits, one per fix.",
                            f"Our CI runs on Python 3.{rng.randint(10, 13)} only.",
                        ]
                    ),
                ),
            )

    def session(self, tasks: int) -> list[DistillInput]:
        for index in range(tasks):
            self.task(index)
        return self.messages


# -- measuring ---------------------------------------------------------------------------------


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """Fastest of ``repeat`` runs, in seconds (the least disturbed by the rest of the machine)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def _norm(text: str) -> str:
    return " ".join(text.split())


def retention(source: str, output: str) -> dict[str, tuple[int, int]]:
    """(kept, total) per kind of fact of ``source`` found again in ``output``."""
    out_norm = _norm(output)
    out_numbers = set(find_numbers(output))
    paths = find_paths(source)
    errors = {_norm(line)[:80] for line in find_error_lines(source)}
    numbers = find_numbers(source)
    return {
        "paths": (sum(1 for p in paths if p in output), len(paths)),
        "error lines": (sum(1 for e in errors if e in out_norm), len(errors)),
        "numbers": (sum(1 for n in numbers if n in out_numbers), len(numbers)),
    }


def pct(kept: int, total: int) -> str:
    return f"{100 * kept / total:5.1f}% ({kept}/{total})" if total else "   n/a"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=120, help="tasks in the generated session")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="timing runs (the best is shown)")
    args = parser.parse_args(argv)

    messages = SessionGenerator(args.seed).session(args.tasks)
    policy = SegmentPolicy()
    raw = "\n".join(m.raw_text for m in messages)
    raw_bytes = len(raw.encode())
    n = len(messages)
    days = (messages[-1].timestamp - messages[0].timestamp) / 86_400

    names = tool_names_of(messages)
    render_s = best_of(
        args.repeat, lambda: [render_message(m, names, policy.tool_output_max_chars) for m in messages]
    )
    segments = split_segments(messages, policy)
    segment_s = best_of(args.repeat, lambda: split_segments(messages, policy))

    def observe_all() -> list[str]:
        outputs: list[str] = []
        previous = ""
        for segment in segments:
            text = extractive_observe(segment.messages, previous)
            outputs.append(text)
            previous = (previous + "\n" + text)[-12_000:]
        return outputs

    observe_s = best_of(args.repeat, observe_all)
    extractive = "\n".join(observe_all())
    rendered = "\n".join(render_segment(s.messages, policy.tool_output_max_chars, names) for s in segments)
    assert SECRET not in extractive and SECRET not in rendered, "a secret leaked"

    raw_tokens = estimate_tokens(raw)
    print(
        f"session: {n} messages over {days:.1f} days, {raw_bytes / 1e6:.2f} MB raw "
        f"(~{raw_tokens:,} tokens), seed {args.seed}"
    )
    reasons = {r: sum(1 for s in segments if s.reason == r) for r in ("gap", "cap", "end")}
    print(
        f"segments: {len(segments)} (ended by gap {reasons['gap']}, cap {reasons['cap']}, "
        f"end {reasons['end']}); mean {sum(s.tokens for s in segments) / len(segments):,.0f} tokens, "
        f"max {max(s.tokens for s in segments):,} (cap {policy.max_tokens:,})"
    )
    print()
    print(f"{'stage':<22}{'msgs/s':>12}{'MB/s raw':>10}")
    for stage, seconds in (
        ("renderer", render_s),
        ("segmenter", segment_s),
        ("extractive observer", observe_s),
    ):
        print(f"{stage:<22}{n / seconds:>12,.0f}{raw_bytes / 1e6 / seconds:>10.1f}")
    print()
    header = f"{'output':<24}{'size':>10}{'tokens':>10}{'ratio':>8}  "
    print(header + "retention: paths / error lines / numbers")
    print(f"{'raw session':<24}{raw_bytes / 1e6:>8.2f}MB{raw_tokens:>10,}{1:>8.1f}")
    for label, text in (("rendered observer input", rendered), ("extractive observer", extractive)):
        tokens = estimate_tokens(text)
        kept = retention(raw, text)
        cells = " / ".join(pct(*kept[k]).strip() for k in ("paths", "error lines", "numbers"))
        total = sum(k for k, _ in kept.values()), sum(t for _, t in kept.values())
        print(
            f"{label:<24}{len(text.encode()) / 1e6:>8.2f}MB{tokens:>10,}{raw_tokens / tokens:>8.1f}  "
            f"{cells}; all facts {pct(*total).strip()}"
        )
    # File contents the agent read are material, not events: their numbers (constants in
    # code) are not what an observation log is for. The same figures without them:
    events_only = "\n".join(
        m.raw_text
        for m in messages
        if not any(b.type == TOOL_RESULT and names.get(b.tool_call_id or "") in READ_TOOLS for b in m.blocks)
    )
    kept = retention(events_only, extractive)
    cells = " / ".join(pct(*kept[k]).strip() for k in ("paths", "error lines", "numbers"))
    total = sum(k for k, _ in kept.values()), sum(t for _, t in kept.values())
    print(f"{'  same, file reads out':<58}{cells}; all facts {pct(*total).strip()}")
    reminders = len(re.findall("system-reminder", rendered + extractive))
    print(f"\nsystem-reminder blocks left in outputs: {reminders}; the pasted key masked: yes")


if __name__ == "__main__":
    main()
