"""The recall tool through the proxy: inject it, run the model's calls, continue upstream,
and restore the real exchange on the next request.

Request side: :func:`inject_tool` appends the ``recall`` tool to a request that offers tools
(after composition, so it is the last tool and the cached prefix before it stays valid), and
:meth:`RecallMemory.restore` turns the marker lines the client kept in its history back into
the tool call + tool result that really went upstream.

Response side: :class:`RecallLoop` relays the upstream answer. Text is relayed as it
arrives; the events of recall tool calls and the terminal events are held back. When the
turn ends with only recall calls, the client gets a one-line marker, the gateway runs the
search(es), sends the follow-up upstream (the request as sent + the assistant turn + the tool
results, rendered by the codec so the bytes are deterministic) and splices the continuation
into the same client response, with one valid start/end per API. Mixed with the client's own
tool calls, the client gets its calls and the recall result is kept for the next request.

The same relay scales the usage the client sees (see :func:`scale_usage`) so a harness's own
auto-compaction threshold is not reached; the stored exchange keeps the real numbers.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import httpx

from lore_core.interfaces import Codec
from lore_core.model import TEXT, TOOL_CALL, AssistantMessage, Exchange, Message, RequestView
from lore_core.recall.tool import (
    TOOL_NAME,
    add_recall_tool,
    marker_text,
    parse_arguments,
    recall_tool,
    run_recall,
    tool_name,
)
from lore_core.wire.encoding import UnsupportedEncoding, decode_body, decoder_for
from lore_core.wire.fields import as_dict, as_list, loads_or, new_id

log = logging.getLogger("lore.recall.proxy")

ANTHROPIC = "anthropic-messages"
CHAT = "openai-chat"
RESPONSES = "openai-responses"
APIS = (ANTHROPIC, CHAT, RESPONSES)

STATE_KEY = "recall.restore"
# How every marker line begins (see ``marker_text``).
MARKER_PREFIXES = ("Searching memory for ", "Opening memory ")
# Sessions whose records stay cached in memory.
MAX_CACHED_SESSIONS = 1000
# Records kept per session: one per recall turn; old ones fall off (their markers then stay
# plain text in the history, which is still a valid conversation).
MAX_RECORDS = 200
RECALL_TIMEOUT_SECONDS = 60.0


# ---------------------------------------------------------------------------------------------
# Request side
# ---------------------------------------------------------------------------------------------


def inject_tool(view: RequestView, enabled: bool = True) -> bool:
    """Append the recall tool when the request offers tools and has none named ``recall``.
    Returns whether the gateway now owns a recall tool in this request."""
    if not enabled or view.api not in APIS or not view.tools:
        return False
    named = [t for t in view.tools if tool_name(t) == TOOL_NAME]
    if named:
        # Already added (a view composed again, e.g. after an overflow) is ours; any other
        # tool named recall is the client's own, and so are its calls.
        ours = recall_tool(view.api)
        return all(t == ours for t in named)
    view.tools = add_recall_tool(view.api, view.tools)
    view.modified = True
    return True


def _messages_key(api: str) -> str:
    return "input" if api == RESPONSES else "messages"


def wire_messages(codec: Codec, items: list[Any]) -> list[Message]:
    """Messages for wire items, parsed by the codec itself (so blocks and raw agree)."""
    return codec.parse({_messages_key(codec.api): copy.deepcopy(items)}, b"").messages


def _norm(text: str) -> str:
    return " ".join(text.split())


class RecallMemory:
    """Per session, what went upstream for each recall the client saw only as a marker (or
    did not see at all, when mixed with its own tool calls). Persisted with the store's
    session state, a memory cache in front."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._cache: dict[str, list[dict[str, Any]]] = {}

    async def records(self, session_id: str) -> list[dict[str, Any]]:
        cached = self._cache.get(session_id)
        if cached is not None:
            return cached
        try:
            value = await self.store.get_state(session_id, STATE_KEY, [])
        except Exception as exc:
            # Not cached: the store may come back (records of an earlier run are in it).
            log.debug("could not read the recall records of session %s: %s", session_id, exc)
            return []
        records = value if isinstance(value, list) else []
        self._remember(session_id, records)
        return records

    def _remember(self, session_id: str, records: list[dict[str, Any]]) -> None:
        self._cache.pop(session_id, None)
        self._cache[session_id] = records  # most recently used last
        while len(self._cache) > MAX_CACHED_SESSIONS:
            self._cache.pop(next(iter(self._cache)))

    async def add(self, session_id: str, record: dict[str, Any]) -> None:
        records = list(await self.records(session_id))
        records.append(record)
        records = records[-MAX_RECORDS:]
        self._remember(session_id, records)
        try:
            await self.store.set_state(session_id, STATE_KEY, records)
        except Exception:
            log.exception("could not persist a recall record of session %s", session_id)

    async def restore(self, codec: Codec, view: RequestView, session_id: str) -> RequestView:
        """``view`` with every remembered recall put back as it went upstream."""
        if view.api not in APIS:
            return view
        records = await self.records(session_id)
        if not records:
            return view
        try:
            messages = _restore(codec, view.messages, records)
        except Exception:
            log.exception("restoring recall exchanges failed; the history is sent as the client sent it")
            return view
        if messages is None:
            return view
        view.messages = messages
        view.modified = True
        return view


def _restore(codec: Codec, messages: list[Message], records: list[dict[str, Any]]) -> list[Message] | None:
    out = list(messages)
    changed = False
    used: set[int] = set()
    mine = [(n, r) for n, r in enumerate(records) if r.get("api") == codec.api]
    anchors = {r.get("anchor") for _, r in mine if r.get("kind") == "mixed"}
    i = 0
    while i < len(out):
        msg = out[i]
        if msg.role != "assistant":
            i += 1
            continue
        # Cheap checks first: most assistant messages hold no marker and no anchored call.
        text = _text_of(msg)
        has_marker = MARKER_PREFIXES[0] in text or MARKER_PREFIXES[1] in text
        if not has_marker and not (anchors and anchors & set(_call_ids(msg))):
            i += 1
            continue
        replaced = None
        for n, record in mine:
            if n in used:
                continue
            if record.get("kind") == "loop":
                replaced = _restore_loop(codec, out, i, record)
            elif record.get("kind") == "mixed":
                replaced = _restore_mixed(codec, out, i, record)
            if replaced is not None:
                used.add(n)
                break
        if replaced is None:
            i += 1
            continue
        out, i = replaced
        changed = True
    return out if changed else None


def _text_of(msg: Message) -> str:
    return "\n".join(b.text for b in msg.blocks if b.type == TEXT)


def _restore_loop(
    codec: Codec, out: list[Message], i: int, record: dict[str, Any]
) -> tuple[list[Message], int] | None:
    markers: list[str] = record.get("markers") or []
    if not markers:
        return None
    api = codec.api
    restored = wire_messages(codec, record.get("items") or [])
    if api == RESPONSES:
        # Each Responses item is its own message; the marker is its own output item.
        first = _find_item(out, i, markers[0])
        if first != i:
            return None
        last = first
        for marker in markers[1:]:
            found = _find_item(out, last + 1, marker)
            if found is None:
                return None
            last = found
        start = first - int(record.get("visible_before") or 0)
        if start < 0 or any(out[k].role not in ("assistant", "") for k in range(start, first)):
            start = first
        new = out[:start] + restored + out[last + 1 :]
        return new, start + len(restored)
    msg = out[i]
    text = _text_of(msg)
    position = 0
    for marker in markers:
        found = text.find(marker, position)
        if found < 0:
            return None
        position = found + len(marker)
    tail = record.get("tail") or ""
    if tail and not _norm(text[position:]).startswith(tail[:60]):
        return None
    continuation = _continuation(api, msg, markers[-1])
    if continuation is None:
        return None
    new = out[:i] + restored + wire_messages(codec, [continuation]) + out[i + 1 :]
    return new, i + len(restored) + 1


def _find_item(out: list[Message], start: int, marker: str) -> int | None:
    for k in range(start, len(out)):
        if out[k].role == "assistant" and _text_of(out[k]).strip() == marker:
            return k
        if out[k].role == "user":
            return None
    return None


def _continuation(api: str, msg: Message, marker: str) -> dict[str, Any] | None:
    """The client's assistant message after the last marker, as wire JSON."""
    raw = msg.raw if isinstance(msg.raw, dict) else None
    if raw is None:
        return None
    if api == ANTHROPIC:
        content = raw.get("content")
        if isinstance(content, str):
            rest = content[content.rfind(marker) + len(marker) :].strip()
            return {"role": "assistant", "content": [{"type": "text", "text": rest or marker}]}
        blocks = list(content or [])
        index = max(
            k
            for k, b in enumerate(blocks)
            if isinstance(b, dict) and b.get("type") == "text" and marker in str(b.get("text", ""))
        )
        marked = str(blocks[index].get("text", ""))
        rest = marked[marked.rfind(marker) + len(marker) :].strip()
        after = ([{"type": "text", "text": rest}] if rest else []) + blocks[index + 1 :]
        return {"role": "assistant", "content": after or [{"type": "text", "text": marker}]}
    # Chat Completions: one content string (or parts) plus the client's tool calls.
    content = raw.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    content = content if isinstance(content, str) else ""
    rest = content[content.rfind(marker) + len(marker) :].strip() if marker in content else content
    out: dict[str, Any] = {"role": "assistant", "content": rest or None}
    if raw.get("tool_calls"):
        out["tool_calls"] = raw["tool_calls"]
    elif not rest:
        out["content"] = marker
    return out


def _call_ids(msg: Message) -> list[str]:
    return [b.tool_call_id for b in msg.blocks if b.type == TOOL_CALL and b.tool_call_id]


def _restore_mixed(
    codec: Codec, out: list[Message], i: int, record: dict[str, Any]
) -> tuple[list[Message], int] | None:
    anchor = record.get("anchor")
    order: list[str] = record.get("order") or []
    results: dict[str, Any] = record.get("results") or {}
    if anchor not in _call_ids(out[i]):
        return None
    recall_ids = set(results)
    if codec.api == RESPONSES:
        calls = wire_messages(codec, record.get("calls") or [])
        first_call = next(k for k in range(i, len(out)) if set(_call_ids(out[k])) & set(order))
        new = out[:first_call] + calls + out[first_call:]
        outputs = wire_messages(codec, [results[r] for r in order if r in results])
        for k in range(first_call + len(calls), len(new)):
            ids = {b.tool_call_id for b in new[k].blocks}
            if new[k].role == "tool" and ids & set(order):
                new = new[:k] + outputs + new[k:]
                return new, k + len(outputs)
        return new, first_call + len(calls)
    assistant = wire_messages(codec, [record["assistant"]])
    new = out[:i] + assistant + out[i + 1 :]
    j = i + 1
    if codec.api == ANTHROPIC:
        if j < len(new) and new[j].role == "user" and isinstance(new[j].raw, dict):
            content = new[j].raw.get("content")
            blocks = list(content) if isinstance(content, list) else []
            by_id = {
                b.get("tool_use_id"): b
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "tool_result"
            }
            for rid in recall_ids:
                by_id.setdefault(rid, results[rid])
            others = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "tool_result")]
            ordered = [by_id.pop(cid) for cid in order if cid in by_id] + list(by_id.values())
            user = dict(new[j].raw, content=ordered + others)
            new[j] = wire_messages(codec, [user])[0]
        else:
            new.insert(j, wire_messages(codec, [{"role": "user", "content": list(results.values())}])[0])
        return new, j + 1
    # Chat Completions: the tool messages follow the assistant, one per call.
    k = j
    tool_msgs: dict[str, Message] = {}
    while k < len(new) and new[k].role == "tool":
        ids = [b.tool_call_id for b in new[k].blocks if b.tool_call_id]
        tool_msgs[ids[0] if ids else f"?{k}"] = new[k]
        k += 1
    for rid in recall_ids:
        tool_msgs.setdefault(rid, wire_messages(codec, [results[rid]])[0])
    ordered = [tool_msgs.pop(cid) for cid in order if cid in tool_msgs] + list(tool_msgs.values())
    new = new[:j] + ordered + new[k:]
    return new, j + len(ordered)


# ---------------------------------------------------------------------------------------------
# Usage scaling
# ---------------------------------------------------------------------------------------------


def scale_factor(prompt_tokens: int, context_limit: int, share: float) -> float | None:
    """How much to scale the input side the client sees, or ``None`` to leave it."""
    if share <= 0 or share >= 1 or context_limit <= 0:
        return None
    cap = int(context_limit * share)
    if prompt_tokens <= cap or prompt_tokens <= 0:
        return None
    return cap / prompt_tokens


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def prompt_tokens(api: str, usage: dict[str, Any]) -> int:
    if api == ANTHROPIC:
        return sum(
            _int(usage.get(k))
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        )
    if api == CHAT:
        return _int(usage.get("prompt_tokens"))
    return _int(usage.get("input_tokens"))


def scale_usage(api: str, usage: Any, context_limit: int, share: float, factor: float | None = None) -> bool:
    """Scale the input-side numbers of a wire usage object in place (never the output
    side). ``factor`` forces one (a stream's later events use the first event's factor).
    Returns whether anything changed."""
    if not isinstance(usage, dict):
        return False
    if factor is None:
        factor = scale_factor(prompt_tokens(api, usage), context_limit, share)
    if factor is None:
        return False

    def scaled(value: Any) -> Any:
        return int(value * factor) if isinstance(value, int) and not isinstance(value, bool) else value

    if api == ANTHROPIC:
        for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            if key in usage:
                usage[key] = scaled(usage[key])
        return True
    prompt_key, details_key, output_key = (
        ("prompt_tokens", "prompt_tokens_details", "completion_tokens")
        if api == CHAT
        else ("input_tokens", "input_tokens_details", "output_tokens")
    )
    if prompt_key in usage:
        usage[prompt_key] = scaled(usage[prompt_key])
    details = usage.get(details_key)
    if isinstance(details, dict) and "cached_tokens" in details:
        details["cached_tokens"] = min(scaled(details["cached_tokens"]), _int(usage.get(prompt_key)))
    if "total_tokens" in usage:
        usage["total_tokens"] = _int(usage.get(prompt_key)) + _int(usage.get(output_key))
    return True


# ---------------------------------------------------------------------------------------------
# SSE framing that keeps each event's bytes
# ---------------------------------------------------------------------------------------------


class EventSplitter:
    """Bytes in, ``(event name, data, raw bytes)`` out: the raw bytes are relayed unchanged
    when an event needs no rewriting."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[str, str, bytes]]:
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        events = []
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            raw, buffer = buffer[: end + 2], buffer[end + 2 :]
            name, data = "", []
            for line in raw.decode("utf-8", errors="replace").split("\n"):
                if not line or line.startswith(":"):
                    continue
                key, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if key == "event":
                    name = value
                elif key == "data":
                    data.append(value)
            # A comment-only block (a keep-alive) is relayed as it came.
            events.append((name, "\n".join(data), raw))
        self._buffer = buffer
        return events


def sse(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


# ---------------------------------------------------------------------------------------------
# One recall turn: the loop over upstream rounds
# ---------------------------------------------------------------------------------------------


@attrs.define
class RecallCall:
    id: str
    arguments: Any


@attrs.define
class RoundResult:
    """What one upstream round produced, for the loop to decide what comes next."""

    recall_calls: list[RecallCall] = attrs.field(factory=list)
    client_calls: list[str] = attrs.field(factory=list)  # call ids, in order
    order: list[str] = attrs.field(factory=list)  # every call id, in the model's order
    assistant: list[dict[str, Any]] = attrs.field(factory=list)  # wire items as sent upstream
    visible: int = 0  # output items the client saw this round (Responses)
    ok: bool = True


Sender = Callable[[bytes], Awaitable[httpx.Response]]


def _fed(assembler: Any, data: bytes, api: str) -> Any:
    """Feed the round's assembler (it records the answer). One that cannot read the stream
    is replaced by :class:`_StoppedAssembler` for the rest of it: the stream is still
    relayed, only the record of it is lost."""
    try:
        assembler.feed(data)
    except Exception as exc:
        log.warning(
            "%s: the upstream's stream could not be read (%s: %s); relayed as is",
            api,
            type(exc).__name__,
            exc,
        )
        return _StoppedAssembler(assembler)
    return assembler


class _StoppedAssembler:
    """A failed assembler, fed nothing more: its result is what it had read."""

    def __init__(self, failed: Any) -> None:
        self._failed = failed

    def feed(self, data: bytes) -> None:
        pass

    def result(self) -> AssistantMessage:
        return self._failed.result()


def _result(assembler: Any, api: str) -> AssistantMessage:
    """The answer the round's assembler read; an empty one when it cannot say (a stream of
    the wrong shape: relayed as it came, recorded without its answer)."""
    try:
        return assembler.result()
    except Exception as exc:
        log.warning("%s: the upstream's stream could not be read (%s: %s)", api, type(exc).__name__, exc)
        return AssistantMessage()


def _read_event(shape: Any, name: str, text: str, raw: bytes) -> bytes:
    """What the client gets for one upstream event: the shape's rewrite, or, for an event
    the shape cannot read (an upstream's malformed JSON of the wrong shape), the event as it
    came: the stream is the upstream's to get wrong, never the gateway's to break."""
    try:
        return shape.event(name, text, raw)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        log.warning("an upstream stream event could not be read (%s); relayed as it came", exc)
        return raw


class RecallLoop:
    """Relays one client request's answer, running recall rounds in between."""

    def __init__(
        self,
        *,
        codec: Codec,
        view: RequestView,
        body: bytes,
        exchange: Exchange,
        send: Sender,
        finished: Callable[[Exchange], None],
        run: Callable[[Any], Awaitable[str]],
        memory: RecallMemory,
        recall_active: bool,
        max_rounds: int,
        context_limit: int,
        usage_share: float,
    ) -> None:
        self.codec = codec
        self.api = codec.api
        self.view = view
        self.body = body
        self.exchange = exchange
        self.send = send
        self.finished = finished
        self.run = run
        self.memory = memory
        self.active = recall_active
        self.max_rounds = max_rounds
        self.context_limit = context_limit
        self.usage_share = usage_share
        # Follow-up items appended so far, and the record of the turn.
        self.appended: list[dict[str, Any]] = []
        self.markers: list[str] = []
        self.visible_before = 0

    # -- the recall itself -------------------------------------------------------------------

    async def run_calls(self, calls: list[RecallCall]) -> dict[str, str]:
        results = {}
        for call in calls:
            try:
                async with asyncio.timeout(RECALL_TIMEOUT_SECONDS):
                    results[call.id] = await self.run(call.arguments)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                results[call.id] = f"recall failed: no answer within {RECALL_TIMEOUT_SECONDS:g}s"
            except Exception as exc:
                log.exception("recall failed")
                results[call.id] = (
                    f"recall failed: {exc.__class__.__name__}: {exc}"
                    if str(exc)
                    else (f"recall failed: {exc.__class__.__name__}")
                )
        return results

    def result_items(self, results: dict[str, str]) -> list[dict[str, Any]]:
        if self.api == ANTHROPIC:
            content = [
                {"type": "tool_result", "tool_use_id": cid, "content": text} for cid, text in results.items()
            ]
            return [{"role": "user", "content": content}]
        if self.api == CHAT:
            return [{"role": "tool", "tool_call_id": cid, "content": text} for cid, text in results.items()]
        return [
            {"type": "function_call_output", "call_id": cid, "output": text} for cid, text in results.items()
        ]

    def followup_body(self) -> tuple[RequestView, bytes]:
        view = attrs.evolve(
            self.view,
            messages=list(self.view.messages) + wire_messages(self.codec, self.appended),
            modified=True,
        )
        return view, json.dumps(self.codec.render(view), ensure_ascii=False).encode()

    def round_exchange(self, view: RequestView) -> Exchange:
        base = self.exchange
        return Exchange(
            api=base.api,
            path=base.path,
            request=view,
            harness=base.harness,
            session_id=base.session_id,
            project=base.project,
            upstream=base.upstream,
        )

    async def _marker_round(self, result: RoundResult) -> tuple[list[str], dict[str, str]]:
        """Markers for the recall calls of a round, and their results."""
        markers = []
        for call in result.recall_calls:
            args = parse_arguments(call.arguments)
            markers.append(marker_text(args.query, args.id))
        results = await self.run_calls(result.recall_calls)
        return markers, results

    async def _remember_mixed(self, result: RoundResult, results: dict[str, str]) -> None:
        items = self.result_items(results)
        if self.api == ANTHROPIC:
            by_id = {b["tool_use_id"]: b for b in items[0]["content"]}
            record = {"assistant": result.assistant[0]}
        elif self.api == CHAT:
            by_id = {m["tool_call_id"]: m for m in items}
            record = {"assistant": result.assistant[0]}
        else:
            by_id = {m["call_id"]: m for m in items}
            recall_ids = {c.id for c in result.recall_calls}
            record = {"calls": [it for it in result.assistant if it.get("call_id") in recall_ids]}
        record.update(
            kind="mixed", api=self.api, anchor=result.client_calls[0], order=result.order, results=by_id
        )
        await self.memory.add(self.exchange.session_id, record)

    async def _remember_loop(self, tail: str) -> None:
        if not self.markers:
            return
        record = {
            "kind": "loop",
            "api": self.api,
            "markers": self.markers,
            "items": self.appended,
            "tail": _norm(tail)[:200],
            "visible_before": self.visible_before,
        }
        await self.memory.add(self.exchange.session_id, record)

    async def _next_round(self, result: Any, round_no: int) -> tuple[list[Any], Exchange, bytes] | None:
        """After an upstream round that called recall, streamed or not: ``None`` when the
        turn ends here (recall mixed with the client's own calls, whose results are kept for
        the next request; or the round limit), else the round's markers, and the exchange
        and body of the follow-up to send."""
        if result.client_calls:
            results = await self.run_calls(result.recall_calls)
            await self._remember_mixed(result, results)
            return None
        if round_no >= self.max_rounds:
            return None
        markers, results = await self._marker_round(result)
        if round_no == 0:
            self.visible_before = result.visible
        self.markers.extend(markers)
        self.appended.extend(result.assistant + self.result_items(results))
        view, body = self.followup_body()
        return markers, self.round_exchange(view), body

    # -- non-streaming -----------------------------------------------------------------------

    def _needs_scaling(self, payload: dict[str, Any]) -> bool:
        usage = payload.get("usage")
        if not isinstance(usage, dict):
            return False
        return scale_factor(prompt_tokens(self.api, usage), self.context_limit, self.usage_share) is not None

    async def buffered(self, upstream: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]] | None]:
        """(status, body, headers or None to keep the upstream's)."""
        shape = _JSONShape(self)
        exchange = self.exchange
        response = upstream
        for round_no in range(self.max_rounds + 1):
            try:
                raw = b"".join([chunk async for chunk in response.aiter_raw()])
            except httpx.HTTPError as exc:
                if round_no == 0:
                    raise
                # A follow-up cut off: answer with what the model said so far.
                log.warning("the recall follow-up from %s broke off: %s", exchange.upstream, exc)
                exchange.status = 502
                self.finished(exchange)
                break
            finally:
                await response.aclose()
            try:
                payload = json.loads(decode_body(raw, response.headers.get("content-encoding")))
            except (ValueError, UnsupportedEncoding):
                payload = None
            if not isinstance(payload, dict):
                if round_no == 0:
                    exchange.status = response.status_code
                    self.finished(exchange)
                    return response.status_code, raw, None
                break  # a follow-up that went wrong: answer with what the model said
            try:
                exchange.response = self.codec.parse_response(payload)
                result = shape.add_round(payload) if response.status_code == 200 else None
            except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
                # JSON of the wrong shape: the upstream's bytes are the answer (a follow-up's
                # are dropped: the client gets what the model said before it).
                log.warning("%s: an answer could not be read (%s); relayed as is", self.api, exc)
                exchange.status = response.status_code
                self.finished(exchange)
                if round_no == 0:
                    return response.status_code, raw, None
                break
            exchange.status = response.status_code
            self.finished(exchange)
            if result is None:
                if round_no == 0:
                    return response.status_code, raw, None
                break
            if not self.active or not result.recall_calls:
                if round_no == 0 and not self._needs_scaling(payload):
                    # Nothing to change: the upstream's own bytes.
                    return response.status_code, raw, None
                break
            step = await self._next_round(result, round_no)
            if step is None:
                break
            markers, exchange, body = step
            shape.add_markers(markers)
            try:
                response = await self.send(body)
            except Exception as exc:
                log.warning("the recall follow-up could not be sent: %s", exc)
                break
        await self._remember_loop(shape.final_text())
        return (
            200,
            json.dumps(shape.result(), ensure_ascii=False).encode(),
            [("content-type", "application/json")],
        )

    # -- streaming ---------------------------------------------------------------------------

    async def stream(self, upstream: httpx.Response) -> AsyncIterator[bytes]:
        shape = _stream_shape(self)
        exchange = self.exchange
        response = upstream
        round_no = 0
        try:
            while True:
                assembler = self.codec.assembler()
                try:
                    decoder = decoder_for(response.headers.get("content-encoding"))
                except UnsupportedEncoding:
                    decoder = None
                splitter = EventSplitter()
                try:
                    async for chunk in response.aiter_raw():
                        data = decoder.decompress(chunk) if decoder is not None else chunk
                        assembler = _fed(assembler, data, self.api)
                        out = b"".join(
                            _read_event(shape, name, text, raw) for name, text, raw in splitter.feed(data)
                        )
                        if out:
                            yield out
                    if decoder is not None:
                        tail = decoder.flush() if hasattr(decoder, "flush") else b""
                        if tail:
                            assembler = _fed(assembler, tail, self.api)
                            out = b"".join(_read_event(shape, n, t, r) for n, t, r in splitter.feed(tail))
                            if out:
                                yield out
                except asyncio.CancelledError:
                    exchange.client_disconnected = True
                    raise
                except httpx.HTTPError as exc:
                    log.warning("upstream stream from %s broke off: %s", exchange.upstream, exc)
                    raise UpstreamStreamBroken(str(exc)) from None
                finally:
                    exchange.response = _result(assembler, self.api)
                    await asyncio.shield(response.aclose())
                    self.finished(exchange)
                try:
                    result = shape.end_round()
                except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
                    # A round of the wrong shape: no recall continues it.
                    log.warning(
                        "%s: the upstream's stream could not be read (%s); no recall round", self.api, exc
                    )
                    result = RoundResult(ok=False)
                if not self.active or not result.recall_calls or not result.ok:
                    break
                step = await self._next_round(result, round_no)
                if step is None:
                    break
                markers, exchange, body = step
                yield shape.markers(markers)
                try:
                    response = await self.send(body)
                except Exception as exc:
                    log.warning("the recall follow-up could not be sent: %s", exc)
                    break
                exchange.status = response.status_code
                if response.status_code != 200 or not response.headers.get("content-type", "").startswith(
                    "text/event-stream"
                ):
                    try:
                        raw = b"".join([c async for c in response.aiter_raw()])
                    except httpx.HTTPError:
                        raw = b""
                    finally:
                        await asyncio.shield(response.aclose())
                        self.finished(exchange)
                    log.warning("the recall follow-up got HTTP %s: %s", response.status_code, raw[:300])
                    break
                round_no += 1
                shape.next_round()
            try:
                closing = shape.finish()
            except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
                # The stream ends as the upstream's did, without the events the shape held.
                log.warning("%s: the upstream's stream could not be closed (%s)", self.api, exc)
                closing = b""
            yield closing
            await self._remember_loop(shape.final_text())
        except asyncio.CancelledError:
            exchange.client_disconnected = True
            raise


class UpstreamStreamBroken(Exception):
    """The upstream cut a stream off (re-raised by the app as its own exception type)."""


# ---------------------------------------------------------------------------------------------
# Per-API shapes: the client's view of a turn that may span several upstream rounds
# ---------------------------------------------------------------------------------------------


def _is_recall_name(name: Any) -> bool:
    return name == TOOL_NAME


class _JSONShape:
    """Non-streaming: builds one JSON response from the rounds' responses."""

    def __init__(self, loop: RecallLoop) -> None:
        self.loop = loop
        self.api = loop.api
        self.first: dict[str, Any] | None = None
        self.last: dict[str, Any] = {}
        self.visible: list[Any] = []  # content blocks / output items / text pieces
        self.calls: list[dict[str, Any]] = []  # chat tool calls shown
        self.output_tokens = 0
        self.recall_only = False
        self.texts: list[str] = []  # visible text after the last marker

    def add_round(self, payload: dict[str, Any]) -> RoundResult:
        self.first = self.first or payload
        self.last = payload
        result = RoundResult()
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        self.output_tokens += _int(usage.get("output_tokens" if self.api != CHAT else "completion_tokens"))
        self.texts = []
        if self.api == ANTHROPIC:
            content = [b for b in payload.get("content") or [] if isinstance(b, dict)]
            for block in content:
                if block.get("type") == "tool_use":
                    result.order.append(block.get("id"))
                    if _is_recall_name(block.get("name")):
                        result.recall_calls.append(RecallCall(block.get("id"), block.get("input")))
                        continue
                    result.client_calls.append(block.get("id"))
                if block.get("type") == "text":
                    self.texts.append(str(block.get("text", "")))
                self.visible.append(block)
            result.assistant = [{"role": "assistant", "content": content}]
        elif self.api == CHAT:
            choice = (payload.get("choices") or [{}])[0]
            message = choice.get("message") or {} if isinstance(choice, dict) else {}
            text = message.get("content") if isinstance(message.get("content"), str) else None
            wire: dict[str, Any] = {"role": "assistant", "content": text}
            calls = []
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                calls.append(
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {"name": fn.get("name"), "arguments": fn.get("arguments", "")},
                    }
                )
                result.order.append(call.get("id"))
                if _is_recall_name(fn.get("name")):
                    result.recall_calls.append(RecallCall(call.get("id"), fn.get("arguments")))
                else:
                    result.client_calls.append(call.get("id"))
                    self.calls.append(call)
            if calls:
                wire["tool_calls"] = calls
            if text:
                self.visible.append(text)
                self.texts.append(text)
            result.assistant = [wire]
        else:
            for item in payload.get("output") or []:
                if not isinstance(item, dict):
                    continue
                if item.get("type") == "function_call":
                    result.order.append(item.get("call_id"))
                    if _is_recall_name(item.get("name")):
                        result.recall_calls.append(RecallCall(item.get("call_id"), item.get("arguments")))
                        result.assistant.append(_responses_input_item(item))
                        continue
                    result.client_calls.append(item.get("call_id"))
                if item.get("type") == "message":
                    self.texts.extend(
                        str(p.get("text", "")) for p in item.get("content") or [] if isinstance(p, dict)
                    )
                result.assistant.append(_responses_input_item(item))
                self.visible.append(item)
                result.visible += 1
        return result

    def add_markers(self, markers: list[str]) -> None:
        for marker in markers:
            if self.api == ANTHROPIC:
                self.visible.append({"type": "text", "text": marker})
            elif self.api == CHAT:
                self.visible.append(marker)
            else:
                self.visible.append(_marker_item(marker))

    def final_text(self) -> str:
        return "\n".join(self.texts)  # blocks and parts, as a client joins them

    def result(self) -> dict[str, Any]:
        out = dict(self.last)
        first = self.first or {}
        if "id" in first:
            out["id"] = first["id"]
        usage = copy.deepcopy(self.last.get("usage"))
        if isinstance(usage, dict):
            if self.api == CHAT:
                usage["completion_tokens"] = self.output_tokens
                usage["total_tokens"] = _int(usage.get("prompt_tokens")) + self.output_tokens
            else:
                usage["output_tokens"] = self.output_tokens
                if "total_tokens" in usage:
                    usage["total_tokens"] = _int(usage.get("input_tokens")) + self.output_tokens
            scale_usage(self.api, usage, self.loop.context_limit, self.loop.usage_share)
            out["usage"] = usage
        has_calls = False
        if self.api == ANTHROPIC:
            out["content"] = self.visible
            has_calls = any(b.get("type") == "tool_use" for b in self.visible)
            if not has_calls and out.get("stop_reason") == "tool_use":
                out["stop_reason"] = "end_turn"
        elif self.api == CHAT:
            choices = [dict(c) for c in out.get("choices") or [{}]]
            message = dict(choices[0].get("message") or {"role": "assistant"})
            message["content"] = "\n\n".join(self.visible) if self.visible else None
            if self.calls:
                message["tool_calls"] = self.calls
            else:
                message.pop("tool_calls", None)
                if choices[0].get("finish_reason") == "tool_calls":
                    choices[0]["finish_reason"] = "stop"
            choices[0] = {**choices[0], "message": message}
            out["choices"] = choices
        else:
            out["output"] = self.visible
        return out


def _responses_input_item(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as it goes back as input: the call or message itself, without the
    server's item id and status (reasoning items keep theirs: they are needed)."""
    kind = item.get("type")
    if kind == "function_call":
        return {
            "type": "function_call",
            "call_id": item.get("call_id"),
            "name": item.get("name"),
            "arguments": item.get("arguments", ""),
        }
    if kind == "message":
        content = [
            {"type": "output_text", "text": str(p.get("text", ""))}
            for p in item.get("content") or []
            if isinstance(p, dict) and p.get("type") == "output_text"
        ]
        return {"type": "message", "role": "assistant", "content": content}
    return item


def _marker_item(marker: str, item_id: str | None = None) -> dict[str, Any]:
    return {
        "id": item_id or new_id("msg_lore"),
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": marker, "annotations": []}],
    }


def _stream_shape(loop: RecallLoop) -> Any:
    if loop.api == ANTHROPIC:
        return _AnthropicStream(loop)
    if loop.api == CHAT:
        return _ChatStream(loop)
    return _ResponsesStream(loop)


class _AnthropicStream:
    def __init__(self, loop: RecallLoop) -> None:
        self.loop = loop
        self.round = 0
        self.next_index = 0
        self.index_map: dict[int, int | None] = {}
        self.identity = True
        self.open_recall: int | None = None
        self.blocks: dict[int, dict[str, Any]] = {}  # upstream index -> block being built
        self.partial: dict[int, str] = {}
        self.result = RoundResult()
        self.held: list[bytes] = []
        self.stop_reason: str | None = None
        self.delta_usage: dict[str, Any] = {}
        self.output_tokens = 0
        self.factor: float | None = None
        self.client_calls_shown = False
        self.texts: list[str] = []
        self.terminal = False
        self.held_raw: list[bytes] = []

    def event(self, name: str, data: str, raw: bytes) -> bytes:
        if not name:
            return raw
        if name == "content_block_delta" and self.identity and self.open_recall is None:
            self._track_delta_fast(data)
            return raw
        if name == "ping":
            return raw if self.round == 0 else b""
        try:
            ev = json.loads(data)
        except ValueError:
            return raw
        if not isinstance(ev, dict):
            return raw
        kind = ev.get("type", name)
        if kind == "message_start":
            message = as_dict(ev.get("message"))
            usage = message.get("usage")
            if self.round > 0:
                return b""
            if isinstance(usage, dict):
                self.factor = scale_factor(
                    prompt_tokens(ANTHROPIC, usage), self.loop.context_limit, self.loop.usage_share
                )
                if scale_usage(ANTHROPIC, usage, 0, 0, self.factor):
                    return sse(name, ev)
            return raw
        if kind == "content_block_start":
            index = _int(ev.get("index"))
            block = dict(as_dict(ev.get("content_block")))
            self.blocks[index] = block
            if block.get("type") == "tool_use":
                self.result.order.append(block.get("id"))
                if self.loop.active and _is_recall_name(block.get("name")):
                    self.index_map[index] = None
                    self.open_recall = index
                    self.identity = False
                    return b""
                self.result.client_calls.append(block.get("id"))
                self.client_calls_shown = True
            client = self.next_index
            self.next_index += 1
            self.index_map[index] = client
            if client != index:
                self.identity = False
            return self._rewrite(name, ev, index, raw)
        if kind == "content_block_delta":
            index = _int(ev.get("index"))
            self._track_delta(index, as_dict(ev.get("delta")))
            return self._rewrite(name, ev, index, raw)
        if kind == "content_block_stop":
            index = _int(ev.get("index"))
            if self.open_recall == index:
                self.open_recall = None
            return self._rewrite(name, ev, index, raw)
        if kind == "message_delta":
            delta = as_dict(ev.get("delta"))
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            usage = as_dict(ev.get("usage"))
            self.output_tokens += _int(usage.get("output_tokens"))
            self.delta_usage = dict(usage)
            self.held_raw.append(raw)
            return b""
        if kind == "message_stop":
            self.terminal = True
            self.held_raw.append(raw)
            return b""
        return raw

    def _track_delta_fast(self, data: str) -> None:
        # Only text is tracked on the fast path (for the restore fingerprint), and only
        # cheaply: the last text block's deltas are decoded lazily at the end of the round.
        self.partial.setdefault(-1, "")
        self.partial[-1] += data + "\n"

    def _track_delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        dtype = delta.get("type")
        if dtype == "text_delta":
            block["text"] = block.get("text", "") + str(delta.get("text", ""))
        elif dtype == "input_json_delta":
            self.partial[index] = self.partial.get(index, "") + str(delta.get("partial_json", ""))
        elif dtype == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
        elif dtype == "signature_delta":
            block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
        elif dtype == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))

    def _rewrite(self, name: str, ev: dict[str, Any], index: int, raw: bytes) -> bytes:
        client = self.index_map.get(index, index)
        if client is None:
            return b""
        if client == index:
            return raw
        ev["index"] = client
        return sse(name, ev)

    def _replay_fast_deltas(self) -> None:
        lines = self.partial.pop(-1, "")
        for line in lines.split("\n"):
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict):
                self._track_delta(_int(ev.get("index")), as_dict(ev.get("delta")))

    def end_round(self) -> RoundResult:
        if self.round > 0 or any(v is None for v in self.index_map.values()):
            # Text relayed on the fast path is only decoded when a follow-up needs it.
            self._replay_fast_deltas()
        result = self.result
        content = []
        self.texts = []
        for index in sorted(self.blocks):
            block = dict(self.blocks[index])
            if block.get("type") == "tool_use":
                arguments = loads_or(self.partial.get(index, ""), {})
                # A call cut off mid-arguments (max_tokens) still goes back as an object.
                block["input"] = arguments if isinstance(arguments, dict) else {}
                if self.index_map.get(index) is None:
                    result.recall_calls.append(RecallCall(block.get("id"), arguments))
            elif block.get("type") == "text":
                self.texts.append(str(block.get("text", "")))
            content.append(block)
        result.assistant = [{"role": "assistant", "content": content}]
        result.ok = self.terminal
        return result

    def next_round(self) -> None:
        self.round += 1
        self.index_map = {}
        self.identity = False  # continuation indexes always shift
        self.open_recall = None
        self.blocks = {}
        self.partial = {}
        self.result = RoundResult()
        self.terminal = False

    def markers(self, markers: list[str]) -> bytes:
        out = []
        for marker in markers:
            index = self.next_index
            self.next_index += 1
            out.append(
                sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            out.append(
                sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": marker},
                    },
                )
            )
            out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        return b"".join(out)

    def finish(self) -> bytes:
        stop = self.stop_reason
        if stop == "tool_use" and not self.client_calls_shown:
            stop = "end_turn"
        if self.round == 0 and stop == self.stop_reason and self.factor is None:
            return b"".join(self.held_raw)  # nothing to change: the upstream's own bytes
        usage = dict(self.delta_usage)
        usage["output_tokens"] = self.output_tokens
        if self.round > 0:
            # The input side of the last round is the whole prompt the answer came from.
            scale_usage(ANTHROPIC, usage, self.loop.context_limit, self.loop.usage_share)
        elif self.factor is not None:
            scale_usage(ANTHROPIC, usage, 0, 0, self.factor)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": usage,
        }
        out = sse("message_delta", delta)
        if self.terminal or self.round > 0 or self.stop_reason:
            out += sse("message_stop", {"type": "message_stop"})
        return out

    def final_text(self) -> str:
        return "\n".join(self.texts)


_CHAT_SPECIAL = re.compile(r'"tool_calls"|"finish_reason"\s*:\s*"|"usage"\s*:\s*\{|"error"')


class _ChatStream:
    def __init__(self, loop: RecallLoop) -> None:
        self.loop = loop
        self.round = 0
        self.first: dict[str, Any] | None = None
        self.text_shown = False
        self.tool_map: dict[int, int | None] = {}
        self.next_tool = 0
        self.calls: dict[int, dict[str, Any]] = {}
        self.text: list[str] = []
        self.result = RoundResult()
        self.finish_chunk: dict[str, Any] | None = None
        self.usage_chunk: dict[str, Any] | None = None
        self.done = False
        self.output_tokens = 0
        self.factor: float | None = None
        self.client_calls_shown = False
        self.final_texts: list[str] = []
        self.held_raw: list[bytes] = []
        self.finish_whole = True

    def event(self, name: str, data: str, raw: bytes) -> bytes:
        if data.strip() == "[DONE]":
            self.done = True
            self.held_raw.append(raw)
            return b""
        special = _CHAT_SPECIAL.search(data) is not None
        if self.first is not None and self.round == 0 and not special:
            self._fast_text(data)
            return raw
        try:
            ev = json.loads(data)
        except ValueError:
            return raw
        if not isinstance(ev, dict):
            return raw
        if self.first is None:
            self.first = {k: ev.get(k) for k in ("id", "created", "model")}
        changed = self.round > 0
        if changed:
            ev.update({k: v for k, v in self.first.items() if v is not None})
        if isinstance(ev.get("usage"), dict):
            self.usage_chunk = ev
            self.output_tokens += _int(ev["usage"].get("completion_tokens"))
            if not ev.get("choices"):
                self.held_raw.append(raw)
                return b""
            ev = dict(ev, usage=None)
            changed = True
        choices = as_list(ev.get("choices"))
        for choice in choices:
            if not isinstance(choice, dict) or _int(choice.get("index")) != 0:
                continue
            delta = as_dict(choice.get("delta"))
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
                if delta["content"]:
                    self.text_shown = True
            if delta.get("tool_calls"):
                kept = []
                for call in delta["tool_calls"]:
                    index = _int(call.get("index"))
                    slot = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
                    slot["id"] = call.get("id") or slot["id"]
                    fn = call.get("function") or {}
                    slot["name"] += fn.get("name") or ""
                    slot["arguments"] += fn.get("arguments") or ""
                    if index not in self.tool_map:
                        if self.loop.active and _is_recall_name(slot["name"]):
                            self.tool_map[index] = None
                        else:
                            self.tool_map[index] = self.next_tool
                            self.next_tool += 1
                            self.client_calls_shown = True
                    client = self.tool_map[index]
                    if client is None:
                        changed = True
                        continue
                    if client != index:
                        call = dict(call, index=client)
                        changed = True
                    kept.append(call)
                delta = dict(delta)
                if kept:
                    delta["tool_calls"] = kept
                else:
                    delta.pop("tool_calls")
                choice["delta"] = delta
            if choice.get("finish_reason"):
                self.finish_chunk = ev
                rest = self._without_finish(ev)
                if rest or changed:
                    self.finish_whole = False
                else:
                    self.held_raw.append(raw)
                return rest
        return sse(None, ev) if changed else raw

    def _without_finish(self, ev: dict[str, Any]) -> bytes:
        # Anything else in the finish chunk is relayed; the finish itself waits for the end.
        choice = dict(ev["choices"][0])
        delta = as_dict(choice.get("delta"))
        if not delta or delta == {"content": ""} or delta == {}:
            return b""
        rest = dict(ev, choices=[dict(choice, finish_reason=None)])
        return sse(None, rest)

    def _fast_text(self, data: str) -> None:
        # Content deltas are kept undecoded; decoded once at the end of the round.
        self.text.append("\0" + data)
        self.text_shown = True

    def _texts(self) -> str:
        out = []
        for piece in self.text:
            if piece.startswith("\0"):
                try:
                    ev = json.loads(piece[1:])
                    for choice in as_list(ev.get("choices")):
                        content = as_dict(choice.get("delta")).get("content")
                        if isinstance(content, str) and _int(choice.get("index")) == 0:
                            out.append(content)
                except (ValueError, AttributeError):
                    continue
            else:
                out.append(piece)
        return "".join(out)

    def end_round(self) -> RoundResult:
        result = self.result
        needed = self.round > 0 or any(v is None for v in self.tool_map.values())
        text = self._texts() if needed else ""  # decoded only when a follow-up needs it
        self.final_texts = [text]
        wire: dict[str, Any] = {"role": "assistant", "content": text or None}
        calls = []
        for index in sorted(self.calls):
            slot = self.calls[index]
            calls.append(
                {
                    "id": slot["id"],
                    "type": "function",
                    "function": {"name": slot["name"], "arguments": slot["arguments"]},
                }
            )
            result.order.append(slot["id"])
            if self.tool_map.get(index) is None:
                result.recall_calls.append(RecallCall(slot["id"], slot["arguments"]))
            else:
                result.client_calls.append(slot["id"])
        if calls:
            wire["tool_calls"] = calls
        result.assistant = [wire]
        result.ok = self.done or self.finish_chunk is not None
        return result

    def next_round(self) -> None:
        self.round += 1
        self.tool_map = {}
        self.calls = {}
        self.text = []
        self.result = RoundResult()
        self.finish_chunk = None
        self.done = False

    def markers(self, markers: list[str]) -> bytes:
        text = ("\n\n" if self.text_shown else "") + "\n\n".join(markers) + "\n\n"
        self.text_shown = True
        base = dict(self.first or {}, object="chat.completion.chunk")
        chunk = {**base, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        return sse(None, chunk)

    def finish(self) -> bytes:
        out = b""
        base = dict(self.first or {}, object="chat.completion.chunk")
        reason = (self.finish_chunk or {"choices": [{}]})["choices"][0].get("finish_reason")
        unchanged = (
            self.round == 0
            and self.finish_whole
            and not (reason == "tool_calls" and not self.client_calls_shown)
            and (
                self.usage_chunk is None
                or scale_factor(
                    prompt_tokens(CHAT, self.usage_chunk["usage"]),
                    self.loop.context_limit,
                    self.loop.usage_share,
                )
                is None
            )
        )
        if unchanged:
            return b"".join(self.held_raw)
        if self.finish_chunk is not None:
            reason = self.finish_chunk["choices"][0].get("finish_reason")
            if reason == "tool_calls" and not self.client_calls_shown:
                reason = "stop"
            chunk = dict(self.finish_chunk, **{k: v for k, v in base.items() if v is not None})
            chunk["choices"] = [{"index": 0, "delta": {}, "finish_reason": reason}]
            if "usage" in chunk:
                chunk["usage"] = None
            out += sse(None, chunk)
        if self.usage_chunk is not None:
            chunk = dict(self.usage_chunk, **{k: v for k, v in base.items() if v is not None})
            usage = dict(chunk["usage"])
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                usage["prompt_tokens_details"] = dict(details)
            usage["completion_tokens"] = self.output_tokens
            usage["total_tokens"] = _int(usage.get("prompt_tokens")) + self.output_tokens
            scale_usage(CHAT, usage, self.loop.context_limit, self.loop.usage_share)
            chunk["usage"] = usage
            chunk["choices"] = []
            out += sse(None, chunk)
        if self.done or self.round > 0:
            out += sse(None, "[DONE]")
        return out

    def final_text(self) -> str:
        return "".join(self.final_texts)


_RESPONSES_FAST = (
    "response.output_text.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
)


class _ResponsesStream:
    def __init__(self, loop: RecallLoop) -> None:
        self.loop = loop
        self.round = 0
        self.out_map: dict[int, int | None] = {}
        self.next_out = 0
        self.identity = True
        self.seq = -1  # the last sequence number the client saw (decoded events only)
        self.items: dict[int, dict[str, Any]] = {}  # upstream index -> finished item
        self.visible_items: list[dict[str, Any]] = []
        self.result = RoundResult()
        self.terminal: dict[str, Any] | None = None
        self.terminal_name = ""
        self.terminal_raw = b""
        self.first_response: dict[str, Any] | None = None
        self.output_tokens = 0
        self.final_texts: list[str] = []

    def _seq(self, ev: dict[str, Any]) -> None:
        if self.round == 0 and self.identity:
            self.seq = max(self.seq, _int(ev.get("sequence_number")))
        else:
            self.seq += 1
            ev["sequence_number"] = self.seq

    def event(self, name: str, data: str, raw: bytes) -> bytes:
        if name in _RESPONSES_FAST and self.round == 0 and self.identity:
            return raw
        try:
            ev = json.loads(data)
        except ValueError:
            return raw
        if not isinstance(ev, dict):
            return raw
        kind = ev.get("type", name)
        if kind in ("response.created", "response.in_progress"):
            if self.round > 0:
                return b""
            self.first_response = self.first_response or dict(as_dict(ev.get("response")))
            self._seq(ev)
            return raw
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            self.terminal = ev
            self.terminal_raw = raw
            self.terminal_name = name or kind
            usage = as_dict(ev.get("response")).get("usage")
            if isinstance(usage, dict):
                self.output_tokens += _int(usage.get("output_tokens"))
            return b""
        if "output_index" not in ev:
            self._seq(ev)
            return raw if self.round == 0 and self.identity else sse(name, ev)
        index = _int(ev.get("output_index"))
        if kind == "response.output_item.added":
            item = as_dict(ev.get("item"))
            if item.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
                self.result.order.append(item.get("call_id"))
                if (
                    self.loop.active
                    and item.get("type") == "function_call"
                    and _is_recall_name(item.get("name"))
                ):
                    self.out_map[index] = None
                    self.identity = False
                    return b""
                self.result.client_calls.append(item.get("call_id"))
            client = self.next_out
            self.next_out += 1
            self.out_map[index] = client
            if client != index:
                self.identity = False
        if kind == "response.output_item.done":
            self.items[index] = as_dict(ev.get("item"))
        client = self.out_map.get(index, index)
        if client is None:
            return b""
        if kind == "response.output_item.done":
            self.visible_items.append(as_dict(ev.get("item")))
        if self.round == 0 and self.identity:
            self._seq(ev)
            return raw
        ev["output_index"] = client
        self._seq(ev)
        return sse(name, ev)

    def end_round(self) -> RoundResult:
        result = self.result
        texts = []
        for index in sorted(self.items):
            item = self.items[index]
            if item.get("type") == "function_call" and self.out_map.get(index) is None:
                result.recall_calls.append(RecallCall(item.get("call_id"), item.get("arguments")))
            elif self.out_map.get(index) is not None:
                result.visible += 1
            if item.get("type") == "message":
                texts.extend(str(p.get("text", "")) for p in item.get("content") or [] if isinstance(p, dict))
            result.assistant.append(_responses_input_item(item))
        self.final_texts = texts
        result.ok = self.terminal is not None and self.terminal_name == "response.completed"
        return result

    def next_round(self) -> None:
        self.round += 1
        self.out_map = {}
        self.identity = False
        self.items = {}
        self.result = RoundResult()
        self.terminal = None

    def markers(self, markers: list[str]) -> bytes:
        if self.terminal is not None and self.round == 0:
            self.seq = max(self.seq, _int(self.terminal.get("sequence_number")) - 1)
        out = []
        for marker in markers:
            item = _marker_item(marker)
            index = self.next_out
            self.next_out += 1
            pending = dict(item, status="in_progress", content=[])
            part = item["content"][0]
            events = [
                ("response.output_item.added", {"output_index": index, "item": pending}),
                (
                    "response.content_part.added",
                    {
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "part": dict(part, text=""),
                    },
                ),
                (
                    "response.output_text.delta",
                    {"item_id": item["id"], "output_index": index, "content_index": 0, "delta": marker},
                ),
                (
                    "response.output_text.done",
                    {"item_id": item["id"], "output_index": index, "content_index": 0, "text": marker},
                ),
                (
                    "response.content_part.done",
                    {"item_id": item["id"], "output_index": index, "content_index": 0, "part": part},
                ),
                ("response.output_item.done", {"output_index": index, "item": item}),
            ]
            for name, data in events:
                self.seq += 1
                out.append(sse(name, {"type": name, "sequence_number": self.seq, **data}))
            self.visible_items.append(item)
        return b"".join(out)

    def finish(self) -> bytes:
        if self.terminal is None:
            return b""
        ev = copy.deepcopy(self.terminal)
        response = as_dict(ev.get("response"))
        if self.first_response and self.first_response.get("id"):
            response["id"] = self.first_response["id"]
        changed = self.round > 0 or not self.identity
        if changed:
            response["output"] = self.visible_items
        usage = response.get("usage")
        if isinstance(usage, dict):
            if self.round > 0:
                usage["output_tokens"] = self.output_tokens
                usage["total_tokens"] = _int(usage.get("input_tokens")) + self.output_tokens
                changed = True
            if scale_usage(RESPONSES, usage, self.loop.context_limit, self.loop.usage_share):
                changed = True
        if not changed:
            return self.terminal_raw
        ev["response"] = response
        self.seq += 1
        ev["sequence_number"] = max(self.seq, _int(ev.get("sequence_number")))
        return sse(self.terminal_name, ev)

    def final_text(self) -> str:
        return "".join(self.final_texts)


def run_for(gateway: Any, session: str, project: str) -> Callable[[Any], Awaitable[str]]:
    """The recall runner of one request: the gateway's engine, this session and project."""

    async def run(arguments: Any) -> str:
        # Exchanges that already finished reach the store first (read-your-writes), briefly.
        try:
            await gateway.writer.wait_idle(timeout=1.0)
        except Exception:
            pass
        return await run_recall(gateway.recall, arguments, session=session, project=project)

    return run
