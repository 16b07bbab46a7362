"""How much the extractive observer compresses a session, and what it keeps of it.

The extractive observer writes the observation logs when no worker model is usable, so its
log must be small enough to stand in for the conversation and still hold what the next
turn needs. Measured here against the observer as it was before this rewrite (the
*baseline*), in the same run, on the same segments.

Input, one of:

* ``--data DIR``: real Claude Code and Codex sessions (the development set, a folder with
  ``questions.jsonl`` and ``sessions/``; it is never copied into this repository). Each
  session goes the way production takes it: its wire items (Anthropic Messages blocks,
  Responses API items, read by ``benchmarks/transcripts.py``) are parsed by the real codecs,
  turned into stored messages by :func:`lore_core.storage.convert.records_from_exchange`, then into
  :class:`~lore_core.curation.DistillInput` as the scheduler does; a message's time
  is that of its first transcript line. Each context window (the part between two of the
  client's own compactions) is segmented as the scheduler segments it
  (:func:`~lore_core.distill.segment.split_segments`, ``distill.segmentMaxTokens`` 16,000,
  the first-segment minimum until the session has a log), and every segment is observed
  with all logs written before it as ``previous`` and the session's tool names, exactly as
  :meth:`DistillScheduler._distill` calls the observer.
* otherwise a generated session (deterministic, ``--seed``): tasks in which the user asks
  for something, the agent reads, greps, runs tests (failures, now and then a 50 KB+ log),
  explains a decision and edits; reminders, a pasted key and pauses included. Also times the
  renderer, the segmenter and both observers.

Figures, per session:

* **source**: tokens of the segments as the client sent them (text, thinking, tool inputs,
  full tool outputs), as the provenance counts them; **input**: tokens of the rendered
  observer input (long tool outputs already annotated: what an LLM observer would read);
  **log**: tokens of all the session's logs. Tokens are estimated at four characters each.
  **ratio** = source / log (the provenance's ``compression_ratio``); ``/in`` = input / log.
* **retention**: the share of the source's facts that survive in the session's log. Facts
  are found with this file's own patterns, written apart from the observer's
  (:mod:`lore_core.distill.facts`), so that retention measures what the observer drops, not
  what its patterns agree with. Where facts are looked for: user and assistant text
  (harness housekeeping stripped, secrets masked, as every observer input is), tool-call
  inputs (not the file contents an edit writes), tool outputs, except the contents of files
  the agent read (``Read``, ``cat``/``sed -n``/``nl``/``head`` of a file: material it can read
  again, whose code is not an event) and the matched code of a search (of a grep's
  ``path:12:code`` only the path counts). Thinking is not looked at (the rendered input
  leaves it out). The classes:

  - *paths*: path-like words with a slash ending in a file name with an extension
    (``src/app.py``), absolute paths of two or more parts, relative ones of four or more,
    and bare file names with a common extension (``go.mod``); URLs and Go import paths
    (``github.com/...``) are not paths, positions are cut (``app.go:12:3``, grep's
    ``app.go-12-``). A path survives when the log holds it, or holds a path of two or more
    parts that it ends with (``cmd/app.go`` for ``/home/u/proj/cmd/app.go``), or one that
    ends with it, or the path relative to a directory the log says its paths are
    relative to (``paths are relative to /home/u/proj``);
  - *errors*: the first three lines of each tool output (and of each user message: pasted
    logs) that report an error: ``error:``/``fatal:``/``panic:``/``FAIL`` at the start, Go's
    ``--- FAIL:``, ``XxxError: ``/``XxxException: ``, compiler messages (``file:12:3: ``),
    ``Traceback``, ``npm ERR!``, "command not found", "No such file or directory",
    "permission denied", "operation not permitted"; not the exit-status lines of the wire
    framing (the log gives the exit status its own way) and not a verbose run's passing
    lines. One survives when its first 80 characters (whitespace collapsed) are in the log;
  - *ids*: commit SHAs (7-40 hex digits with a digit and a letter, not inside a UUID, not
    a diff's blob ``index`` line), ``#123``/``pull/123``/``issues/123``/``PR 123``
    references, tickets (``ENT-221``), test names (``TestXxx``, ``test_xxx``; not from a
    verbose run's passing lines, ``=== RUN``/``--- PASS``/``::test_x PASSED``; of written
    code only the tests it defines), branch names
    (``checkout -b``, ``push origin``, ``On branch``, ``Switched to branch``) and URLs the
    user or the assistant wrote (tool outputs' URLs are API and avatar links by the
    dozen: their PR numbers and SHAs count through the other patterns). An id survives
    when it occurs in the log (a SHA: its first seven digits; a reference: ``#N``,
    ``pull/N``, ``issues/N`` or ``PR N``);
  - *commands*: every shell command run, without a leading ``cd <dir> &&``; one survives
    when its first 60 characters (whitespace collapsed) are in the log.
  The same is shown for the rendered observer input: what an LLM observer would have to
  work from. It bounds an LLM observer, not the extractive one, which reads the full
  outputs.
* **questions** (real sessions): the data set's questions whose key facts all occur in the
  session's log, scored by the data set's own rule (lower-cased, markdown markers removed,
  whitespace collapsed): a check independent of both pattern sets (the facts were picked
  by the data set's own script, for recall).

The baseline is the extractive observer of commit ``BASELINE`` (the last to change it
before this rewrite), loaded from git in this run (``git show``) together with the
``facts`` module it imported, so both run on the same segments. This is a benchmark, not a
test; run it by hand::

    python benchmarks/distill.py --data SESSIONS_DIR
    python benchmarks/distill.py                  # a generated session, with timings
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import random
import re
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from lore_core.curation import DistillInput
from lore_core.distill.observer import ExtractiveObserver
from lore_core.distill.render import clean, render_message, render_segment, tool_names_of
from lore_core.distill.segment import SegmentPolicy, estimate_tokens, split_segments
from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT, Block, Exchange
from lore_core.storage.convert import records_from_exchange
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec

REPO = Path(__file__).resolve().parents[1]
# The last commit that changed the extractive observer before it was rewritten to compress.
BASELINE = "387fc199d0fa41a8e7bcdca4b8fd876d2c8f3401"

Observe = Callable[[Sequence[DistillInput], str, Mapping[str, str]], str]


# ---------------------------------------------------------------------------------------------
# The observers: today's and the baseline
# ---------------------------------------------------------------------------------------------


def new_observer() -> Observe:
    """The extractive observer as production calls it (through :class:`ExtractiveObserver`)."""
    observer = ExtractiveObserver()

    def observe(messages: Sequence[DistillInput], previous: str, names: Mapping[str, str]) -> str:
        return asyncio.run(observer.observe(messages, previous, tool_names=names)).text

    return observe


def baseline_observer(ref: str = BASELINE) -> Observe:
    """The extractive observer of commit ``ref``, with the ``facts`` module of that commit."""

    def source(path: str) -> str:
        return subprocess.run(
            ["git", "-C", str(REPO), "show", f"{ref}:{path}"], check=True, capture_output=True, text=True
        ).stdout

    facts = types.ModuleType("baseline_facts")
    exec(compile(source("lore_core/distill/facts.py"), "baseline/facts.py", "exec"), facts.__dict__)
    module = types.ModuleType("baseline_extractive")
    # Its ``from lore_core.distill.facts import ...`` must bind the baseline's functions.
    current = sys.modules["lore_core.distill.facts"]
    sys.modules["lore_core.distill.facts"] = facts
    try:
        exec(
            compile(source("lore_core/distill/extractive.py"), "baseline/extractive.py", "exec"),
            module.__dict__,
        )
    finally:
        sys.modules["lore_core.distill.facts"] = current

    def observe(messages: Sequence[DistillInput], previous: str, names: Mapping[str, str]) -> str:
        return module.extractive_observe(messages, previous)

    return observe


# ---------------------------------------------------------------------------------------------
# Real sessions, the way production stores and segments them
# ---------------------------------------------------------------------------------------------


@attrs.define
class RealSession:
    id: str
    agent: str
    # Context windows (between the client's own compactions), as distillation inputs.
    windows: list[list[DistillInput]]


def _line_times(path: Path) -> dict[int, float]:
    """Transcript line number -> its timestamp (epoch seconds)."""
    out: dict[int, float] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            stamp = json.loads(line).get("timestamp") if line.strip() else None
            if isinstance(stamp, str):
                out[number] = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return out


def load_real_sessions(data: Path) -> list[RealSession]:
    from transcripts import CLAUDE, load_sessions

    out = []
    for session in load_sessions(data):
        times = _line_times(data / "sessions" / f"{session.id}.jsonl.gz")
        windows = []
        for window in session.windows:
            wire = [item.wire for item in window.items]
            if session.agent == CLAUDE:
                view = AnthropicMessagesCodec().parse({"messages": wire}, b"")
            else:
                view = OpenAIResponsesCodec().parse({"input": wire}, b"")
            exchange = Exchange(
                api=view.api,
                path="/",
                request=view,
                harness=session.agent,
                session_id=session.id,
                project=session.project,
                upstream="",
            )
            stored = records_from_exchange(exchange).messages
            # The store coalesces consecutive assistant items into one message (and drops
            # items without a role): each stored message gets its first item's time.
            starts: list[float] = []
            previous_role = None
            for item, message in zip(window.items, view.messages, strict=True):
                if not message.role:
                    continue
                if not (message.role == "assistant" and previous_role == "assistant"):
                    starts.append(min((times[n] for n in item.lines if n in times), default=0.0))
                previous_role = message.role
            assert len(starts) == len(stored), "the store's messages no longer match the wire items"
            windows.append(
                [
                    DistillInput.from_block_dicts(m.id, m.role, at, m.blocks)
                    for m, at in zip(stored, starts, strict=True)
                ]
            )
        out.append(RealSession(session.id, session.agent, windows))
    return out


@attrs.define
class Run:
    """One observer over one session."""

    logs: list[str] = attrs.field(factory=list)
    seconds: float = 0.0

    @property
    def text(self) -> str:
        return "\n\n".join(self.logs)


@attrs.define
class Segmented:
    """A session cut into segments as the scheduler cuts it."""

    segments: list[list[DistillInput]]
    names: dict[str, str]

    @property
    def messages(self) -> list[DistillInput]:
        return [m for s in self.segments for m in s]


def segment_windows(windows: Sequence[Sequence[DistillInput]], policy: SegmentPolicy) -> Segmented:
    names = tool_names_of(m for w in windows for m in w)
    segments: list[list[DistillInput]] = []
    for window in windows:
        segments += [s.messages for s in split_segments(window, policy, first=not segments)]
    return Segmented(segments, names)


def run_observer(observe: Observe, session: Segmented) -> Run:
    """Every segment in order, each seeing all logs written before it (the scheduler's
    ``previous``: with no worker there is no consolidation, every log stays live)."""
    run = Run()
    started = time.perf_counter()
    for segment in session.segments:
        run.logs.append(observe(segment, "\n\n".join(run.logs), session.names))
    run.seconds = time.perf_counter() - started
    return run


# ---------------------------------------------------------------------------------------------
# Retention: facts of the source, found with patterns of this file's own
# ---------------------------------------------------------------------------------------------

READ_TOOLS = frozenset({"Read", "read", "read_file", "View", "view", "NotebookRead"})
_PRINT_FILE = re.compile(r"^\s*(?:cat|nl|head|bat|less|more|sed\s+-n)\b[^|]*$")
# Tool-input keys holding the content an edit writes, not what the call did.
_CONTENT_KEYS = frozenset(
    {"content", "old_string", "new_string", "new_source", "edits", "old_str", "new_str"}
)

_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]]+")
_PATH_WORD = re.compile(
    r"(?<![\w/.:@-])(?:~|\.{1,2})?/?(?:[\w@+.-]+/)+[\w@+.-]*|(?<![\w/.:@-])[\w.-]+\.[A-Za-z]\w{0,9}\b"
)
_DOMAIN = re.compile(r"^[\w-]+(?:\.[\w-]+)*\.(?:com|org|io|net|dev|in|sh|co|ai|app|cloud|xyz)(?:/|$)")
_FILE_NAME = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,9}$")
_COMMON_FILE = re.compile(
    r"\.(?:go|mod|sum|py|pyi|ts|tsx|js|jsx|mjs|json|jsonl|ya?ml|toml|md|txt|sh|rs|rb|java|kt|c|h|cc|cpp|"
    r"lock|log|cfg|ini|env|sql|html|css|proto|gz|zip|tar|patch|diff|csv)$"
)
_ERROR_LINE = re.compile(
    r"^\s*(?:error|fatal|panic|FAIL|FAILED|ERROR|Error|E)(?:\b|\[)[:!\s\[]"
    r"|^\s*--- FAIL:"
    r"|\b[A-Z]\w*(?:Error|Exception): "
    r"|^\S+\.\w+:\d+:\d+: "
    r"|^Traceback \(most recent call last\)"
    r"|^\s*npm ERR!"
    r"|(?i:\bcommand not found\b|no such file or directory|permission denied|operation not permitted)"
)
_PASSING = re.compile(r"^\s*(?:=== (?:RUN|PAUSE|CONT|NAME)|--- (?:PASS|SKIP))|::\S+ (?:PASSED|SKIPPED)\b")
_HEX = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")
_BLOB_INDEX = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+")
_REFERENCE = re.compile(r"(?:(?<![\w&])#|\bpull/|\bissues/|\bPR\s+#?)(\d{1,6})\b")
_TICKET = re.compile(r"\b([A-Z][A-Z0-9]{1,9}-\d{1,6})\b")
_NOT_TICKETS = frozenset({"UTF", "SHA", "ISO", "RFC", "HTTP", "X", "TLS", "AES", "CVE", "GPT", "P", "V"})
_TEST = re.compile(r"(?<![\w/.-])(Test[A-Z0-9_]\w*|test_\w+)\b(?![./])")
_TEST_DEFINED = re.compile(r"\bfunc (Test\w+)\(|\bdef (test_\w+)\(")
_BRANCH = re.compile(
    r"(?:checkout -b|switch -c|branch -[mM]|On branch|push (?:-u |--set-upstream )?origin|"
    r"Switched to (?:a new )?branch)\s+'?([\w./-]+[\w])"
)
_CD = re.compile(r"^\s*cd\s+\S+\s*(?:&&|;)\s*")
_ROOT_NOTE = re.compile(r"paths are relative to (/\S+)")
_SEARCH = re.compile(r"^\s*(?:rg|grep|egrep|fgrep|ag|git\s+grep)\b")
_GREP_MATCH = re.compile(r"^(\S+?\.[A-Za-z]\w*)[:-]\d+[:-].*$", re.M)


def _command(tool_input: object) -> str:
    if isinstance(tool_input, dict):
        for key in ("command", "cmd"):
            value = tool_input.get(key)
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return ""


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in _CONTENT_KEYS:
                yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _written(tool_input: object) -> str:
    """The code an edit, a write or a patch adds."""
    if isinstance(tool_input, str):
        return "\n".join(line[1:] for line in tool_input.splitlines() if line.startswith("+"))
    parts: list[str] = []
    if isinstance(tool_input, dict):
        parts += [
            v
            for k, v in tool_input.items()
            if k in ("content", "new_string", "new_str") and isinstance(v, str)
        ]
        for edit in tool_input.get("edits") or []:
            if isinstance(edit, dict) and isinstance(edit.get("new_string"), str):
                parts.append(edit["new_string"])
    return "\n".join(parts)


@attrs.define
class Source:
    """Where facts are looked for (see the module docstring)."""

    texts: list[str] = attrs.field(factory=list)  # user and assistant text, tool-call inputs
    outputs: list[str] = attrs.field(factory=list)  # tool outputs but file reads; user text
    written: list[str] = attrs.field(factory=list)  # code edits add
    commands: list[str] = attrs.field(factory=list)


def collect(messages: Sequence[DistillInput], names: Mapping[str, str]) -> Source:
    src = Source()
    calls: dict[str, tuple[str, str]] = {}
    for msg in messages:
        if msg.role in ("system", "developer"):
            continue
        for block in msg.blocks:
            if block.type == TEXT:
                text = clean(block.text)
                if text:
                    src.texts.append(text)
                    if msg.role == "user":
                        src.outputs.append(text)  # pasted logs and errors
            elif block.type == TOOL_CALL:
                command = _command(block.tool_input)
                calls[block.tool_call_id or ""] = (block.tool_name or "", command)
                if command:
                    src.commands.append(command)
                if isinstance(block.tool_input, str):  # a patch: its file headers
                    headers = [x for x in block.tool_input.splitlines() if x.startswith("*** ")]
                    src.texts.append("\n".join(headers))
                else:
                    src.texts += [clean(s) for s in _strings(block.tool_input)]
                src.written.append(_written(block.tool_input))
            elif block.type == TOOL_RESULT:
                call_id = block.tool_call_id or ""
                tool, command = calls.get(call_id, (names.get(call_id, ""), ""))
                if tool in READ_TOOLS or (command and _PRINT_FILE.match(command)):
                    continue
                text = clean(block.text)
                if tool in ("Grep", "grep") or _SEARCH.match(command):
                    text = _GREP_MATCH.sub(r"\1", text)  # ``path:12:code``: the code is file content too
                src.outputs.append(text)
    return src


def _path(word: str) -> str:
    path = word.rstrip(".,:;)'\"`")
    path = re.sub(r"^(.*?\.[A-Za-z]\w*)(?:[:-]\d+)+(?:[:-].*)?$", r"\1", path)  # app.go:12:3, app.go-12-
    return path[4:] if path.startswith(".../") else path


def path_facts(text: str) -> set[str]:
    out: set[str] = set()
    for match in _PATH_WORD.finditer(_URL.sub(" ", text)):
        path = _path(match.group(0))
        if len(path) < 4 or not any(c.isalpha() for c in path) or _DOMAIN.match(path.lstrip("./")):
            continue
        if "/" in path:
            name = path.rstrip("/").rsplit("/", 1)[-1]
            absolute = path.startswith(("/", "~/"))
            if (
                _FILE_NAME.search(name)
                or (absolute and path.strip("/").count("/") >= 1)
                or path.count("/") >= 3
            ):
                out.add(path.rstrip("/"))
        elif _COMMON_FILE.search(path) and not path.startswith("."):
            out.add(path)
    return out


def error_facts(text: str, per_output: int = 3) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        norm = " ".join(line.split())
        if norm and _ERROR_LINE.search(line) and not _PASSING.search(line) and norm not in out:
            out.append(norm)
            if len(out) >= per_output:
                break
    return out


def id_facts(text: str, urls: bool = True) -> set[str]:
    ids: set[str] = set()
    for line in text.splitlines():
        if not _BLOB_INDEX.match(line):
            ids.update("sha:" + h for h in _HEX.findall(line) if not h.isdigit() and not h.isalpha())
        if not _PASSING.search(line):
            ids.update("test:" + t for t in _TEST.findall(line))
    ids.update("ref:" + n for n in _REFERENCE.findall(text))
    ids.update("ticket:" + t for t in _TICKET.findall(text) if t.split("-")[0] not in _NOT_TICKETS)
    ids.update("branch:" + b for b in _BRANCH.findall(text))
    if urls:
        ids.update("url:" + u.rstrip(".,:;") for u in _URL.findall(text))
    return ids


FACT_CLASSES = ("paths", "errors", "ids", "commands")


def facts(src: Source) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {kind: set() for kind in FACT_CLASSES}
    for text in src.texts:
        found["paths"] |= path_facts(text)
        found["ids"] |= id_facts(text)
    for text in src.outputs:
        found["paths"] |= path_facts(text)
        found["ids"] |= id_facts(text, urls=False)
        found["errors"].update(error_facts(text))
    for code in src.written:
        found["ids"].update("test:" + (a or b) for a, b in _TEST_DEFINED.findall(code))
    found["commands"] = {" ".join(_CD.sub("", c).split())[:60] for c in src.commands}
    return found


def _norm(text: str) -> str:
    return " ".join(text.split())


class Log:
    """A session's log, ready for survival checks."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.norm = _norm(text)
        self.paths = path_facts(text)
        # A log may say which directory its paths are relative to.
        self.roots = [r.rstrip("/") + "/" for r in _ROOT_NOTE.findall(text)]

    def keeps(self, kind: str, fact: str) -> bool:
        if kind == "paths":
            relative = [fact[len(r) :] for r in self.roots if fact.startswith(r)]
            return (
                fact in self.text
                or any(fact.endswith("/" + p) for p in self.paths if "/" in p)
                or any(p.endswith("/" + fact) for p in self.paths)
                or any(r in self.paths for r in relative)
            )
        if kind in ("errors", "commands"):
            return fact[:80] in self.norm
        tag, value = fact.split(":", 1)
        if tag == "sha":
            return value[:7] in self.text
        if tag == "ref":
            return re.search(rf"(?:#|pull/|issues/|PR\s*#?){value}\b", self.text) is not None
        return value in self.text


def retention(found: Mapping[str, set[str]], text: str) -> dict[str, tuple[int, int]]:
    """(kept, total) per class of fact."""
    log = Log(text)
    return {
        kind: (sum(1 for f in found[kind] if log.keeps(kind, f)), len(found[kind])) for kind in FACT_CLASSES
    }


def lost_facts(found: Mapping[str, set[str]], text: str) -> dict[str, list[str]]:
    """The facts of each class a log does not keep, sorted."""
    log = Log(text)
    return {kind: sorted(f for f in found[kind] if not log.keeps(kind, f)) for kind in FACT_CLASSES}


def pct(kept: int, total: int) -> str:
    return f"{100 * kept / total:.0f}%" if total else "-"


# ---------------------------------------------------------------------------------------------
# The generated session (no real data needed)
# ---------------------------------------------------------------------------------------------

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

    def call(self, tool: str, tool_input: dict[str, Any], output: str, is_error: bool = False) -> None:
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


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


@attrs.define
class Measured:
    name: str
    agent: str
    messages: int
    segments: int
    source: int
    input: int
    old: Run
    new: Run
    kept: dict[str, dict[str, tuple[int, int]]]  # "input" / "old" / "new" -> class -> (kept, total)
    questions: dict[str, int] = attrs.field(factory=dict)  # "total" / "input" / "old" / "new"
    lost: dict[str, list[str]] = attrs.field(factory=dict)  # class -> facts the new log lost


def measure(
    name: str, agent: str, session: Segmented, old: Observe, new: Observe, questions: Sequence[Any] = ()
) -> Measured:
    messages = session.messages
    rendered = "\n".join(render_segment(s, tool_names=session.names) for s in session.segments)
    old_run, new_run = run_observer(old, session), run_observer(new, session)
    found = facts(collect(messages, session.names))
    texts = {"input": rendered, "old": old_run.text, "new": new_run.text}
    result = Measured(
        name=name,
        agent=agent,
        messages=len(messages),
        segments=len(session.segments),
        source=sum(estimate_tokens(m.raw_text) for m in messages),
        input=estimate_tokens(rendered),
        old=old_run,
        new=new_run,
        kept={label: retention(found, text) for label, text in texts.items()},
        lost=lost_facts(found, new_run.text),
    )
    if questions:
        from transcripts import supported

        result.questions = {"total": len(questions)}
        for label, text in texts.items():
            result.questions[label] = sum(1 for q in questions if supported(text, q.key_facts))
    return result


def _cells(kept: Mapping[str, tuple[int, int]]) -> str:
    return " ".join(f"{pct(*kept[k]):>4}" for k in FACT_CLASSES)


def _total(rows: Sequence[Measured], label: str, kind: str) -> tuple[int, int]:
    return sum(r.kept[label][kind][0] for r in rows), sum(r.kept[label][kind][1] for r in rows)


def report(rows: Sequence[Measured]) -> None:
    print("tokens (estimated, 4 chars each); ratio = source / log; /in = rendered input / log")
    print(
        f"{'session':<14}{'agent':<7}{'msgs':>6}{'segs':>5}{'source':>11}{'input':>10}"
        f" |{'old log':>8}{'ratio':>7}{'/in':>5} |{'new log':>8}{'ratio':>7}{'/in':>5}"
    )
    for r in rows:
        old, new = estimate_tokens(r.old.text), estimate_tokens(r.new.text)
        print(
            f"{r.name[:13]:<14}{r.agent[:6]:<7}{r.messages:>6}{r.segments:>5}{r.source:>11,}{r.input:>10,}"
            f" |{old:>8,}{r.source / old:>6.1f}x{r.input / old:>5.1f}"
            f" |{new:>8,}{r.source / new:>6.1f}x{r.input / new:>5.1f}"
        )
    if len(rows) > 1:
        source, rendered = sum(r.source for r in rows), sum(r.input for r in rows)
        old = sum(estimate_tokens(r.old.text) for r in rows)
        new = sum(estimate_tokens(r.new.text) for r in rows)
        print(
            f"{'all':<21}{sum(r.messages for r in rows):>6}{sum(r.segments for r in rows):>5}"
            f"{source:>11,}{rendered:>10,} |{old:>8,}{source / old:>6.1f}x{rendered / old:>5.1f}"
            f" |{new:>8,}{source / new:>6.1f}x{rendered / new:>5.1f}"
        )
    print()
    print("retention (share of the source's facts in the log): paths errors ids commands")
    header = "".join(f"{label:>21}" for label in ("input (LLM reads)", "old", "new"))
    print(f"{'session':<14}{'facts':>18} {header}")
    for r in rows:
        totals = "/".join(str(r.kept["new"][k][1]) for k in FACT_CLASSES)
        print(
            f"{r.name[:13]:<14}{totals:>18} "
            + "".join(f"{_cells(r.kept[label]):>21}" for label in ("input", "old", "new"))
        )
    if len(rows) > 1:
        cells = {
            label: " ".join(f"{pct(*_total(rows, label, k)):>4}" for k in FACT_CLASSES)
            for label in ("input", "old", "new")
        }
        totals = "/".join(str(_total(rows, "new", k)[1]) for k in FACT_CLASSES)
        print(
            f"{'all':<14}{totals:>18} " + "".join(f"{cells[label]:>21}" for label in ("input", "old", "new"))
        )
    asked = [r for r in rows if r.questions]
    if asked:
        total = sum(r.questions["total"] for r in asked)
        found = {label: sum(r.questions[label] for r in asked) for label in ("input", "old", "new")}
        print()
        print(
            f"data set questions whose key facts are all in the log: old {found['old']}/{total}, "
            f"new {found['new']}/{total} (rendered input {found['input']}/{total})"
        )
        print(
            "  per session (old -> new): "
            + ", ".join(f"{r.questions['old']}->{r.questions['new']}" for r in asked)
        )
    messages = sum(r.messages for r in rows)
    print()
    print(
        f"observer speed: old {messages / sum(r.old.seconds for r in rows):,.0f} msgs/s, "
        f"new {messages / sum(r.new.seconds for r in rows):,.0f} msgs/s"
    )


def print_lost(rows: Sequence[Measured], per_class: int = 12) -> None:
    print("\nfacts the new log lost (at most", per_class, "per class and session):")
    for row in rows:
        for kind in FACT_CLASSES:
            lost = row.lost.get(kind, [])
            if lost:
                shown = "; ".join(f[:100] for f in lost[:per_class])
                more = f" (+{len(lost) - per_class} more)" if len(lost) > per_class else ""
                print(f"  {row.name[:13]:13} {kind:8} {shown}{more}")


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """Fastest of ``repeat`` runs, in seconds (the least disturbed by the rest of the machine)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def generated(args: argparse.Namespace, old: Observe, new: Observe) -> None:
    messages = SessionGenerator(args.seed).session(args.tasks)
    policy = SegmentPolicy()
    days = (messages[-1].timestamp - messages[0].timestamp) / 86_400
    session = segment_windows([messages], policy)
    raw = "\n".join(m.raw_text for m in messages)
    print(
        f"generated session: {len(messages)} messages over {days:.1f} days, "
        f"{len(raw.encode()) / 1e6:.2f} MB raw, "
        f"{len(session.segments)} segments, seed {args.seed}"
    )
    names = session.names
    render_s = best_of(
        args.repeat, lambda: [render_message(m, names, policy.tool_output_max_chars) for m in messages]
    )
    segment_s = best_of(args.repeat, lambda: split_segments(messages, policy))
    print(
        f"renderer {len(messages) / render_s:,.0f} msgs/s, segmenter {len(messages) / segment_s:,.0f} msgs/s"
    )
    row = measure("generated", "-", session, old, new)
    assert SECRET not in row.new.text and SECRET not in row.old.text, "a secret leaked"
    print()
    report([row])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="the real sessions folder (questions.jsonl, sessions/)")
    parser.add_argument("--only", help="real sessions whose id starts with this")
    parser.add_argument(
        "--baseline", default=BASELINE, help="the commit whose extractive observer is the baseline"
    )
    parser.add_argument(
        "--lost", action="store_true", help="also print, per real session, the facts the new log lost"
    )
    parser.add_argument("--tasks", type=int, default=120, help="tasks in the generated session")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="timing runs of the generated session")
    args = parser.parse_args(argv)

    old, new = baseline_observer(args.baseline), new_observer()
    print(f"baseline: the extractive observer of {args.baseline[:12]} (git show), measured in this run")
    if args.data is None:
        generated(args, old, new)
        return
    from transcripts import load_questions

    questions = load_questions(args.data)
    policy = SegmentPolicy()
    rows = []
    for real in load_real_sessions(args.data):
        if args.only and not real.id.startswith(args.only):
            continue
        session = segment_windows(real.windows, policy)
        asked = [q for q in questions if q.session == real.id]
        rows.append(measure(real.id, real.agent, session, old, new, asked))
    print(f"{len(rows)} real sessions from {args.data}, segments of {policy.max_tokens:,} tokens at most")
    print()
    report(rows)
    if args.lost:
        print_lost(rows)


if __name__ == "__main__":
    main()
