"""The request path's steps live in ``lore_core/pipeline/``, not on ``Gateway``: the gateway
builds, starts, stops and reports on what one process holds, and an exchange is finished in
one place (``pipeline/finish.py``). Checked by parsing the source with :mod:`ast`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "lore_core"

#: What a gateway does besides holding its parts: build, lifecycle, background jobs, the
#: one memory operation that spans all its parts (forget), and reporting.
GATEWAY_MEMBERS = frozenset(
    {
        "__init__",
        "load",
        "start",
        "stop",
        "stop_budget_seconds",
        "spawn",
        "settle_writes",
        "_save_spend_periodically",
        "_serving_vector_index",
        "forget_session",
        "degraded",
        "health",
    }
)
#: Calls that finish an exchange (hand it to the context manager and to the writer).
FINISHING_CALLS = frozenset({("context", "exchange_finished"), ("writer", "submit")})


def gateway_methods(source: str) -> set[str]:
    """The names of the methods the ``Gateway`` class of ``source`` defines."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == "Gateway":
            return {
                item.name for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    raise AssertionError("no Gateway class")


def finishing_calls(source: str) -> list[int]:
    """Lines of ``source`` that call ``<x>.context.exchange_finished`` or ``<x>.writer.submit``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        name = (
            owner.attr
            if isinstance(owner, ast.Attribute)
            else owner.id
            if isinstance(owner, ast.Name)
            else ""
        )
        if (name, node.func.attr) in FINISHING_CALLS:
            lines.append(node.lineno)
    return lines


def test_the_finders_find_what_the_gateway_used_to_hold() -> None:
    old = (
        "class Gateway:\n"
        "    def identify(self, ctx): ...\n"
        "    async def throttle_upstream(self, session_id, model): ...\n"
        "    def exchange_finished(self, exchange):\n"
        "        self.context.exchange_finished(exchange)\n"
        "        self.writer.submit(exchange)\n"
    )
    assert gateway_methods(old) - GATEWAY_MEMBERS == {"identify", "throttle_upstream", "exchange_finished"}
    assert finishing_calls(old) == [5, 6]


def test_no_pipeline_step_is_defined_on_the_gateway() -> None:
    extra = gateway_methods((KERNEL / "gateway.py").read_text()) - GATEWAY_MEMBERS
    assert not extra, (
        f"Gateway defines {sorted(extra)}: a step of the request path belongs in lore_core/pipeline/ "
        "(a function of the phase taking the gateway), not on Gateway"
    )


def test_an_exchange_is_finished_only_in_the_finish_phase() -> None:
    found = []
    for path in sorted(KERNEL.rglob("*.py")):
        if path == KERNEL / "pipeline" / "finish.py" or KERNEL / "testing" in path.parents:
            continue
        found += [f"{path.relative_to(ROOT)}:{line}" for line in finishing_calls(path.read_text())]
    assert not found, f"exchanges finished outside lore_core/pipeline/finish.py: {found}"
