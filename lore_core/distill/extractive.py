"""The extractive observer: a deterministic, LLM-free observation log.

It is what distillation falls back to when no worker model is usable, so it must be small
enough to stand in for the conversation in the prompt and still hold what the next turn
needs. Per kind of content:

* **user requests** verbatim (a long paste: its head, then its error lines and the lines
  naming something new); harness text in the user's turn (a skill's instructions, the
  client's own compaction summary, a slash command) is reduced to a line;
* **assistant prose**: the sentences that state a decision, a plan, a finding or a result,
  or name something new (a commit, a PR, a test, a file); narration ("Let me check...") and
  acknowledgements are dropped. The text that ends a turn keeps more than the text between
  tool calls. Thinking keeps at most one decision sentence;
* **a tool call and its output** become one line: the tool with its command or path and an
  edit's size (``-> $ go test ./... => exit 1, 40 lines``), then, below it, the output's
  first error lines (not the whole log), its test summary, commit lines, and the
  identifiers and file paths the log does not hold yet. File contents the agent read
  contribute nothing but their line count.

Everything is deduplicated across the log, the previous observations included: a path,
an identifier, a sentence is written once; a command run again with the same outcome is
not repeated. The shape is the LLM observer's: ``## YYYY-MM-DD`` sections of
``[HH:MM] role: ...`` lines. It never invents anything: each kept line is a (cleaned,
possibly shortened) piece of the source, so it cannot hallucinate, but it cannot say *why*
either.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from lore_core.curation import DistillInput
from lore_core.distill.facts import (
    CODE_FENCE,
    MARKDOWN_LEAD,
    SENTENCE_SPLIT,
    find_identifiers,
    find_paths,
    find_urls,
    first_error_lines,
    is_chatter,
    is_strong_error_line,
    is_test_summary,
    prose_sentences,
    states_conclusion,
    states_decision,
)
from lore_core.distill.render import SKIPPED_ROLES, clean, tool_names_of
from lore_core.model import TEXT, THINKING, TOOL_CALL, TOOL_RESULT
from lore_core.toolkinds import ToolKind, tool_kind

# Longest line kept; longer ones are cut (the head of an error or a sentence says most).
MAX_LINE_CHARS = 240
MAX_COMMAND_CHARS = 160
# A user message up to this long is kept whole; a longer one is a paste (a log, a review).
REQUEST_CHARS = 600
PASTE_HEAD_CHARS = 300
MAX_PASTE_LINES = 6
# Sentences kept of one assistant text: between tool calls, and at the end of a turn.
MAX_SENTENCES = 2
MAX_TURN_END_SENTENCES = 4
# Identifiers named in the code blocks of one assistant text.
MAX_CODE_NAMES = 12
# Per tool output: error lines (the first ones: a failure's head), summary and commit lines,
# identifiers and new paths.
MAX_ERRORS_PER_OUTPUT = 4
MAX_SUMMARY_LINES = 2
MAX_COMMIT_LINES = 8
MAX_IDS_PER_OUTPUT = 60
MAX_PATHS_PER_OUTPUT = 120

# What a tool does comes from the one tool-kind table (lore_core/storage/toolkinds.py:
# harnesses name the same thing differently). A read's output is file content the agent
# looked at, not an event: an "error" in the code it read is not an error that happened, and
# it can read the file again. A to-do list (ToolKind.TODO) is resent whole at every change:
# only the changed items are news.
_EDIT_KINDS = (ToolKind.EDIT, ToolKind.WRITE)
# Reports of another model (a subagent, a web page digest): their conclusion is kept.
_REPORT_KINDS = (ToolKind.AGENT, ToolKind.AGENT_RESULT, ToolKind.WEB)
# "-> Tool: " in an earlier log line: the call a line tells of.
_CALLED = re.compile(r"-> ([^\s:]+): ")
# Shell commands that only print a file or search files: handled as reads and searches.
_PRINT_FILE = re.compile(r"^\s*(?:cat|nl|head|bat|less|more|sed\s+-n)\b[^|;&]*$")
_SEARCH_COMMAND = re.compile(r"^\s*(?:rg|grep|egrep|fgrep|ag|find|fd|ls|tree|git\s+grep)\b")
# Keys of a tool call's input that say what it did, for tools without a rule of their own.
GIST_KEYS = ("command", "cmd", "file_path", "path", "filePath", "pattern", "url", "query", "description")

# ``cd /project && ...``: where the agent works (see _project_root).
_CD = re.compile(r"^\s*cd\s+[\"']?(/[^\s\"';&|]+)")
_ROOT_NOTE = "paths are relative to "
# Wire framing of tool outputs: Codex's exec header, Claude Code's exit code line.
_CODEX_EXEC = re.compile(
    r"\A(?:Command: [^\n]*\n)?Chunk ID: [^\n]*\nWall time: [^\n]*\n"
    r"(?:Process exited with code (?P<code>-?\d+)|Process running with session ID (?P<session>\d+))\n"
    r"(?:Original token count: [^\n]*\n)?(?:Output:\n?)?"
)
_EXIT_CODE = re.compile(r"\AExit code (-?\d+)\n?")
_TOOL_USE_ERROR = re.compile(r"</?tool_use_error>")
_REJECTED = "The user doesn't want to proceed with this tool use"
_USER_SAID = "the user said:"
# Harness text in the user's turn.
_SKILL = "Base directory for this skill:"
_COMPACT_SUMMARY = "This session is being continued from a previous conversation"
_COMMAND_NAME = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.S)
_COMMAND_ARGS = re.compile(r"<command-args>\s*(.*?)\s*</command-args>", re.S)
_BASH_INPUT = re.compile(r"<bash-input>\s*(.*?)\s*</bash-input>", re.S)
_TAGGED_OUTPUT = re.compile(
    r"<(bash-stdout|bash-stderr|local-command-stdout|subagent_notification|task-notification)>(.*?)</\1>",
    re.S,
)
_ANY_TAG = re.compile(r"</?[\w-]+>")
# ``[main 3f2a1bc] Subject`` (git commit), ``3f2a1bc Subject`` (git log --oneline).
_COMMIT_LINE = re.compile(r"^\s*(?:\[[\w./+-]+(?: \(root-commit\))? [0-9a-f]{7,40}\] \S|[0-9a-f]{7,40} \S)")
# ``3 files changed, 40 insertions(+), 2 deletions(-)``: what a commit or a merge changed.
_DIFFSTAT = re.compile(r"^\s*\d+ files? changed\b")
# A grep match: ``path:12:code`` or a context line ``path-12-code``.
_GREP_LINE = re.compile(r"^(\S+?\.\w+)[:-]\d+[:-].*$")
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
# Thinking that wonders rather than decides.
_SPECULATION = re.compile(r"(?i)^\W*(?:maybe|perhaps|actually|wait|hmm|i wonder|or\b|what if|could)|\?\s*$")
# Definitions an edit adds (a hint of what changed), tests first.
_DEFINITION = re.compile(
    r"^[+\s]*(?:func (?:\([^)]*\) )?(\w+)\(|(?:async )?def (\w+)\(|class (\w+)\b|"
    r"(?:export )?(?:async )?function (\w+)\()",
    re.M,
)
_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$")


def _clip(line: str, limit: int = MAX_LINE_CHARS) -> str:
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _key(line: str) -> str:
    return " ".join(line.lower().split())


def _line_key(who: str, text: str) -> str:
    # An output's line is news once, whichever tool printed it.
    return _key(f"{'tool' if who.startswith('tool <- ') else who}: {text}")


def _suffixes(path: str) -> list[str]:
    """``a/b/c.go`` -> ``c.go``, ``b/c.go``, ``a/b/c.go``: the tails a path is known by."""
    parts = path.strip("/").split("/")
    return ["/".join(parts[i:]) for i in range(len(parts) - 1, -1, -1)]


@attrs.define
class _Line:
    when: datetime | None
    who: str
    text: str


class _Log:
    """The lines kept so far and what they already say (seeded from previous observations)."""

    def __init__(self, previous: str) -> None:
        self.lines: list[_Line | None] = []
        self.seen: set[str] = set()
        self.full_paths: set[str] = set()
        self.path_tails: set[str] = set()
        self.ids: set[str] = set()
        # A command's (or any call's) last outcome: the same again is not news.
        self.outcomes: dict[str, str] = {}
        # The project directory paths are written relative to (see _project_root).
        self.root = ""
        for line in previous.splitlines():
            body = line.split("] ", 1)[-1].strip()
            if body.startswith("note: " + _ROOT_NOTE):
                self.root = body.split(_ROOT_NOTE, 1)[1].strip()
            for tool in dict.fromkeys(_CALLED.findall(body)):
                if tool_kind(tool) is ToolKind.TODO:
                    items = body.split(f"-> {tool}: ", 1)[1].split(" => ", 1)[0]
                    self.seen.update(_key(f"plan: {item}") for item in items.split("; "))
            if body and not body.startswith("## "):
                who, _, said = body.partition(": ")
                self.seen.add(_line_key(who, said))
                self.seen.update(_key(s) for s in SENTENCE_SPLIT.split(body.split(": ", 1)[-1]))
                if " -> " in f" {body}" and " => " in body:
                    call, outcome = body.split(" => ", 1)
                    self.outcomes[call.split("-> ", 1)[-1]] = outcome
        self.learn(previous)

    # -- what the log knows ----------------------------------------------------------------

    def learn(self, text: str) -> None:
        for path in find_paths(text):
            self.full_paths.add(path.strip("/"))
            self.path_tails.update(_suffixes(path))
        self.ids.update(find_identifiers(text))
        self.ids.update(find_urls(text))

    def knows_path(self, path: str) -> bool:
        tails = _suffixes(path)
        return tails[-1] in self.path_tails or any(t in self.full_paths for t in tails if "/" in t)

    def new_paths(self, text: str) -> list[str]:
        out: list[str] = []
        for path in find_paths(text):
            if not self.knows_path(path) and path not in out:
                out.append(path)
        return out

    def new_ids(self, text: str) -> list[str]:
        return [i for i in find_identifiers(text) if i not in self.ids]

    def has_news(self, text: str) -> bool:
        """Names a path or an identifier the log does not hold yet."""
        return bool(
            self.new_ids(text) or self.new_paths(text) or any(u not in self.ids for u in find_urls(text))
        )

    def relative(self, text: str) -> str:
        """``text`` with paths under the project directory written relative to it."""
        if not self.root or self.root not in text:
            return text
        text = text.replace(self.root + "/", "")
        return re.sub(re.escape(self.root) + r"(?![\w.@+-])", ".", text)

    def without_cd_root(self, gist: str) -> str:
        if not self.root:
            return gist
        return re.sub(r"^\$ cd [\"']?" + re.escape(self.root) + r"/?[\"']? *(?:&&|;) *", "$ ", gist)

    # -- writing ---------------------------------------------------------------------------

    def add(
        self, when: datetime | None, who: str, text: str, limit: int = MAX_LINE_CHARS, again: bool = False
    ) -> int | None:
        """Keep a line unless the log has it already (or ``again``); its index, or ``None``."""
        text = _clip(text, limit)
        key = _line_key(who, text)
        if not text or (key in self.seen and not again):
            return None
        self.seen.add(key)
        self.learn(text)
        self.lines.append(_Line(when, who, text))
        return len(self.lines) - 1

    def listing(self, when: datetime | None, who: str, title: str, items: list[str], cap: int) -> None:
        if not items:
            return
        more = len(items) - cap
        # The items are known now, even those past the cap: they are not news next time.
        for item in items:
            self.ids.add(item)
            self.path_tails.update(_suffixes(item))
            self.full_paths.add(item.strip("/"))
        # A full SHA is known by its head: twelve hex digits name a commit.
        shown = [item[:12] if _FULL_SHA.match(item) else self.relative(item) for item in items[:cap]]
        text = f"{title}: " + ", ".join(shown) + (f" (+{more} more)" if more > 0 else "")
        self.add(when, who, text, limit=cap * 120)

    def render(self) -> str:
        out: list[str] = []
        day = None
        for line in self.lines:
            if line is None:
                continue
            stamp = ""
            if line.when is not None:
                if line.when.date() != day:
                    day = line.when.date()
                    out.append(f"## {day.isoformat()}")
                stamp = f"[{line.when:%H:%M}] "
            out.append(f"{stamp}{line.who}: {line.text}")
        return "\n".join(out)


# -- text ------------------------------------------------------------------------------------------


def pickprose_sentences(text: str, log: _Log, limit: int, rule: str = "prose") -> list[str]:
    """The first ``limit`` sentences of prose worth keeping, by ``rule``: ``prose`` (the
    assistant's text): conclusions (decisions, plans, findings, results) and sentences
    naming something new; ``conclusions`` (another model's report): conclusions only;
    ``decisions`` (thinking): decisions and root causes only. Narration and
    acknowledgements never, unless they name something new."""
    kept: list[str] = []
    for sentence in prose_sentences(text):
        if len(kept) >= limit:
            break
        news = log.has_news(sentence) or is_strong_error_line(sentence)
        if is_chatter(sentence) and not news:
            continue
        if rule == "decisions":
            keep = states_decision(sentence)
        elif rule == "conclusions":
            keep = states_conclusion(sentence)
        else:
            keep = states_conclusion(sentence) or news
        if keep:
            clipped = _clip(log.relative(sentence))
            if _key(clipped) not in log.seen:
                kept.append(clipped)
                log.seen.add(_key(clipped))
    return kept


_CHOICE = re.compile(r"^\s*\**(?:\d+[.)]|[A-Da-d][.)]|Option \w+:?)\**\s*(.+)")


def _choices(log: _Log, when: datetime | None, text: str) -> None:
    """A turn that ends asking the user to choose: the question and the options offered,
    which the user's next message ("2, but...") refers to."""
    body = CODE_FENCE.sub("", text).strip()
    lines = [line for line in body.splitlines() if line.strip()]
    if not lines or not lines[-1].rstrip("*_ ").endswith("?"):
        return
    options = [m.group(1) for m in (_CHOICE.match(line) for line in lines) if m]
    if not 2 <= len(options) <= 8:
        return
    heads = [
        _clip(re.split(r" [-\u2013\u2014:] |\. ", option.replace("**", ""), maxsplit=1)[0], 100)
        for option in options
    ]
    log.add(when, "assistant", f"{_clip(lines[-1], 200)} options: " + " | ".join(heads), limit=1000)


def _user_text(log: _Log, when: datetime | None, text: str) -> None:
    """A user's text: the request verbatim; harness text reduced to a line."""
    for tag, body in _TAGGED_OUTPUT.findall(text):
        kind = "report" if tag.endswith("notification") else "run"
        _output_facts(
            log, when, f"user <- {tag}", clean(body), failed=tag == "bash-stderr" and bool(body), kind=kind
        )
    text = _TAGGED_OUTPUT.sub("", text)
    command = _COMMAND_NAME.search(text)
    if command:
        args = _COMMAND_ARGS.search(text)
        log.add(when, "user", f"{command.group(1)} {args.group(1) if args else ''}".strip())
        return
    shell = _BASH_INPUT.search(text)
    if shell:
        log.add(when, "user", f"$ {shell.group(1)}", limit=MAX_COMMAND_CHARS)
        return
    text = _ANY_TAG.sub("", text).strip() if text.lstrip().startswith("<") else text.strip()
    if not text:
        return
    lines = [line for line in text.splitlines() if line.strip()]
    if text.startswith((_SKILL, _COMPACT_SUMMARY)):
        # The harness's own text: a skill's instructions, the client's compaction summary.
        log.add(when, "user", f"{lines[0]} [{len(lines)} lines]")
        if text.startswith(_COMPACT_SUMMARY):
            _paste_facts(log, when, lines[1:])
        return
    if len(text) <= REQUEST_CHARS:
        log.add(when, "user", " ".join(lines), limit=REQUEST_CHARS)
        return
    # A paste (a log, a review, a stack trace): its head, then what names something new.
    head = _clip(" ".join(lines), PASTE_HEAD_CHARS)
    log.add(when, "user", f"{head} [{len(lines)} lines]", limit=PASTE_HEAD_CHARS + 20)
    _paste_facts(log, when, lines)


def _paste_facts(log: _Log, when: datetime | None, lines: list[str]) -> None:
    kept = 0
    for line in lines:
        if kept >= MAX_PASTE_LINES:
            break
        if is_strong_error_line(line) or log.has_news(line):
            if log.add(when, "user", MARKDOWN_LEAD.sub("", line)) is not None:
                kept += 1
    body = "\n".join(lines)
    log.listing(when, "user", "ids", log.new_ids(body), MAX_IDS_PER_OUTPUT)
    log.listing(when, "user", "files", log.new_paths(body), MAX_PATHS_PER_OUTPUT)


# -- tool calls ------------------------------------------------------------------------------------


def _command_of(tool_input: Any) -> str:
    if isinstance(tool_input, dict):
        for key in ("command", "cmd"):
            value = tool_input.get(key)
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return ""


def _defined(code: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in _DEFINITION.finditer(code)]


def _is_test(name: str) -> bool:
    return name.startswith(("Test", "test_"))


def _definitions(code: str, before: str = "", limit: int = 3) -> list[str]:
    """Names an edit defines that were not there before: every test, a few others."""
    old = set(_defined(before))
    new = [n for n in dict.fromkeys(_defined(code)) if n not in old]
    tests = [n for n in new if _is_test(n)]
    return tests + [n for n in new if n not in tests][: max(0, limit - len(tests))]


def _changed_tests(code: str, before: str, limit: int = 6) -> list[str]:
    """Tests an edit rewrites (defined in the replaced code and in its replacement): which
    test changed is what a later "why does TestX fail now" needs."""
    old = set(_defined(before))
    return [n for n in dict.fromkeys(_defined(code)) if n in old and _is_test(n)][:limit]


def _definition_notes(code: str, before: str) -> str:
    names, changed = _definitions(code, before), _changed_tests(code, before)
    return (f"; adds {', '.join(names)}" if names else "") + (
        f"; changes {', '.join(changed)}" if changed else ""
    )


def _lines_of(value: Any) -> int:
    return len(value.splitlines()) if isinstance(value, str) else 0


def _patch_gist(patch: str) -> str:
    """``apply_patch: M a.go (+3 -1), A b.go (+28)`` from a Codex patch."""
    files: list[list[Any]] = []
    for line in patch.splitlines():
        header = _PATCH_FILE.match(line)
        if header:
            op = {"Add": "A", "Update": "M", "Delete": "D"}[header.group(1)]
            files.append([op, header.group(2).strip(), 0, 0])
        elif files and line.startswith("+") and not line.startswith("+++"):
            files[-1][2] += 1
        elif files and line.startswith("-") and not line.startswith("---"):
            files[-1][3] += 1
    parts = []
    for op, path, added, removed in files:
        size = f"+{added}" + (f" -{removed}" if removed else "") if op != "D" else ""
        parts.append(f"{op} {path}" + (f" ({size})" if size else ""))
    added_code = "\n".join(line[1:] for line in patch.splitlines() if line.startswith("+"))
    removed_code = "\n".join(line[1:] for line in patch.splitlines() if line.startswith("-"))
    return "apply_patch: " + "; ".join(parts) + _definition_notes(added_code, removed_code)


def _edit_gist(tool: str, args: dict[str, Any]) -> str:
    path = clean(str(args.get("file_path") or args.get("path") or args.get("notebook_path") or "?"))
    if isinstance(args.get("edits"), list):
        edits = [e for e in args["edits"] if isinstance(e, dict)]
        new = "\n".join(str(e.get("new_string") or "") for e in edits)
        old = "\n".join(str(e.get("old_string") or "") for e in edits)
        size = f"{len(edits)} edits"
    elif "content" in args:
        new, old = str(args.get("content") or ""), ""
        size = f"{_lines_of(new)} lines"
    else:
        new = str(args.get("new_string") or args.get("new_source") or "")
        old = str(args.get("old_string") or "")
        size = f"+{_lines_of(new)} -{_lines_of(old)}"
    return f"{tool} {path} ({size})" + _definition_notes(new, old)


def _first_sentence(text: Any, limit: int = 160) -> str:
    text = clean(str(text or ""))
    for sentence in prose_sentences(text):
        return _clip(sentence, limit)
    return ""


def plan_items(items: Any) -> list[str]:
    """A to-do list or plan as ``[status] item`` strings."""
    parts = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            what = item.get("content") or item.get("step") or item.get("subject") or ""
            status = item.get("status")
            parts.append((f"[{status}] " if status else "") + _clip(clean(str(what)), 120))
    return parts


def call_gist(tool: str, tool_input: object) -> str:
    """``$ pytest -q`` / ``Edit src/app.py (+3 -1)`` / ``Read src/app.py``: what a call did,
    in one short line."""
    kind = tool_kind(tool)
    if isinstance(tool_input, str) and kind is ToolKind.PATCH:
        return _patch_gist(tool_input)
    if not isinstance(tool_input, dict):
        return tool
    args: dict[str, Any] = tool_input
    command = _command_of(args)
    if command and (kind is ToolKind.SHELL or kind not in _EDIT_KINDS):
        return "$ " + _clip(clean(command), MAX_COMMAND_CHARS)
    if kind in _EDIT_KINDS:
        return _edit_gist(tool, args)
    if kind is ToolKind.READ:
        path = clean(str(args.get("file_path") or args.get("path") or "?"))
        return f"Read {path}"
    if tool in ("Grep", "grep"):
        where = args.get("path") or args.get("glob") or args.get("file_path") or ""
        return _clip(f'Grep "{clean(str(args.get("pattern", "")))}" {clean(str(where))}'.strip())
    if tool in ("Task", "Agent"):
        return _clip(
            f"{tool}: {clean(str(args.get('description') or ''))}: {_first_sentence(args.get('prompt'))}"
        )
    if tool == "write_stdin":  # Codex polling (or typing into) a command still running
        chars = args.get("chars")
        return f"write_stdin #{args.get('session_id', '?')}" + (
            f" {_clip(str(chars), 80)!r}" if chars else ""
        )
    if tool in ("spawn_agent", "send_input"):
        return f"{tool}: {_first_sentence(args.get('message'))}"
    if kind is ToolKind.TODO:
        return f"{tool}: " + "; ".join(plan_items(args.get("todos") or args.get("plan")))
    if tool == "TaskCreate":
        return f"TaskCreate: {_clip(clean(str(args.get('subject') or '')), 160)}"
    if tool == "TaskUpdate":
        status = args.get("status") or ", ".join(k for k in args if k != "taskId")
        return f"TaskUpdate #{args.get('taskId', '?')} {status}"
    if tool == "ExitPlanMode":
        return "ExitPlanMode: " + _plan_title(str(args.get("plan") or ""))
    if tool == "AskUserQuestion":
        questions = args.get("questions")
        texts = (
            [q.get("question", "") for q in questions if isinstance(q, dict)]
            if isinstance(questions, list)
            else []
        )
        return _clip("AskUserQuestion: " + " / ".join(clean(str(t)) for t in texts), 400)
    for key in GIST_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return _clip(f"{tool}: {clean(value)}")
    values = [
        f"{k}={clean(str(v))[:80]}"
        for k, v in args.items()
        if isinstance(v, str | int) and not isinstance(v, bool)
    ]
    return _clip(f"{tool}: {' '.join(values)}" if values else tool, MAX_COMMAND_CHARS)


def _plan_title(plan: str) -> str:
    """A plan's title and its section headings: what was agreed, in one line."""
    lines = [line.strip() for line in clean(plan).splitlines() if line.strip()]
    if not lines:
        return ""
    heads = [line.lstrip("#").strip() for line in lines[1:] if line.startswith("#")]
    return _clip(lines[0].lstrip("#").strip() + (f" ({'; '.join(heads)})" if heads else ""), 400)


# -- tool outputs ----------------------------------------------------------------------------------


@attrs.define
class _Output:
    body: str
    status: str  # "ok", "exit 2", "error", "running", "rejected"
    reason: str = ""  # the user's words when a call was rejected


def parse_output(text: str, is_error: bool) -> _Output:
    """A tool output without its wire framing, with its outcome."""
    code: int | None = None
    exec_header = _CODEX_EXEC.match(text)
    if exec_header:
        if exec_header.group("session"):
            return _Output(text[exec_header.end() :], "running")
        code = int(exec_header.group("code"))
        text = text[exec_header.end() :]
    elif text.startswith("{") and '"metadata"' in text[-200:]:
        # Codex's apply_patch: {"output": "...", "metadata": {"exit_code": 0, ...}}
        try:
            data = json.loads(text)
            text = str(data.get("output", ""))
            code = int(data.get("metadata", {}).get("exit_code", 0))
        except (ValueError, TypeError, AttributeError):
            pass
    else:
        exit_line = _EXIT_CODE.match(text)
        if exit_line:
            code = int(exit_line.group(1))
            text = text[exit_line.end() :]
    if text.startswith(_REJECTED):
        said = text.split(_USER_SAID, 1)[1].strip() if _USER_SAID in text else ""
        return _Output("", "rejected", said)
    text = _TOOL_USE_ERROR.sub("", text).strip()
    if code is not None:
        return _Output(text, "ok" if code == 0 else f"exit {code}")
    return _Output(text, "error" if is_error else "ok")


def _kind(tool: str, command: str) -> str:
    kind = tool_kind(tool)
    if kind is ToolKind.READ or (command and _PRINT_FILE.match(command)):
        return "read"
    if kind is ToolKind.SEARCH or (command and _SEARCH_COMMAND.match(command)):
        return "search"
    if kind in _EDIT_KINDS or kind is ToolKind.PATCH:
        return "edit"
    if kind in _REPORT_KINDS:
        return "report"
    return "run"


def _annotation(kind: str, out: _Output) -> str:
    lines = len(out.body.splitlines())
    if out.status == "rejected":
        return "rejected by the user"
    if kind == "search":
        return "no matches" if not out.body else f"{lines} lines"
    if kind == "edit" and out.status == "ok":
        return "ok"
    if kind == "read" and out.status == "ok":
        return f"{lines} lines"
    return out.status + (f", {lines} lines" if lines > 1 else "")


def _summary_lines(lines: list[str]) -> list[str]:
    """How a test run ended: the last summary lines, and Go's passing packages as a count."""
    summaries = [line.strip() for line in lines if is_test_summary(line)]
    passing = [line for line in summaries if line.startswith("ok")]
    out = [line for line in summaries if not line.startswith("ok")][-MAX_SUMMARY_LINES:]
    if passing:
        out.append(f"{len(passing)} package{'s' if len(passing) > 1 else ''} ok")
    return out


def _output_facts(
    log: _Log, when: datetime | None, who: str, body: str, *, failed: bool, kind: str = "run"
) -> None:
    """Below a call's line: the output's first error lines, its test summary and commit
    lines, then the identifiers and paths the log does not hold yet."""
    if kind == "read" or not body:
        return
    lines = body.splitlines()
    if kind in ("run", "edit") or failed:
        for line in first_error_lines(body, MAX_ERRORS_PER_OUTPUT, strong_only=not failed):
            log.add(when, who, line)
        if failed and not first_error_lines(body, 1):
            log.add(when, who, lines[0])  # a failure without an error line: its first line
    if kind == "run":
        for line in _summary_lines(lines):
            log.add(when, who, line)
        commits = [line for line in lines if _COMMIT_LINE.match(line) and log.has_news(line)]
        for line in commits[:MAX_COMMIT_LINES]:
            log.add(when, who, line)
        for line in lines:
            if _DIFFSTAT.match(line):
                log.add(when, who, line)
    if kind == "report":
        for sentence in pickprose_sentences(_json_text(body), log, 2, rule="conclusions"):
            log.add(when, who, sentence)
    log.listing(when, who, "ids", log.new_ids(body), MAX_IDS_PER_OUTPUT)
    if kind == "search":
        # ``path:12:matched code``: the file is the event, the code is file content.
        body = "\n".join(_GREP_LINE.sub(r"\1", line) for line in lines)
    log.listing(when, who, "files", log.new_paths(body), MAX_PATHS_PER_OUTPUT)


def _json_text(body: str) -> str:
    """The strings of a JSON output (a subagent's report comes wrapped in JSON), else the body."""
    if not body.startswith(("{", "[")):
        return body
    try:
        data = json.loads(body)
    except ValueError:
        return body
    parts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(data)
    return "\n".join(parts)


@attrs.define
class _Call:
    index: int | None  # the call's line in the log, None when it was not kept
    tool: str
    gist: str
    command: str


def extractive_observe(
    messages: Sequence[DistillInput], previous: str = "", tool_names: Mapping[str, str] | None = None
) -> str:
    """An event log of ``messages``. What ``previous`` (earlier observations) or the log
    already says is not repeated. ``tool_names`` may name the tools of calls made before
    the segment started."""
    log = _Log(previous)
    names = {**(tool_names or {}), **tool_names_of(messages)}
    root = _project_root(messages, log.root)
    if root and root != log.root:
        log.root = root
        first = next((m.timestamp for m in messages if m.timestamp > 0), 0.0)
        log.add(datetime.fromtimestamp(first, UTC) if first else None, "note", _ROOT_NOTE + root)
    calls: dict[str, _Call] = {}
    for msg in messages:
        if msg.role in SKIPPED_ROLES:
            continue
        when = datetime.fromtimestamp(msg.timestamp, UTC) if msg.timestamp > 0 else None
        turn_end = msg.role == "assistant" and not any(b.type == TOOL_CALL for b in msg.blocks)
        for block in msg.blocks:
            if block.type == TEXT:
                text = clean(block.text)
                if not text:
                    continue
                if msg.role == "assistant":
                    limit = MAX_TURN_END_SENTENCES if turn_end else MAX_SENTENCES
                    sentences = pickprose_sentences(text, log, limit)
                    if sentences:
                        log.add(when, "assistant", " ".join(sentences), limit=limit * MAX_LINE_CHARS)
                    # Prose leaves code blocks out; the commits, references and tests they
                    # name are kept as names.
                    code = "\n".join(CODE_FENCE.findall(text))
                    log.listing(when, "assistant", "names in code", log.new_ids(code), MAX_CODE_NAMES)
                    if turn_end:
                        _choices(log, when, text)
                else:
                    _user_text(log, when, text)
            elif block.type == THINKING and msg.role == "assistant":
                sentences = pickprose_sentences(clean(block.text), log, 1, rule="decisions")
                if sentences and not _SPECULATION.search(sentences[0]):
                    log.add(when, "assistant (thinking)", sentences[0])
            elif block.type == TOOL_CALL:
                tool = block.tool_name or "tool"
                index: int | None = None
                if tool_kind(tool) is ToolKind.TODO and isinstance(block.tool_input, dict):
                    gist = tool
                    args = block.tool_input
                    changed = [
                        i
                        for i in plan_items(args.get("todos") or args.get("plan"))
                        if _key(f"plan: {i}") not in log.seen
                    ]
                    log.seen.update(_key(f"plan: {i}") for i in changed)
                    if changed:
                        index = log.add(when, msg.role, f"-> {tool}: " + "; ".join(changed), limit=600)
                else:
                    gist = call_gist(tool, block.tool_input)
                    # Commands stay verbatim, but for a ``cd`` into the project: it says nothing.
                    gist = log.without_cd_root(gist) if gist.startswith("$ ") else log.relative(gist)
                    # Kept even when run before: its outcome decides (see _result).
                    index = log.add(when, msg.role, "-> " + gist, limit=400, again=True)
                calls[block.tool_call_id or ""] = _Call(index, tool, gist, _command_of(block.tool_input))
            elif block.type == TOOL_RESULT:
                _result(log, when, block.tool_call_id or "", block.text, block.is_error, calls, names)
    return log.render()


def _project_root(messages: Sequence[DistillInput], current: str) -> str:
    """The directory the agent works in, so that paths can be written relative to it: the
    working directory its shell calls name, and where absolute and relative names of the
    same files meet (``/home/u/proj/src/a.py`` read, ``src/a.py`` in a grep result). The
    current root stays while nothing speaks for another."""
    votes: Counter[str] = Counter()
    absolute: dict[str, set[str]] = {}
    relative: set[str] = set()
    for msg in messages:
        for block in msg.blocks:
            if block.type == TOOL_CALL and isinstance(block.tool_input, dict):
                workdir = block.tool_input.get("workdir") or block.tool_input.get("cwd")
                if isinstance(workdir, str) and workdir.startswith("/"):
                    votes[workdir.rstrip("/")] += 5
                cd = _CD.match(_command_of(block.tool_input))
                if cd:
                    votes[cd.group(1).rstrip("/")] += 1
                for key in ("file_path", "path", "notebook_path"):
                    value = block.tool_input.get(key)
                    if isinstance(value, str) and value.startswith("/"):
                        absolute.setdefault(value.rsplit("/", 1)[-1], set()).add(value)
            elif block.type in (TOOL_RESULT, TEXT) and block.text:
                for path in find_paths(block.text):
                    if path.startswith("/"):
                        absolute.setdefault(path.rsplit("/", 1)[-1], set()).add(path)
                    elif "/" in path and not path.startswith((".", "~")):
                        relative.add(path)
    for rel in relative:
        for path in absolute.get(rel.rsplit("/", 1)[-1], ()):
            if path.endswith("/" + rel):
                votes[path[: -len(rel) - 1]] += 1
    if not votes or votes[current] > 0:
        return current
    root, count = votes.most_common(1)[0]
    return root if count >= 2 and root.count("/") >= 2 else current


def _result(
    log: _Log,
    when: datetime | None,
    call_id: str,
    text: str,
    is_error: bool,
    calls: dict[str, _Call],
    names: Mapping[str, str],
) -> None:
    call = calls.get(call_id)
    tool = call.tool if call else names.get(call_id, "tool")
    out = parse_output(clean(text), is_error)
    kind = _kind(tool, call.command if call else "")
    note = _annotation(kind, out)
    failed = out.status not in ("ok", "running")
    if kind == "search" and out.status == "exit 1" and not out.body:
        failed, note = False, "no matches"  # grep and rg exit 1 when nothing matched
    index = call.index if call is not None else None
    line = log.lines[index] if index is not None else None
    if call is None or line is None:
        if failed:
            log.add(when, f"tool <- {tool}", note)
        line = None
    else:
        line.text = f"{line.text} => {note}"
        log.seen.add(_line_key(line.who, line.text))
        call.index = None  # a second result for the same call (it happens) changes nothing
    who = f"tool <- {tool}"
    before = len(log.lines)
    if out.reason:
        log.add(when, who, f"user said: {out.reason}", limit=REQUEST_CHARS)
    _output_facts(log, when, who, out.body, failed=failed, kind=kind)
    if call is not None and line is not None and index is not None:
        again = log.outcomes.get(call.gist)
        log.outcomes[call.gist] = note
        if len(log.lines) == before and tool_kind(call.tool) is not ToolKind.TODO:
            if again == note or (again is not None and kind == "read" and not failed):
                # Run before with the same outcome, nothing new in its output (a file read
                # before): the log says it already.
                log.lines[index] = None
