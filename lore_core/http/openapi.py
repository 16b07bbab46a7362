"""The OpenAPI 3.1 document the gateway serves at ``/openapi.json``, and the validator that
holds the memory API's requests to it.

The document is the contract: ``POST /v1/events`` and ``POST /v1/pack`` bodies are checked
against their schemas here before any route code runs (a 400 names the field), and
``tests/test_openapi.py`` drives every operation with schema-generated requests and checks
each response against the document. The local API (``/lore/api``) is described too: its
parameters, and the shape of its answers (objects and lists whose fields are documented in
the prose docs; errors are always ``{"error": "..."}``).

The validator covers the JSON Schema subset the document uses (``type``, ``properties``,
``required``, ``additionalProperties``, ``items``, ``minItems``/``maxItems``,
``minLength``/``maxLength``, ``minimum``/``maximum``, ``enum``, ``pattern``, ``$ref``): the
kernel carries no JSON Schema library for four bodies.
"""

from __future__ import annotations

import re
from typing import Any

from lore_core import __version__
from lore_core.storage.events import MAX_BATCH, MAX_EVENT_CHARS, MAX_KEY_CHARS

RUN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$"
KIND_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$"
MAX_QUERY_CHARS = 4_000
MAX_TOKEN_BUDGET = 1_000_000

_ERROR = {"$ref": "#/components/schemas/Error"}
_OBJECT: dict[str, Any] = {"type": "object"}
_LIST: dict[str, Any] = {"type": "array", "items": {"type": "object"}}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    reasons = {
        400: "a bad request: the message names the field",
        401: "the gateway token is missing or wrong",
        404: "no such item",
        409: "the request conflicts with the memory's state (the message says why)",
        501: "the store does not keep what this needs",
        503: "the store (or the worker) failed: try again",
    }
    return {str(code): _json(_ERROR, reasons[code]) for code in (401, *codes)}


def _query(
    name: str, description: str, schema: dict[str, Any] | None = None, required: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema or {"type": "string"},
    }


def _path(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


_PROJECT = _query("project", "the project's absolute directory")
_SECURITY: list[dict[str, list[str]]] = [{"gatewayToken": []}]


def _op(
    summary: str,
    responses: dict[str, Any],
    *,
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    body_type: str = "application/json",
) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "security": _SECURITY, "responses": responses}
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": True, "content": {body_type: {"schema": body}}}
    return op


SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}},
    },
    "NewEvent": {
        "type": "object",
        "required": ["kind", "content"],
        "additionalProperties": False,
        "properties": {
            "kind": {
                "type": "string",
                "pattern": KIND_PATTERN,
                "description": "what the event is: note, decision, ...",
            },
            "content": {"type": "string", "maxLength": MAX_EVENT_CHARS},
            "working": {
                "type": "boolean",
                "description": "a live coordination fact: shown in the pack's working section",
            },
            "key": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_KEY_CHARS,
                "description": (
                    "a working fact's slot: a later one with the same key replaces it "
                    "(empty content clears it)"
                ),
            },
        },
    },
    "EventsRequest": {
        "type": "object",
        "required": ["run", "events"],
        "additionalProperties": False,
        "properties": {
            "project": {"type": "string", "description": "the project's absolute directory (default: none)"},
            "run": {"type": "string", "pattern": RUN_PATTERN},
            "events": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_BATCH,
                "items": {"$ref": "#/components/schemas/NewEvent"},
            },
        },
    },
    "EventsResponse": {
        "type": "object",
        "required": ["run", "project", "seqs", "last_seq"],
        "properties": {
            "run": {"type": "string"},
            "project": {"type": "string"},
            "seqs": {"type": "array", "items": {"type": "integer", "minimum": 1}},
            "last_seq": {"type": "integer", "minimum": 1},
        },
    },
    "PackRequest": {
        "type": "object",
        "required": ["run", "query"],
        "additionalProperties": False,
        "properties": {
            "project": {"type": "string", "description": "the project's absolute directory (default: none)"},
            "run": {"type": "string", "pattern": RUN_PATTERN},
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
            "min_seq": {
                "type": "integer",
                "minimum": 0,
                "description": "read-your-writes: every event up to it is in the pack, distilled or raw",
            },
            "token_budget": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_TOKEN_BUDGET,
                "description": "caps the distilled section (whole memories dropped past it)",
            },
            "include_knowledge": {"type": "boolean", "description": "also the project's knowledge entries"},
        },
    },
    "WorkingFact": {
        "type": "object",
        "required": ["key", "content", "seq", "kind"],
        "properties": {
            "key": {"type": "string"},
            "content": {"type": "string"},
            "seq": {"type": "integer"},
            "kind": {"type": "string"},
        },
    },
    "PackEvent": {
        "type": "object",
        "required": ["seq", "kind", "content", "working", "key", "created_at"],
        "properties": {
            "seq": {"type": "integer", "minimum": 1},
            "kind": {"type": "string"},
            "content": {"type": "string"},
            "working": {"type": "boolean"},
            "key": {"type": ["string", "null"]},
            "created_at": {"type": "number"},
        },
    },
    "DistilledItem": {
        "type": "object",
        "required": ["id", "text", "score", "tokens", "first_seq", "last_seq"],
        "properties": {
            "id": {"type": "string", "description": "d:<id> (a run memory) or k:<id> (knowledge)"},
            "text": {"type": "string"},
            "score": {"type": "number"},
            "tokens": {"type": "integer", "minimum": 0},
            "first_seq": {"type": ["integer", "null"]},
            "last_seq": {"type": ["integer", "null"]},
        },
    },
    "PackResponse": {
        "type": "object",
        "required": [
            "run",
            "project",
            "header",
            "sections",
            "text",
            "covered_seq",
            "last_seq",
            "freshness_lag_ms",
            "truncated",
        ],
        "properties": {
            "run": {"type": "string"},
            "project": {"type": "string"},
            "header": {"type": "string"},
            "sections": {
                "type": "array",
                "minItems": 3,
                "maxItems": 3,
                "description": "working, distilled, raw_tail: always in this order",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "enum": ["working", "distilled", "raw_tail"]},
                        "source": {"type": "string", "enum": ["live", "durable", "unavailable"]},
                        "as_of_seq": {"type": ["integer", "null"]},
                        "facts": {"type": "array", "items": {"$ref": "#/components/schemas/WorkingFact"}},
                        "items": {"type": "array", "items": {"$ref": "#/components/schemas/DistilledItem"}},
                        "tokens": {"type": "integer"},
                        "label": {"type": "string"},
                        "events": {"type": "array", "items": {"$ref": "#/components/schemas/PackEvent"}},
                    },
                },
            },
            "text": {"type": "string", "description": "the envelope, rendered for a model"},
            "covered_seq": {"type": "integer", "minimum": 0},
            "last_seq": {"type": "integer", "minimum": 0},
            "freshness_lag_ms": {"type": "integer", "minimum": 0},
            "truncated": {"type": "boolean"},
            "degraded": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string"},
                "description": "retrieval legs that missed the partial timeout; absent when all finished",
            },
        },
    },
}


def document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document (built fresh: callers may not mutate a shared one)."""
    knowledge_id = _path("logical_id", "k:<id> or the bare id")
    paths: dict[str, Any] = {
        "/v1/events": {
            "post": _op(
                "append events to a run (durable before the answer; never waits for consolidation)",
                {"200": _json({"$ref": "#/components/schemas/EventsResponse"}), **_errors(400, 503)},
                body={"$ref": "#/components/schemas/EventsRequest"},
            )
        },
        "/v1/pack": {
            "post": _op(
                "a sectioned, budget-fit slice of a run's memory (read-your-writes with min_seq)",
                {"200": _json({"$ref": "#/components/schemas/PackResponse"}), **_errors(400, 503)},
                body={"$ref": "#/components/schemas/PackRequest"},
            )
        },
        "/lore/api/status": {
            "get": _op("gateway health and store counts", {"200": _json(_OBJECT), **_errors()})
        },
        "/lore/api/metrics": {
            "get": _op(
                "the gateway's counters in the Prometheus text format 0.0.4 (docs/observability.md)",
                {
                    "200": {
                        "description": "OK",
                        "content": {
                            "text/plain; version=0.0.4; charset=utf-8": {"schema": {"type": "string"}}
                        },
                    },
                    **_errors(),
                },
            )
        },
        "/lore/api/spend": {
            "get": _op(
                "spend of the last days by day, model and session (lore spend)",
                {"200": _json(_OBJECT), **_errors(503)},
                params=[_query("days", "local days up to today, today included (default 7)")],
            )
        },
        "/lore/api/sessions": {
            "get": _op(
                "stored sessions, newest first, each with its message and branch counts",
                {"200": _json(_LIST), **_errors(400)},
                params=[
                    _PROJECT,
                    _query("limit", "at most this many", {"type": "string"}),
                    _query(
                        "before",
                        "<updated_at>~<session id>: the sessions after this row, the last one of "
                        "the previous page (a keyset page)",
                    ),
                    _query("since", "updated at or after this time, in seconds since the epoch"),
                    _query("harness", "only this harness's sessions (claude, codex, opencode...)"),
                    _query("model", "only sessions whose latest model is this one"),
                    _query("q", "text in the title, id, model or project (any case)"),
                ],
            )
        },
        "/lore/api/projects": {
            "get": _op(
                "every project, most recently active first: sessions, messages, current knowledge "
                "entries, spend of its sessions (all time) and last activity",
                {
                    "200": _json(
                        {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": [
                                    "project",
                                    "sessions",
                                    "messages",
                                    "knowledge",
                                    "spend_usd",
                                    "last_activity",
                                ],
                                "properties": {
                                    "project": {
                                        "type": "string",
                                        "description": "its directory ('' for sessions filed under none)",
                                    },
                                    "sessions": {"type": "integer", "minimum": 0},
                                    "messages": {"type": "integer", "minimum": 0},
                                    "knowledge": {"type": "integer", "minimum": 0},
                                    "spend_usd": {"type": "number"},
                                    "last_activity": {
                                        "type": "number",
                                        "description": "seconds since the epoch (0: none)",
                                    },
                                },
                            },
                        }
                    ),
                    **_errors(501),
                },
            )
        },
        "/lore/api/runs": {
            "get": _op(
                "the event log's runs, most recently updated first: last_seq, covered_seq (what "
                "is distilled), behind (events past it) and lag_ms (how long the oldest of them "
                "has waited)",
                {"200": _json(_LIST), **_errors(501)},
                params=[_PROJECT, _query("limit", "at most this many (default 50)")],
            )
        },
        "/lore/api/runs/events": {
            "get": _op(
                "one run's state and its newest events, newest first (distilled: covered by covered_seq)",
                {"200": _json(_OBJECT), **_errors(400, 404, 501)},
                params=[
                    _PROJECT,
                    _query("run", "the run's name", required=True),
                    _query("before", "a seq: the events before it (the next page)"),
                    _query("limit", "at most this many (default 50)"),
                ],
            )
        },
        "/lore/api/sessions/{session_id}": {
            "get": _op(
                "one session's conversation",
                {"200": _json(_OBJECT), **_errors(404)},
                params=[_path("session_id", "the session id"), _query("branches", "all: every branch")],
            ),
            "delete": _op(
                "forget the session: its messages and everything derived from them leave the store "
                "and its files, and a client resending its history does not bring it back "
                "(lore forget); answers what was removed and what it cost",
                {"200": _json(_OBJECT), **_errors(404, 503)},
                params=[_path("session_id", "the session id")],
            ),
        },
        "/lore/api/search": {
            "get": _op(
                "full-text search over stored messages",
                {"200": _json(_LIST), **_errors(400)},
                params=[
                    _query("q", "the query"),
                    _query("session", "a session id"),
                    _PROJECT,
                    _query("limit", ""),
                ],
            )
        },
        "/lore/api/recall": {
            "get": _op(
                "hybrid recall (the model's recall tool)",
                {"200": _json(_OBJECT), **_errors(400)},
                params=[
                    _query("q", "the query or a result id"),
                    _query("scope", "session, project, knowledge, all"),
                    _query("session", "a session id"),
                    _PROJECT,
                    _query("limit", ""),
                ],
            )
        },
        "/lore/api/distillations": {
            "get": _op(
                "observation logs and meta-distillations",
                {"200": _json(_LIST), **_errors()},
                params=[_query("session", "a session id"), _query("archived", "0: without archived ones")],
            )
        },
        "/lore/api/distillations/{distillation_id}": {
            "get": _op(
                "one distillation",
                {"200": _json(_OBJECT), **_errors(404)},
                params=[_path("distillation_id", "d:<id> or the bare id")],
            )
        },
        "/lore/api/distill": {
            "post": _op(
                "distil sessions now (what the scheduler runs on idle)",
                {"200": _json(_OBJECT), **_errors(404, 503)},
                params=[_query("session", "a session id (default: every session)")],
            )
        },
        "/lore/api/knowledge": {
            "get": _op(
                "current knowledge entries (deleted=1: the deleted ones, most recently deleted first)",
                {"200": _json(_LIST), **_errors()},
                params=[
                    _PROJECT,
                    _query("global", "0: without global entries"),
                    _query("deleted", "1: the deleted entries (their death certificates), to restore"),
                ],
            ),
            "post": _op(
                "add an entry (the book's rules apply; an entry with the same title is edited)",
                {"200": _json(_OBJECT), "201": _json(_OBJECT, "created"), **_errors(400, 409)},
                body={"type": "object"},
            ),
        },
        "/lore/api/knowledge/{logical_id}": {
            # 400 too: an id such as "file" or "pending" reaches that route (of the same path).
            "get": _op(
                "one entry with its versions",
                {"200": _json(_OBJECT), **_errors(400, 404, 409)},
                params=[knowledge_id],
            ),
            "patch": _op(
                "append a version",
                {"200": _json(_OBJECT), **_errors(400, 404, 409)},
                params=[knowledge_id],
                body={"type": "object"},
            ),
            "delete": _op(
                "append a death certificate",
                {"200": _json(_OBJECT), **_errors(404, 409)},
                params=[knowledge_id],
            ),
        },
        "/lore/api/knowledge/{logical_id}/adopt": {
            "post": _op(
                "the user approves an entry as it stands: a curator's or an import's preference "
                "becomes one the model is told to follow",
                {"200": _json(_OBJECT), **_errors(404, 409)},
                params=[knowledge_id],
            )
        },
        "/lore/api/knowledge/{logical_id}/restore": {
            "post": _op(
                "bring a deleted entry back: a new version with its fields before the deletion, "
                "every version kept (409: an alive entry has its title now)",
                {"200": _json(_OBJECT), **_errors(404, 409)},
                params=[knowledge_id],
            )
        },
        "/lore/api/knowledge/file": {
            "get": _op(
                "the export of a project (.lore.md or JSON text)",
                {"200": _json(_OBJECT), **_errors(400)},
                params=[
                    _PROJECT,
                    _query("sensitive", "1: sensitive entries too"),
                    _query("format", "lore-md or json"),
                ],
            )
        },
        "/lore/api/knowledge/import": {
            "post": _op(
                "import a file's text through one of the import lanes",
                {"200": _json(_OBJECT), **_errors(400)},
                params=[
                    _PROJECT,
                    _query("path", "the file's name"),
                    _query("format", "lore-md, mem0, json, agents"),
                    _query("allowGlobal", 'true: entries marked "scope": "global" stay global'),
                ],
                body={"type": "string"},
                body_type="text/plain",
            )
        },
        "/lore/api/knowledge/contradictions": {
            "get": _op(
                "judged pairs of entries",
                {"200": _json(_LIST), **_errors(400)},
                params=[_PROJECT, _query("status", "open, cleared, kept, resolved (comma-separated)")],
            )
        },
        "/lore/api/knowledge/contradictions/scan": {
            "post": _op(
                "judge a project's candidate pairs now",
                {"200": _json(_OBJECT), **_errors(400, 409, 503)},
                params=[_PROJECT],
            )
        },
        "/lore/api/knowledge/contradictions/resolve": {
            "post": _op(
                "keep one entry of a pair, or both",
                {"200": _json(_OBJECT), **_errors(400, 404)},
                body={"type": "object"},
            )
        },
        "/lore/api/knowledge/pending": {
            "get": _op(
                "a team-bound project's entries waiting for a decision",
                {"200": _json(_OBJECT), **_errors(400, 409)},
                params=[_PROJECT],
            )
        },
        "/lore/api/knowledge/decisions": {
            "post": _op(
                "approve or reject an entry's current text",
                {"200": _json(_OBJECT), **_errors(400, 404, 409)},
                body={"type": "object"},
            )
        },
        "/lore/api/entities": {
            "get": _op(
                "alive entities (people, services, tools, repositories, files)",
                {"200": _json(_LIST), **_errors(400)},
                params=[
                    _PROJECT,
                    _query("global", "0: without global ones"),
                    _query("merged", "1: with redirects"),
                ],
            )
        },
        "/lore/api/entities/show": {
            "get": _op(
                "one entity by e:<id> or name",
                {"200": _json(_OBJECT), **_errors(400, 404)},
                params=[_query("ref", "e:<id> or a name"), _PROJECT],
            )
        },
        "/lore/api/entities/{action}": {
            "post": _op(
                "a person's edit: add, alias, relate, merge, edit (rename, kind) or delete",
                {"200": _json(_OBJECT), "201": _json(_OBJECT, "created"), **_errors(400, 404, 409)},
                params=[_path("action", "add, alias, relate, merge, edit or delete")],
                body={"type": "object"},
            )
        },
        "/lore/api/import/history": {
            "post": _op(
                "import a coding client's own session history while the gateway holds the store "
                "(lore import --from): starts a job; one at a time",
                {"202": _json(_OBJECT, "started: the job, its state and report"), **_errors(400, 409)},
                body={
                    "type": "object",
                    "required": ["from"],
                    "properties": {
                        "from": {"type": "string", "description": "claude-code, codex, opencode"},
                        "path": {"type": "string", "description": "an absolute path (default: the client's)"},
                        "since": {"type": "string", "description": "a date, time or age (30d, 12h)"},
                        "project": {"type": "string", "description": "only this project's sessions"},
                    },
                },
            )
        },
        "/lore/api/import/history/{job_id}": {
            "get": _op(
                "a history import's state (running, done, failed, cancelled) and report so far",
                {"200": _json(_OBJECT), **_errors(404)},
                params=[_path("job_id", "the job id POST answered")],
            ),
            "delete": _op(
                "stop a history import after the write under way (a later import goes on from there)",
                {"200": _json(_OBJECT), **_errors(404)},
                params=[_path("job_id", "the job id POST answered")],
            ),
        },
        "/lore/api/team": {
            "get": _op(
                "a project's team binding", {"200": _json(_OBJECT), **_errors(400)}, params=[_PROJECT]
            ),
            "post": _op(
                "bind, unbind, or set the policy",
                {"200": _json(_OBJECT), **_errors(400, 409)},
                body={"type": "object"},
            ),
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Lore gateway: memory API and local API",
            "version": __version__,
            "description": (
                "The event log and packs (docs/events.md) and the local API the lore CLI uses. "
                "Every operation needs the gateway token (lore token) as a bearer token."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"gatewayToken": {"type": "http", "scheme": "bearer"}},
        },
    }


# ---------------------------------------------------------------------------------------------
# Validation of request bodies
# ---------------------------------------------------------------------------------------------

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "null": (type(None),),
}
_PATTERNS: dict[str, re.Pattern[str]] = {}


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    return SCHEMAS[ref.rsplit("/", 1)[-1]]


def _is(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[name])


def validate(value: Any, schema_name: str) -> str | None:
    """Why ``value`` does not match the named schema (``field: reason``), or ``None``."""
    return _check(value, SCHEMAS[schema_name], "body")


def _check(value: Any, schema: dict[str, Any], where: str) -> str | None:
    schema = _resolve(schema)
    wanted = schema.get("type")
    if wanted is not None:
        names = wanted if isinstance(wanted, list) else [wanted]
        if not any(_is(value, n) for n in names):
            return f"{where} must be {' or '.join(names)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {', '.join(map(str, schema['enum']))}"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return f"{where} must have at least {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{where} must have at most {schema['maxLength']} characters"
        pattern = schema.get("pattern")
        if pattern is not None:
            compiled = _PATTERNS.setdefault(pattern, re.compile(pattern))
            if not compiled.search(value):
                return f"{where} does not match {pattern}"
    if _is(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{where} must be at least {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{where} must be at most {schema['maximum']}"
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return f"{where} must have at least {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{where} must have at most {schema['maxItems']} items"
        items = schema.get("items")
        if items is not None:
            for i, item in enumerate(value):
                problem = _check(item, items, f"{where}[{i}]")
                if problem:
                    return problem
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                return f"{where}.{name} is required"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(properties))
            if extra:
                return f"{where}.{extra[0]} is not a known field (fields: {', '.join(properties)})"
        for name, sub in properties.items():
            if name in value:
                problem = _check(value[name], sub, f"{where}.{name}")
                if problem:
                    return problem
    return None
