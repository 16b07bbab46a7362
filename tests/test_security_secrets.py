"""Secrets kept out of the store (security review F10, F14): events are masked when they are
written, not only when they are read; the masker knows the key shapes the review found in
clear (Groq, Hugging Face, GitLab, npm, passwords in URLs, Basic auth, Azure ``api-key``, AWS
secret keys, keys cut by a line break or a zero-width character); and every lane that
writes text (messages, events, distillations, knowledge entries, imports) masks or refuses
them. Ordinary prose and code stay as they were.

Real parts: a gateway on a real socket with the DuckDB store, the fake provider as the
session's upstream and as the worker; the store's file read directly after the gateway
stopped. Every key here is made up."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core.distill.prompts import OBSERVER_MARKER
from lore_core.storage.masking import mask_secrets
from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest, Reply
from lore_core.testing.fake_worker import fake_observation, request_texts
from lore_core.testing.net import api_headers
from lore_core.testing.poll import poll
from lore_core.testing.server import ThreadedServer

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("lore_store_duckdb")

PROJECT = "/work/shop"
ANTHROPIC_KEY = "sk-ant-api03-" + "Qw7Er9Ty2Ui4Op6As8Df" * 3
SESSION_HEADERS = {"x-api-key": "client-key", "anthropic-version": "2023-06-01"}

# (what the text says, the secret in it): one line per shape the review found in clear.
BASIC = base64.b64encode(b"deploy:S3cretBasicPw").decode()
SHAPES: dict[str, tuple[str, str]] = {
    "groq": ("GROQ_API_KEY=gsk_" + "Gq4Rt7Yu1Io3Pa5Sd8Fg" * 2 + "Hj2Kl6Zx9Cv1", "Gq4Rt7Yu1Io3Pa5Sd8Fg"),
    "hugging face": ("login with hf_PLACEHOLDERNOTAREALTOKEN00 please", "PLACEHOLDERNOTAREALTOKEN00"),
    "gitlab": ("git clone with glpat-Xy3Zq8Wv5Ut2Sr7Pq4No", "Xy3Zq8Wv5Ut2Sr7Pq4No"),
    "npm": (
        "//registry.npmjs.org/:_authToken=npm_Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2",
        "Ab1Cd2Ef3Gh4Ij5Kl6",
    ),
    "postgres": ("DATABASE_URL=postgres://app:Hunter2Secret@db.internal:5432/shop", "Hunter2Secret"),
    "mysql": ("mysql://root:My5qlPassw0rd@127.0.0.1/app", "My5qlPassw0rd"),
    "mongodb+srv": ("mongodb+srv://admin:M0ngoPa55word@cluster0.example.net/test", "M0ngoPa55word"),
    "redis": ("REDIS_URL=redis://:R3disSecretPw@cache:6379/0", "R3disSecretPw"),
    "amqp": ("amqp://guest:Rabb1tSecret@mq:5672/", "Rabb1tSecret"),
    "basic header": (f"curl -H 'Authorization: Basic {BASIC}' https://ci.example.com", BASIC),
    "url password": (
        "git remote add origin https://deploy:HttpS3cretPw@git.example.com/repo.git",
        "HttpS3cretPw",
    ),
    "azure header": (
        "curl -H 'api-key: 0f1e2d3c4b5a69788796a5b4c3d2e1f0' $AZURE_ENDPOINT",
        "0f1e2d3c4b5a6978",
    ),
    "azure assignment": ('AZURE_OPENAI_API_KEY="9f8e7d6c5b4a39281706f5e4d3c2b1a0"', "9f8e7d6c5b4a3928"),
    "aws secret": (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG",
    ),
    "aws secret env": (
        "AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "bPxRfiCYEXAMPLEKEY",
    ),
    "key cut after its prefix": ("key:\nsk-ant-\n" + ANTHROPIC_KEY[7:] + "\n", ANTHROPIC_KEY[13:40]),
    "key cut in the middle": (
        f"key: {ANTHROPIC_KEY[:30]}\n{ANTHROPIC_KEY[30:]}\nthen run it",
        ANTHROPIC_KEY[30:],
    ),
    "zero-width space": (f"key {ANTHROPIC_KEY[:20]}\u200b{ANTHROPIC_KEY[20:]}", ANTHROPIC_KEY[20:]),
    "zero-width joiner": ("ghp_Aa1Bb2Cc3Dd4Ee5F\u200df6Gg7Hh8Ii9Jj0Kk1Ll", "f6Gg7Hh8Ii9Jj0Kk1Ll"),
    "word joiner": ("hf_Zq8Wv5Ut2\u2060Sr7Pq4NoXy3Mk6Lj", "Sr7Pq4NoXy3Mk6Lj"),
    "byte order mark": ("gsk_Gq4Rt7Yu1Io3\ufeffPa5Sd8FgHj2Kl6Zx9Cv1Bn", "Pa5Sd8FgHj2Kl6Zx9Cv1Bn"),
    "zero-width non-joiner": ("glpat-Xy3Zq8Wv5U\u200ct2Sr7Pq4NoMm", "t2Sr7Pq4NoMm"),
}

# Prose and code that name the same things without a secret: stored exactly as written.
ORDINARY = [
    "The hf_ prefix marks Hugging Face tokens; hf_hub_download fetches a file.",
    "Connect with postgres://localhost/db or postgres://app@db.internal:5432/shop (no password).",
    "Read the password from $PGPASSWORD: postgres://app:$PGPASSWORD@db/shop works too.",
    "Write it as postgres://user:password@host/db, mysql://user:<password>@host/db.",
    "A basic understanding of npm_config_registry and npm_package_version helps.",
    "Set api_key = load_api_key_from_vault() and never print the api-key header.",
    "Authorization: Basic auth is weaker than a token; see https://example.com:8443/docs@v2.",
    "task-management and disk-usage reports; gsk_ alone is not a key, nor glpat- alone.",
    "aws_secret_access_key = ${AWS_SECRET}  # read from the environment",
    "def f(x):\n    return x\nvalue\nanother_line\n",
    "Emoji with joiners stay: \U0001f468\u200d\U0001f469\u200d\U0001f467,"
    " and \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645.",
]


def _db_file(tmp_path: Path) -> Path:
    return next((tmp_path / "home").rglob("*.duckdb"))


def _file_leaks(tmp_path: Path, secrets: dict[str, str]) -> list[str]:
    """Which ``secrets`` appear in any file the gateway wrote."""
    leaked = []
    for path in (tmp_path / "home").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            leaked += [f"{path.name}: {name}" for name, value in secrets.items() if value.encode() in data]
    return leaked


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_masker_knows_the_shapes_found_in_clear(name: str) -> None:
    """F14: each shape the review found in clear is masked, and only the secret part goes."""
    text, secret = SHAPES[name]
    masked = mask_secrets(text)
    assert secret not in masked
    assert "[REDACTED:" in masked


def test_url_passwords_are_masked_alone() -> None:
    """F14: of a URL, only the password is masked; the user, host and database stay."""
    masked = mask_secrets("postgres://app:Hunter2Secret@db.internal:5432/shop")
    assert masked.startswith("postgres://app:[REDACTED:")
    assert masked.endswith("]@db.internal:5432/shop")
    header = mask_secrets(f"Authorization: Basic {BASIC}")
    assert header.startswith("Authorization: Basic [REDACTED:")


def test_a_line_after_a_key_is_joined_only_when_it_is_the_rest_of_it() -> None:
    """F14: a key cut by a line break is masked whole, the break with it; a word on its own
    line after a whole key ("Done") is not taken for the rest of it."""
    cut = f"{ANTHROPIC_KEY[:30]}\n{ANTHROPIC_KEY[30:]}\nDone\n"
    assert mask_secrets(cut) == "[REDACTED:anthropic-key]\nDone\n"
    whole = f"token: {ANTHROPIC_KEY}\nDone\nok\n"
    assert mask_secrets(whole) == "token: [REDACTED:anthropic-key]\nDone\nok\n"


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text: str) -> None:
    """F14: prose and code that name the shapes without a secret are not changed."""
    assert mask_secrets(text) == text


def test_a_model_request_stores_every_shape_masked(
    start_gateway: Any, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """F14: the review's repro for every shape: a model request whose content holds it, then
    the stored message (local API, and the store's files) shows ``[REDACTED:...]`` instead;
    the ordinary texts of the same request are stored as sent."""
    server: ThreadedServer = start_gateway()
    texts = [text for text, _ in SHAPES.values()] + ORDINARY
    history: list[dict[str, Any]] = []
    for text in texts:
        history += [{"role": "user", "content": text}, {"role": "assistant", "content": "noted"}]
    history.append({"role": "user", "content": "That is all."})
    body = {"model": "claude-test", "max_tokens": 10, "messages": history}
    reply = httpx.post(
        server.url + "/v1/messages",
        json=body,
        headers={**SESSION_HEADERS, "x-lore-session": "s14", "x-lore-project": PROJECT},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    assert fake_upstream.api_requests()[-1].json["messages"][0]["content"] == texts[0]  # the client's own

    server.call(server.gateway.writer.wait_idle())
    stored = httpx.get(server.url + "/lore/api/sessions/s14", headers=api_headers(), timeout=30).json()
    block_texts = [b.get("text", "") for m in stored["messages"] for b in m["blocks"]]
    searchable = "\n".join(m["text"] for m in stored["messages"])
    for name, (_text, secret) in SHAPES.items():
        assert not any(secret in t for t in block_texts), name
        assert secret not in searchable, name
    assert sum("[REDACTED:" in t for t in block_texts) == len(SHAPES)
    for text in ORDINARY:
        assert text in block_texts, text

    server.stop()
    assert _file_leaks(tmp_path, {name: secret for name, (_, secret) in SHAPES.items()}) == []


def test_a_key_cut_by_a_line_break_in_a_first_message_is_masked_in_the_title(
    start_gateway: Any, fake_upstream: FakeUpstream
) -> None:
    """F14: the session's title (its first prompt, on one line) is masked before its line
    breaks are folded: a key cut by one was stored whole in the title (found by
    benchmarks/hostile_local.py)."""
    server: ThreadedServer = start_gateway()
    first = f"use this key:\n{ANTHROPIC_KEY[:30]}\n{ANTHROPIC_KEY[30:]}\nthen run it"
    body = {"model": "claude-test", "max_tokens": 10, "messages": [{"role": "user", "content": first}]}
    headers = {**SESSION_HEADERS, "x-lore-session": "s-title", "x-lore-project": PROJECT}
    assert httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30).status_code == 200
    server.call(server.gateway.writer.wait_idle())
    sessions = httpx.get(server.url + "/lore/api/sessions", headers=api_headers(), timeout=30).json()
    title = next(s["title"] for s in sessions if s["id"] == "s-title")
    assert ANTHROPIC_KEY[30:] not in title and ANTHROPIC_KEY[:30] not in title
    assert title.startswith("use this key: [REDACTED:anthropic-key]")


def test_events_are_masked_when_written(start_gateway: Any, tmp_path: Path) -> None:
    """F10: ``/v1/events`` stores the masked form, not the key: the ``events`` table read from
    the store's file after the gateway stopped has ``[REDACTED:...]`` and no key, for a
    plain event and for a working fact."""
    server: ThreadedServer = start_gateway()
    events = [
        {"kind": "note", "content": f"deploy with {ANTHROPIC_KEY}"},
        {"kind": "note", "content": SHAPES["postgres"][0]},
        {"kind": "state", "content": f"token {ANTHROPIC_KEY}", "working": True, "key": "deploy-token"},
    ]
    answer = httpx.post(
        server.url + "/v1/events",
        json={"project": PROJECT, "run": "r10", "events": events},
        headers=api_headers(),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    pack = httpx.post(
        server.url + "/v1/pack",
        json={"project": PROJECT, "run": "r10", "query": "deploy"},
        headers=api_headers(),
        timeout=30,
    )
    assert pack.status_code == 200 and ANTHROPIC_KEY not in pack.text
    server.stop()

    with duckdb.connect(str(_db_file(tmp_path)), read_only=True) as con:
        found = con.execute("SELECT content FROM events WHERE run = 'r10' ORDER BY seq").fetchall()
    rows = [r[0] for r in found]
    assert len(rows) == 3
    assert all("[REDACTED:" in r for r in rows), rows
    assert not any(ANTHROPIC_KEY in r or "Hunter2Secret" in r for r in rows), rows
    assert _file_leaks(tmp_path, {"key": ANTHROPIC_KEY, "password": "Hunter2Secret"}) == []


def test_distillations_are_masked_when_written(
    start_gateway: Any, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """F10 (every lane): a worker whose observation log names a key (its input was masked,
    its answer is not ours to trust) has the key masked before the distillation is stored."""

    def observer(req: RecordedRequest) -> Reply | None:
        system, user = request_texts(req.json)
        if OBSERVER_MARKER in system:
            text = fake_observation(user) + f"\n- 10:00 the worker recalled {ANTHROPIC_KEY}"
            return Reply(text=text, input_tokens=10, output_tokens=10)
        return None

    fake_upstream.responder = observer
    server: ThreadedServer = start_gateway(
        config={
            "worker": {"upstream": fake_upstream.url, "apiKey": "worker-key", "model": "claude-test"},
            "distill": {"idleTimeoutSeconds": 0.3, "firstSegmentMinMessages": 3, "firstSegmentMinTokens": 8},
        }
    )
    history: list[dict[str, Any]] = []
    for i in range(4):
        history += [
            {"role": "user", "content": f"step {i}: edit src/app.py and run the tests again"},
            {"role": "assistant", "content": f"done with step {i}"},
        ]
    history.append({"role": "user", "content": "and the last step"})
    body = {"model": "claude-test", "max_tokens": 10, "messages": history}
    headers = {**SESSION_HEADERS, "x-lore-session": "d10", "x-lore-project": PROJECT}
    assert httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30).status_code == 200

    def distilled() -> list[dict[str, Any]]:
        rows = httpx.get(
            server.url + "/lore/api/distillations", params={"session": "d10"}, headers=api_headers()
        ).json()
        return rows if isinstance(rows, list) and rows else []

    rows = poll(distilled, "a distillation of the session")
    assert ANTHROPIC_KEY not in json.dumps(rows)
    assert "the worker recalled [REDACTED:" in json.dumps(rows)
    server.stop()
    assert _file_leaks(tmp_path, {"key": ANTHROPIC_KEY}) == []


def test_knowledge_and_imports_refuse_the_new_shapes(start_gateway: Any) -> None:
    """F14 (every lane): a knowledge entry posted through ``/lore/api`` and an imported one
    holding a shape the masker did not know are refused, not stored in clear."""
    server: ThreadedServer = start_gateway()
    entry = {"project": PROJECT, "category": "architecture", "title": "Groq", "content": SHAPES["groq"][0]}
    posted = httpx.post(server.url + "/lore/api/knowledge", json=entry, headers=api_headers(), timeout=30)
    assert posted.status_code == 409, posted.text
    assert "secret" in posted.json()["error"]
    rows = [{"title": "Shop database", "content": SHAPES["postgres"][0], "category": "architecture"}]
    imported = httpx.post(
        server.url + "/lore/api/knowledge/import",
        params={"project": PROJECT, "format": "json"},
        content=json.dumps(rows),
        headers=api_headers(),
        timeout=30,
    )
    assert imported.status_code == 200, imported.text
    assert imported.json()["created"] == [], imported.text
    assert "secret" in imported.json()["refused"][0]["reason"]
    listed = httpx.get(
        server.url + "/lore/api/knowledge", params={"project": PROJECT}, headers=api_headers(), timeout=30
    )
    assert "Gq4Rt7Yu1Io3Pa5Sd8Fg" not in listed.text and "Hunter2Secret" not in listed.text
