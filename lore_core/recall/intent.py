"""Reading a recall query once into its :class:`QueryPlan`: its words, and what it asks for
beyond them (which session, which events, which one, whose words).

Developers ask a coding memory about *events*: "which test failed first", "what did we commit
right after 'Fix the parser'", "which file did we create first in the session that started
with 'port the CLI to Go'". Word overlap alone answers these badly: the session is named by
its first prompt (whose words then match that prompt, not the answer), a test log never
says "the first test to fail", and "first" and "last" are about time, which full-text and
vector scores know nothing of. :func:`parse` reads four things out of a query:

* a **session reference**: a quoted phrase (``"..."``) that the caller resolves against the
  project's session titles (:func:`title_match`); the quote is then no longer searched for;
* **events**: the tags passages carry (:mod:`lore_core.storage.tags`: ``#testfailure``,
  ``#gitcommit``, ``#filecreated``, ...) that the question's words point at;
* an **order**: ``first`` (earliest) or ``last`` (latest);
* an **anchor**: ``after 'X'`` / ``before 'X'``, a quoted phrase whose occurrence in the
  memory is the point in time the answer lies after (or before);
* whether it asks **about the user** ("which airline did I fly", "how many tanks do I
  have"): then what the user said is the evidence, and the assistant's replies mostly
  restate it (:func:`about_user`).

It is a small set of patterns, not a language model, and what it reads is *evidence*, never
a command: the engine searches the query's words as always, and each reading adds at most a
candidate list and a bounded boost (:mod:`lore_core.recall.engine`, ``boost``), so a pattern
that fires on an incidental word ("what *web* framework", "which *editor* config") can
reorder results of comparable relevance only, and never changes what the query means. The
patterns are written to fire on the phrase that names the event ("searched the web", "which
test failed"), not on a word that merely occurs in it; ``tests/test_recall_plan.py`` holds
questions whose incidental words must read as plain.
"""

from __future__ import annotations

import re

import attrs

from lore_core.recall.cascade import query_terms
from lore_core.storage import tags as T

FIRST = "first"
LAST = "last"
#: "Which file did we change most often": the events grouped by what they acted on.
MOST = "most"
AFTER = "after"
BEFORE = "before"

# Double or typographic quotes of at least a few words: how a question names a session.
_DOUBLE_QUOTED = re.compile(r"[\"\u201c]([^\"\u201d]{8,}?)[\"\u201d]")
# 'X' after "after" / "before": the anchor (single quotes; X may hold apostrophes as long as
# the closing quote ends the phrase).
_ANCHOR = re.compile(
    r"\b(after|before)\s+(?:the\s+)?'(.+?)'(?=\s*(?:[?,.;:!]|$|\s(?:and|but|we|in)\b))", re.I
)
_WORD = re.compile(r"[a-z0-9]+")

# "In the session that started with", "in the session where we implemented the plan": the
# words before a quoted session name, which are about the reference, not the answer.
_SESSION_CLAUSE = re.compile(
    r"(?:\b(?:in|from|during|of)\s+)?\b(?:the|that|our|a)\s+(?:session|conversation|chat|thread)\b[^.?!\"]*$",
    re.I,
)
_ORDER_WORDS = re.compile(
    r"\b(first|earliest|initially|last|latest|final|most recent(?:ly)?|right|just)\b", re.I
)
_MOST_WORDS = re.compile(r"\bmost (?:often|frequently|times)\b|\bthe most\b|\bhow many times\b")
_FIRST_WORDS = re.compile(r"\b(first|earliest|initial|initially|originally|to begin with|at the start)\b")
# "last" as a time window ("in the last two months", "last Saturday") is not an order.
_LAST_WORDS = re.compile(
    r"\b(last|latest|final|finally|most recent|most recently|in the end)\b"
    r"(?!\s+(?:few|couple|several|\d+|one|two|three|four|five|six|seven|eight|nine|ten|"
    r"day|days|night|week|weeks|weekend|month|months|year|years|time|monday|tuesday|wednesday|"
    r"thursday|friday|saturday|sunday)\b)"
)


#: Query patterns -> the event tags they ask about. Checked against the lower-cased query.
#: Each names the event as a phrase (a verb with its object, or an unambiguous noun), so a
#: word that merely occurs ("web framework", "editor config", "linear regression", "the
#: plan's author") does not read as the event.
EVENT_PATTERNS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"\btests?\b[^?.]*\bfail|\bfail\w*\b[^?.]*\btests?\b|\btest failures?\b"), (T.TEST_FAILURE,)),
    (re.compile(r"\bcommands?\b[^?.]*\b(fail\w*|error\w*|exit\w*)|\bexit (code|status)\b|"
                r"\bnon-?zero exit\b"), (T.FAILED_COMMAND,)),
    (re.compile(r"\blint(er|ers|ing)?\b|\bgolangci|\beslint\b|\bruff\b|\bflake8\b|\bclippy\b"),
     (T.LINT_FINDING,)),
    (re.compile(r"\bcompil(e|er|ed|ing|ation) (error|fail\w*)|\bbuild (error|fail\w*|broke\w*)|"
                r"\btype ?errors?\b|does ?n.t (build|compile)|\bfailed to (build|compile)\b"),
     (T.BUILD_ERROR,)),
    (re.compile(r"\bcommit(s|ted)?\b(?! to\b)|\bcommit (message|hash)\b|\bshort hash\b|\bsha\b"),
     (T.GIT_COMMIT,)),
    (re.compile(r"\bhow big\b|\bfiles? changed\b|\binsertions?\b|\bdeletions?\b|\bdiffstat\b"),
     (T.DIFFSTAT,)),
    (re.compile(r"\bpull request\b|\bpr\b|\bmerge request\b"), (T.PULL_REQUEST,)),
    (re.compile(r"\b(git )?branch(es)?\b(?! (of|in) (the )?(code|logic|if|switch|statement))"),
     (T.BRANCH_CREATED, T.GIT_COMMIT)),
    (re.compile(r"\b(edit(s|ed|ing)?|modif(y|ied|ies|ying))\b(?! (mode|config))|"
                r"\b(change[ds]?|touch\w*)\b[^?.]*\bfiles?\b|\bfiles?\b[^?.]*\b(change[ds]?|touch\w*)\b"),
     (T.FILE_EDITED,)),
    (re.compile(r"\b(creat(e|ed|es|ing)|add(ed|ing)?)\b[^?.]*\bfiles?\b|\bnew files?\b"), (T.FILE_CREATED,)),
    (re.compile(r"\btests?\b[^?.]*\b(wrote|write|written|add|added|adding|created?)\b|"
                r"\b(wrote|write|written|add|added|adding|created?)\b[^?.]*\btests?\b"), (T.TEST_WRITTEN,)),
    (re.compile(r"\b(the|our|a|its|your) plan\b(?! to\b)|\btask ?list\b|\btodos?\b|\bto-do\b"),
     (T.TASK_PLAN,)),
    (re.compile(r"\bsub-?agents?\b|\bdelegat\w+"), (T.SUBAGENT,)),
    (re.compile(r"\bweb ?search\w*|\bsearch(ed|ing)? (the )?(web|online|internet)\b|"
                r"\b(on|from) the (web|internet)\b|\blook(ed|ing)? (it |that |this )?up online\b|"
                r"\bonline docs?\b|\bgoogl\w+|\bfetch(ed)? (the|a) (url|web ?page)\b"),
     (T.WEB_LOOKUP,)),
    (re.compile(r"\bgrep\w*|\bsearch(ed)? the code\b|\bsearch pattern\b|\bpattern\b[^?.]*\bsearch"),
     (T.CODE_SEARCH,)),
    (re.compile(r"\btickets?\b|\blinear (issue|ticket|task)s?\b|\bjira\b"), (T.TICKET,)),
    (re.compile(r"\bdecid(e|ed|ing)\b|\bdecisions?\b|"
                r"\bchos(e|en)\b|\bchoose\b|\bwent with\b|\bopt(ed)? for\b|\binstead of\b|"
                r"\brather than\b|\btrade-?offs?\b"),
     (T.DECISION,)),
)  # fmt: skip
_EXIT_CODE = re.compile(r"\bexit (?:code|status) (\d+)\b")
_FIRST_PERSON = re.compile(r"\b(i|my|me|mine|myself|i'm|i've|i'd|i'll)\b")
# What the assistant said or made is asked for: "you mentioned", "remind me", "in our
# previous chat".
_ASSISTANT_SAID = re.compile(
    r"\byou\s+(?:\w+\s+)?(mentioned|suggested|provided|wrote|created|recommended|told|gave|said|"
    r"listed|described|explained|shared|showed|offered|came up with|proposed)\b|\bremind me\b|"
    r"\b(previous|earlier|last) (conversation|chat|discussion)\b"
)


# What the user said, asked or told: "what did I tell you", "how did I describe", "when I
# asked for". The user's own words are the evidence.
_USER_WORDS = re.compile(
    r"\b(i|me)\s+(?:\w+\s+){0,2}?(ask|asked|tell|told|say|said|mention|mentioned|describe|described|"
    r"want|wanted|request|requested|insist|insisted|complain|complained|correct|corrected|"
    r"instruct|instructed|push(ed)? back|object|objected|specif(y|ied)|call|called|put it|phrase|phrased)\b"
)
# Work the agent does in a session, said in the first person by whoever asks: "how did I fix
# the flaky test", "what did I change in the parser module". The model calling recall may
# say "I" of itself, and the session's work (mostly the assistant's) is the answer, not the
# user's life. Read by the things of code a question names (and the verbs only code has),
# not by everyday verbs: "which device did I set up first", "how many kitchen items did I
# fix", "my best time for the 5K run" are about the user (LongMemEval: reading fix / set /
# run as work lost 2 of 106 questions at turn all@10).
_WORK_WORDS = re.compile(
    r"\b(implement\w*|refactor\w*|debug\w*|deploy\w*|merge[ds]?|rebas\w+|compil\w+|lint\w*|"
    r"code|codebase|function|functions|file|files|bug|bugs|error|errors|exception|stack ?trace|"
    r"tests?|flaky|branch|commit\w*|pr|api|config\w*|flag|flags|script|module|package|class|method|"
    r"query|schema|endpoint|repo\w*|parser|timeout|build|ci|pipeline|dependency|dependencies)\b"
)


@attrs.frozen
class QueryPlan:
    """What :func:`parse` read in a query, once: the later stages of a search (the lists,
    the boosts, grouping, the result text) consume this and never read the query again."""

    #: The query with the session reference and the anchor taken out: what to search for.
    text: str
    #: A quoted phrase that may name a session (its first prompt or its plan's title).
    session_quote: str | None = None
    #: Event tags the query asks about, most specific first.
    events: tuple[str, ...] = ()
    #: ``first`` or ``last``: which end of the matching events in time; ``most``: the
    #: events on what they acted on most often.
    order: str | None = None
    #: A quoted phrase marking a point in time, and whether the answer is ``after`` or
    #: ``before`` it.
    anchor: str | None = None
    anchor_side: str | None = None
    #: The query asks about the user's own doings or things ("which airline did I fly"),
    #: or what the user said ("what did I tell you"), and not about what the assistant
    #: said or did: see :func:`about_user`.
    about_user: bool = False
    #: The informative terms of :attr:`text` (:func:`~lore_core.recall.cascade.query_terms`).
    terms: tuple[str, ...] = ()
    #: How much of the query its readings explain: the share of :attr:`terms` inside the
    #: phrases that named the events (1 when the order, anchor or session reference took
    #: every word). "which test failed first?" is all event; "why did the wingman state
    #: test fail on the first run?" names a test failure in passing, as the subject of a
    #: question about something else. The engine's boosts scale by it.
    reading_share: float = 1.0

    @property
    def plain(self) -> bool:
        return not (self.session_quote or self.events or self.order or self.anchor or self.about_user)


def about_user(text: str) -> bool:
    """Whether a query asks about the user: what the user said ("what did I tell you when
    ...", "how did I describe ..."), or, in the first person singular, the user's own life
    or doings ("which airline did I fly") and not a session's work ("how did I fix the
    flaky test": the model calling recall may say "I" of itself) nor something the
    assistant said ("you mentioned", "remind me"). Then the evidence is what the user
    said (in passing, often: "by the way, I take Zumba on Tuesdays"), and the assistant's
    replies about it mostly restate or riff on it. Coding questions are mostly in the first
    person plural ("which test did we break")."""
    lowered = text.lower().replace("\u2019", "'")
    if _ASSISTANT_SAID.search(lowered) or not _FIRST_PERSON.search(lowered):
        return False
    return bool(_USER_WORDS.search(lowered)) or not _WORK_WORDS.search(lowered)


def _drop(text: str, span: tuple[int, int]) -> str:
    return text[: span[0]] + " " + text[span[1] :]


def parse(query: str) -> QueryPlan:
    """Read a session reference, events, order, anchor and whether it asks about the user
    out of ``query``. What is left to search for (:attr:`QueryPlan.text`) has the reference
    ("in the session that started with "..."), the anchor's phrase and the words of order
    taken out."""
    text = query
    session_quote = None
    quoted = _DOUBLE_QUOTED.search(text)
    if quoted is not None:
        session_quote = quoted.group(1).strip().rstrip(".…").strip()
        start = quoted.start()
        clause = _SESSION_CLAUSE.search(text[:start])
        text = _drop(text, (clause.start() if clause else start, quoted.end()))
    anchor = side = None
    found = _ANCHOR.search(text)
    if found is not None:
        side, anchor = found.group(1).lower(), found.group(2).strip()
        text = _drop(text, (found.start(2) - 1, found.end(2) + 1))
    lowered = " ".join(text.lower().split())
    events: list[str] = []
    said: list[str] = []  # the phrases that named the events
    code = _EXIT_CODE.search(lowered)
    if code:
        events.append(f"{T.EXIT_CODE}{code.group(1)}")
        said.append(code.group(0))
    for pattern, tags in EVENT_PATTERNS:
        phrases = [m.group(0) for m in pattern.finditer(lowered)]
        if phrases:
            events.extend(t for t in tags if t not in events)
            said.extend(phrases)
    order = None
    first, last = _FIRST_WORDS.search(lowered), _LAST_WORDS.search(lowered)
    if _MOST_WORDS.search(lowered):
        order = MOST
    elif first and not last:
        order = FIRST
    elif last and not first:
        order = LAST
    elif first and last:
        order = FIRST if first.start() < last.start() else LAST
    if order in (FIRST, LAST):
        text = _ORDER_WORDS.sub(" ", text)
    text = " ".join(text.split())
    terms = tuple(query_terms(text))
    named = query_terms(" ".join(said))
    explained = [t for t in terms if any(t.startswith(w) or w.startswith(t) for w in named)]
    return QueryPlan(
        text=text,
        terms=terms,
        reading_share=len(explained) / len(terms) if terms else 1.0,
        session_quote=session_quote,
        events=tuple(events),
        order=order,
        anchor=anchor,
        anchor_side=side,
        # A question about coding events ("which file did I edit") is not: the model calling
        # recall may say "I" of itself, and what the assistant did is the answer there.
        about_user=about_user(text) and not events,
    )


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def title_match(quote: str, title: str) -> float:
    """How well a quoted phrase matches a session's title, 0-1: the share of the quote's
    words found in order in the title (quotes are usually the title's start, cut with
    ``...``; punctuation and quote styles are ignored)."""
    q, t = words(quote), words(title)
    if not q or not t:
        return 0.0
    at = found = 0
    for word in q:
        try:
            at = t.index(word, at) + 1
            found += 1
        except ValueError:
            continue
    return found / len(q)
