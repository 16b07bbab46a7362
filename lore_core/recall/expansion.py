"""Optional LLM query expansion: 2-3 rephrasings of a recall query from the worker model.

Expansion must never make recall worse than without it: it is bounded by a timeout (3 s by
default), skipped at once when no worker is usable (:class:`~lore_core.worker.client.WorkerUnavailable`
is raised without touching the network), and every failure becomes a one-line ``skipped``
reason instead of an exception. The worker's answer is parsed leniently: the prompt asks for
a JSON array, but models wrap it in code fences, prefix it with prose or answer with a
bulleted list.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from lore_core.context.framing import worker_data
from lore_core.recall.prompts import load_prompt
from lore_core.worker.errors import WorkerUnavailable

DEFAULT_TIMEOUT_SECONDS = 3.0
MAX_REPHRASINGS = 3
# Rephrasings are search queries; a longer "rephrasing" is the model answering instead.
MAX_REPHRASING_CHARS = 200
# What is sent of the query: expansion of a pasted log is pointless and costly.
MAX_QUERY_CHARS = 1000
EXPAND_MAX_TOKENS = 300


class Completer(Protocol):
    """What expansion needs of :class:`lore_core.worker.client.WorkerClient`."""

    async def complete(
        self,
        system: str,
        prompt: str,
        *,
        session_id: str | None = None,
        purpose: str = "worker",
        max_tokens: int | None = None,
    ) -> Any:
        """Returns an object with the answer in ``.text``."""


@attrs.define
class Expansion:
    rephrasings: list[str] = attrs.field(factory=list)
    #: Why no rephrasings were produced (no worker, timeout, error), else ``None``.
    skipped: str | None = None


_FENCE = re.compile(r"```[a-zA-Z]*\s*(.*?)```", re.S)
_BULLET = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)]|\(\d+\))\s+")


def _clean(item: str) -> str:
    item = _BULLET.sub("", item.strip())
    item = item.strip().strip("\"'`\u201c\u201d").strip().rstrip(",").strip().strip("\"'`")
    return " ".join(item.split())


def _json_items(text: str) -> list[str] | None:
    candidates = [text]
    start, end = text.find("["), text.rfind("]")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict):
            for key in ("queries", "rephrasings", "alternatives", "expansions"):
                if isinstance(data.get(key), list):
                    data = data[key]
                    break
        if isinstance(data, list):
            return [x for x in data if isinstance(x, str)]
    return None


def parse_rephrasings(answer: str, query: str = "", limit: int = MAX_REPHRASINGS) -> list[str]:
    """Rephrasings from a worker answer: a JSON array (optionally fenced, or inside an
    object under ``queries``/``rephrasings``), else one per line with bullets, numbers and
    quotes removed. Drops blanks, prose lines (ending with ``:``), over-long lines, the
    query itself and duplicates (case-insensitive); at most ``limit``."""
    if not isinstance(answer, str):
        return []
    text = answer.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    items = _json_items(text)
    if items is None:
        items = text.splitlines()
    seen = {" ".join(query.lower().split())} if query else set()
    out: list[str] = []
    for raw in items:
        item = _clean(raw)
        if not item or item.endswith(":") or item in ("[", "]") or len(item) > MAX_REPHRASING_CHARS:
            continue
        key = item.lower()
        if key in seen:
            continue
        seen.add(key)
        out.append(item)
        if len(out) >= limit:
            break
    return out


def build_prompt(query: str) -> str:
    q = query.strip()
    if len(q) > MAX_QUERY_CHARS:
        q = q[:MAX_QUERY_CHARS]
    return f"<query>\n{worker_data(q)}\n</query>"


async def expand_query(
    query: str,
    worker: Completer | None,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    limit: int = MAX_REPHRASINGS,
    session_id: str | None = None,
) -> Expansion:
    """Ask the worker for up to ``limit`` rephrasings of ``query``. Never raises (except
    cancellation of the caller): every failure is reported in ``skipped``."""
    if worker is None:
        return Expansion(skipped="no worker configured")
    if not query.strip():
        return Expansion(skipped="empty query")
    try:
        result = await asyncio.wait_for(
            worker.complete(
                load_prompt("expand"),
                build_prompt(query),
                session_id=session_id,
                purpose="recall-expansion",
                max_tokens=EXPAND_MAX_TOKENS,
            ),
            timeout=timeout,
        )
    except WorkerUnavailable as exc:
        return Expansion(skipped=f"no worker: {exc.reason}")
    except TimeoutError:
        return Expansion(skipped=f"timed out after {timeout:g}s")
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # WorkerError, a broken worker object: never into recall
        # getattr: an exception, not a plugin; WorkerError carries a one-line ``reason``.
        reason = getattr(exc, "reason", None) or str(exc) or exc.__class__.__name__
        return Expansion(skipped=f"failed: {str(reason)[:200]}")
    # getattr: a Completer's answer is typed Any (a WorkerResult, or a test's plain string).
    text = getattr(result, "text", result)
    rephrasings = parse_rephrasings(text if isinstance(text, str) else "", query, limit)
    if not rephrasings:
        return Expansion(skipped="the worker's answer held no usable rephrasing")
    return Expansion(rephrasings=rephrasings)


def unique_queries(query: str, rephrasings: Sequence[str]) -> list[str]:
    """The rephrasings that differ from the query (case and spacing ignored)."""
    base = " ".join(query.lower().split())
    return [r for r in rephrasings if " ".join(r.lower().split()) != base]
