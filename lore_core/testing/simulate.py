"""A synthetic coding session, rendered in each wire API's request shape.

Used by the context-manager tests and ``benchmarks/context_cost.py``: turns of a coding
agent (a user prompt, tool calls with realistic outputs: file reads, test runs, searches,
diffs; an answer), generated deterministically from a seed, so a 500-turn, 300K-token
session can be replayed turn by turn without shipping a transcript.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import attrs

_FILES = [
    "src/app/server.py",
    "src/app/routes/users.py",
    "src/app/routes/billing.py",
    "src/app/models.py",
    "src/app/db/migrations/0007_add_invoices.py",
    "src/app/services/payments.py",
    "src/app/services/email.py",
    "src/app/utils/retry.py",
    "tests/test_users.py",
    "tests/test_billing.py",
    "tests/test_payments.py",
    "docs/architecture.md",
    "pyproject.toml",
]
_WORDS = (
    "invoice customer retry backoff session token schema migration payload handler webhook "
    "timeout cursor batch ledger refund currency amount status event queue worker config"
).split()
_ASKS = [
    "The billing tests fail since the currency refactor, can you find out why?",
    "Add retries with exponential backoff to the payment webhook handler.",
    "Rename `Ledger.post` to `Ledger.record` everywhere and keep the tests green.",
    "Why is the invoice migration slow on large tables? Make it batch.",
    "Write tests for the refund path, including partial refunds.",
    "The email service sends duplicates after a timeout; fix it.",
    "Review the users routes for missing authorisation checks.",
    "Document the payment flow in docs/architecture.md.",
]


@attrs.define
class ToolStep:
    name: str
    input: dict[str, Any]
    output: str
    is_error: bool = False
    call_id: str = ""


@attrs.define
class Turn:
    prompt: str
    steps: list[ToolStep]
    answer: str


def _code(rng: random.Random, path: str, lines: int) -> str:
    out = []
    for n in range(1, lines + 1):
        kind = rng.random()
        w = rng.sample(_WORDS, 3)
        if kind < 0.1:
            text = f"def {w[0]}_{w[1]}(self, {w[2]}: int) -> None:"
        elif kind < 0.2:
            text = f"    # {w[0]} {w[1]} {w[2]} handling"
        elif kind < 0.3:
            text = f"class {w[0].title()}{w[1].title()}:"
        else:
            text = f"        {w[0]} = self.{w[1]}.get({w[2]!r}, {rng.randint(0, 999)})"
        out.append(f"{n:>6}\t{text}")
    return "\n".join(out)


def _pytest(rng: random.Random, failing: bool) -> tuple[str, bool]:
    lines = ["============================= test session starts =============================="]
    passed = rng.randint(40, 400)
    for f in rng.sample(_FILES[8:11], 2):
        lines.append(f"{f} " + "." * rng.randint(10, 60))
    if failing:
        name = rng.choice(_WORDS)
        lines += [
            "=================================== FAILURES ===================================",
            f"____________________________ test_{name}_roundtrip _____________________________",
            f"    def test_{name}_roundtrip(client):",
            f">       assert resp.json()['{name}'] == {rng.randint(1, 99)}",
            f"E       AssertionError: assert {rng.randint(100, 999)} == {rng.randint(1, 99)}",
            f"tests/test_billing.py:{rng.randint(10, 300)}: AssertionError",
            f"{'=' * 25} 1 failed, {passed} passed in {rng.uniform(1, 9):.2f}s {'=' * 25}",
        ]
    else:
        lines.append(f"{'=' * 30} {passed} passed in {rng.uniform(1, 9):.2f}s {'=' * 30}")
    return "\n".join(lines), failing


def _grep(rng: random.Random, pattern: str) -> str:
    hits = []
    for _ in range(rng.randint(3, 40)):
        f = rng.choice(_FILES)
        hits.append(f"{f}:{rng.randint(1, 400)}:    {pattern}({', '.join(rng.sample(_WORDS, 2))})")
    return "\n".join(hits)


def _diff(rng: random.Random, path: str) -> str:
    lines = [f"diff --git a/{path} b/{path}", f"--- a/{path}", f"+++ b/{path}", "@@ -10,7 +10,9 @@"]
    for _ in range(rng.randint(5, 60)):
        w = rng.sample(_WORDS, 2)
        lines.append(f"{rng.choice('+- ')}    {w[0]} = {w[1]}({rng.randint(0, 9)})")
    return "\n".join(lines)


def _step(rng: random.Random, index: int) -> ToolStep:
    kind = rng.random()
    path = rng.choice(_FILES)
    if kind < 0.4:
        lines = rng.choice([40, 80, 150, 300, 600])
        return ToolStep("Read", {"file_path": path}, _code(rng, path, lines))
    if kind < 0.6:
        out, failing = _pytest(rng, rng.random() < 0.35)
        return ToolStep("Bash", {"command": "pytest -q tests/"}, out, is_error=failing)
    if kind < 0.75:
        pattern = rng.choice(_WORDS)
        return ToolStep("Grep", {"pattern": pattern, "path": "src"}, _grep(rng, pattern))
    if kind < 0.9:
        old, new = rng.sample(_WORDS, 2)
        return ToolStep(
            "Edit",
            {"file_path": path, "old_string": f"{old} = 1", "new_string": f"{new} = 2"},
            f"The file {path} has been updated.",
        )
    return ToolStep("Bash", {"command": f"git diff {path}"}, _diff(rng, path))


def coding_session(turns: int, seed: int = 7) -> list[Turn]:
    """``turns`` turns of a coding agent at work (each 0-6 tool calls)."""
    rng = random.Random(seed)
    out = []
    call = 0
    for t in range(turns):
        ask = rng.choice(_ASKS)
        prompt = f"{ask} (step {t})"
        if rng.random() < 0.3:
            prompt = f"<system-reminder>Todo list has {rng.randint(1, 9)} items.</system-reminder>\n{prompt}"
        steps = []
        for _ in range(rng.choice([0, 1, 2, 2, 3, 3, 4, 6])):
            step = _step(rng, call)
            step.call_id = f"toolu_{seed}_{call:05d}"
            call += 1
            steps.append(step)
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(20, 120)))
        out.append(Turn(prompt, steps, f"Done with step {t}: {words}."))
    return out


# ---------------------------------------------------------------------------------------------
# Wire shapes
# ---------------------------------------------------------------------------------------------


def _anthropic_step(step: ToolStep) -> list[dict[str, Any]]:
    """One tool step as Messages API items: the assistant's call, the user's result."""
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": step.call_id, "content": step.output}
    if step.is_error:
        result["is_error"] = True
    call = {"type": "tool_use", "id": step.call_id, "name": step.name, "input": step.input}
    return [
        {"role": "assistant", "content": [{"type": "text", "text": f"Let me use {step.name}."}, call]},
        {"role": "user", "content": [result]},
    ]


def anthropic_messages(turns: list[Turn], *, answered: bool = True) -> list[dict[str, Any]]:
    """Messages API history. ``answered=False`` leaves the last turn's answer out (the
    request that asks for it)."""
    msgs: list[dict[str, Any]] = []
    for i, turn in enumerate(turns):
        msgs.append({"role": "user", "content": [{"type": "text", "text": turn.prompt}]})
        for step in turn.steps:
            msgs += _anthropic_step(step)
        if answered or i < len(turns) - 1:
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": turn.answer}]})
    return msgs


def chat_messages(
    turns: list[Turn], *, answered: bool = True, system: str | None = None
) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for i, turn in enumerate(turns):
        msgs.append({"role": "user", "content": turn.prompt})
        for step in turn.steps:
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": step.call_id,
                            "type": "function",
                            "function": {"name": step.name, "arguments": _json(step.input)},
                        }
                    ],
                }
            )
            msgs.append({"role": "tool", "tool_call_id": step.call_id, "content": step.output})
        if answered or i < len(turns) - 1:
            msgs.append({"role": "assistant", "content": turn.answer})
    return msgs


def responses_items(turns: list[Turn], *, answered: bool = True) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i, turn in enumerate(turns):
        items.append(
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": turn.prompt}]}
        )
        for step in turn.steps:
            items.append(
                {
                    "type": "function_call",
                    "call_id": step.call_id,
                    "name": step.name,
                    "arguments": _json(step.input),
                }
            )
            items.append({"type": "function_call_output", "call_id": step.call_id, "output": step.output})
        if answered or i < len(turns) - 1:
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": turn.answer}],
                }
            )
    return items


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def requests(turns: list[Turn]) -> Iterator[list[dict[str, Any]]]:
    """The Messages API history of each request of the session, in order: one request per
    model call (after the prompt, after each tool result)."""
    history: list[dict[str, Any]] = []
    for turn in turns:
        history.append({"role": "user", "content": [{"type": "text", "text": turn.prompt}]})
        yield list(history)
        for step in turn.steps:
            history += _anthropic_step(step)
            yield list(history)
        history.append({"role": "assistant", "content": [{"type": "text", "text": turn.answer}]})
