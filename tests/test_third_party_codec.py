"""A wire API the kernel does not know, added by a plugin through ``lore_register_codecs``
(``tests/tiny_chat.py``), gets everything the built-in APIs get: streamed and buffered
proxying, storage, composition, the recall tool's round trip and usage scaling. A provider
the kernel does not know, declared through ``lore_register_providers``, gets its upstream
from ``upstream.<name>`` or ``LORE_UPSTREAM_<NAME>``, and a 502 in its codec's shape without
one."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from lore_core.testing.net import api_headers
from lore_core.testing.poll import poll
from tests.tiny_chat import API, TinyChatPlugin, TinyGeminiPlugin, UndeclaredProviderPlugin

MODEL = "claude-sonnet-4-5"  # a 200K context: usage past 100K is reported scaled (share 0.5)
CLIENT_TOOL = {"name": "shell", "description": "run a command", "schema": {"type": "object"}}


class TinyUpstream:
    """A loopback server speaking the tiny chat API: it calls ``recall`` when asked what
    was remembered, answers from the tool result when it has one, else says ``ok``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                upstream.requests.append(body)
                self._answer(body, upstream.answer(body))

            def _answer(self, body: dict[str, Any], message: dict[str, Any]) -> None:
                usage = {"input": 150_000, "output": 7}
                if body.get("stream"):
                    events = [{"text": message["content"]}] if message.get("content") else []
                    events += [{"call": call} for call in message.get("calls") or []]
                    events.append({"end": True, "usage": usage})
                    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
                    content_type = "text/event-stream"
                else:
                    data = json.dumps(
                        {"id": "t1", "model": MODEL, "message": message, "usage": usage}
                    ).encode()
                    content_type = "application/json"
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return {"role": "assistant", "content": f"From memory: {last['content'][:2000]}"}
        offers_recall = any(t.get("name") == "recall" for t in body.get("tools") or [])
        if offers_recall and "what port" in last.get("content", ""):
            call = {"id": "call_1", "name": "recall", "args": {"query": "deploy port"}}
            return {"role": "assistant", "content": "", "calls": [call]}
        return {"role": "assistant", "content": "ok"}


@pytest.fixture
def tiny() -> Iterator[TinyUpstream]:
    upstream = TinyUpstream()
    thread = threading.Thread(target=upstream.server.serve_forever, daemon=True)
    thread.start()
    yield upstream
    upstream.server.shutdown()


def _ask(url: str, messages: list[dict[str, Any]], stream: bool) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "tools": [CLIENT_TOOL], "stream": stream}
    return httpx.post(url + "/tiny/v1/chat", json=body, timeout=30)


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(part.removeprefix("data: ")) for part in response.text.split("\n\n") if part.strip()]


def test_a_plugin_codec_gets_proxying_storage_composition_recall_and_usage_scaling(start_gateway, tiny):
    server = start_gateway(env={"LORE_UPSTREAM_OPENAI": tiny.url}, extra_plugins=(TinyChatPlugin(),))
    history = [{"role": "user", "content": "Note this: the deploy port is 8377."}]

    # Buffered: proxied, the recall tool appended last (composition), usage scaled.
    answer = _ask(server.url, history, stream=False)
    assert answer.status_code == 200, answer.text
    assert answer.json()["message"]["content"] == "ok"
    assert answer.json()["usage"] == {"input": 100_000, "output": 7}
    sent = tiny.requests[-1]
    assert [t["name"] for t in sent["tools"]] == ["shell", "recall"]
    assert sent["messages"] == history

    # Streamed, plain: the text as the upstream sent it, the end event's usage scaled.
    history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and the host?"}]
    streamed = _ask(server.url, history, stream=True)
    assert streamed.status_code == 200
    events = _events(streamed)
    assert events[0] == {"text": "ok"}
    assert events[-1] == {"end": True, "usage": {"input": 100_000, "output": 7}}

    # Stored: both exchanges, under the session the generic harness found.
    def stored() -> list[Any]:
        found = httpx.get(
            server.url + "/lore/api/search", params={"q": "8377"}, headers=api_headers(), timeout=10
        )
        return found.json() if found.status_code == 200 else []

    poll(stored, "the tiny-chat exchange stored")

    # The recall tool's round trip, streamed: the model calls recall, the gateway searches and
    # continues upstream with the result, the client sees a marker and the continuation.
    history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "what port did we use?"}]
    recalled = _ask(server.url, history, stream=True)
    assert recalled.status_code == 200
    texts = [e["text"] for e in _events(recalled) if "text" in e]
    assert texts[0].startswith("Searching memory for")
    assert "8377" in "".join(texts[1:])
    follow_up = tiny.requests[-1]
    assert follow_up["messages"][-1]["role"] == "tool" and "8377" in follow_up["messages"][-1]["content"]
    assert follow_up["messages"][-2]["calls"][0]["name"] == "recall"
    assert _events(recalled)[-1]["usage"] == {"input": 100_000, "output": 14}

    # The recall round trip, buffered.
    again = _ask(server.url, history, stream=False)
    assert again.status_code == 200
    content = again.json()["message"]["content"]
    assert content.startswith("Searching memory for") and "8377" in content


class PingHandler:
    """A request handler from a plugin, through ``lore_register_request_handlers``."""

    from lore_core import hookimpl

    @hookimpl
    def lore_register_request_handlers(self, register: Any) -> None:
        from lore_core.interfaces import HandlerAnswer, LoreApp, RequestHandler, RequestInfo

        class Ping(RequestHandler):
            name, priority = "ping", 50

            async def answer(self, request: RequestInfo, app: LoreApp) -> HandlerAnswer | None:
                assert request.api == API and request.may_reach_memory
                last = request.view.messages[-1].text if request.view.messages else ""
                return HandlerAnswer("pong") if last.strip() == "ping" else None

        register(Ping())


def test_a_plugin_request_handler_answers_before_upstream(start_gateway, tiny):
    server = start_gateway(
        env={"LORE_UPSTREAM_OPENAI": tiny.url}, extra_plugins=(TinyChatPlugin(), PingHandler())
    )
    pong = _ask(server.url, [{"role": "user", "content": "ping"}], stream=False)
    assert pong.status_code == 200 and pong.json()["message"]["content"] == "pong"
    streamed = _ask(server.url, [{"role": "user", "content": "ping"}], stream=True)
    assert _events(streamed)[0] == {"text": "pong"}
    assert tiny.requests == []  # answered by the gateway: nothing went upstream
    assert (
        _ask(server.url, [{"role": "user", "content": "hello"}], stream=False).json()["message"]["content"]
        == "ok"
    )


# ---------------------------------------------------------------------------------------------
# A provider the kernel has never heard of
# ---------------------------------------------------------------------------------------------


def _ask_gemini(url: str, text: str, stream: bool = False, path: str = "/tiny/v1/gemini") -> httpx.Response:
    body = {"model": "gemini-x", "messages": [{"role": "user", "content": text}], "stream": stream}
    return httpx.post(url + path, json=body, timeout=30)


def test_a_plugin_provider_gets_its_upstream_from_its_variable(start_gateway, tiny):
    """``LORE_UPSTREAM_GEMINI`` for a provider only a plugin declares: proxied through real
    sockets to the loopback upstream, both ways, and stored."""
    server = start_gateway(env={"LORE_UPSTREAM_GEMINI": tiny.url}, extra_plugins=(TinyGeminiPlugin(),))
    answer = _ask_gemini(server.url, "Note this: the gemini port is 9411.")
    assert answer.status_code == 200, answer.text
    assert answer.json()["message"]["content"] == "ok"
    assert tiny.requests[-1]["messages"][-1]["content"] == "Note this: the gemini port is 9411."
    streamed = _ask_gemini(server.url, "and now streamed", stream=True)
    assert streamed.status_code == 200 and _events(streamed)[0] == {"text": "ok"}

    def stored() -> list[Any]:
        found = httpx.get(
            server.url + "/lore/api/search", params={"q": "9411"}, headers=api_headers(), timeout=10
        )
        return found.json() if found.status_code == 200 else []

    poll(stored, "the gemini exchange stored")
    health = httpx.get(server.url + "/health", timeout=10).json()
    assert health["upstreams"]["gemini"] == tiny.url


def test_a_plugin_provider_gets_its_upstream_from_the_configuration_file(start_gateway, tiny):
    server = start_gateway(config={"upstream": {"gemini": tiny.url}}, extra_plugins=(TinyGeminiPlugin(),))
    answer = _ask_gemini(server.url, "hello")
    assert answer.status_code == 200, answer.text
    assert len(tiny.requests) == 1


def test_a_provider_without_an_upstream_is_a_502_in_the_codecs_shape_never_a_500(start_gateway, tiny, caplog):
    """No upstream for the provider (declared without a default, or declared by nobody):
    the client gets a 502 in its API's error shape saying what to set, the log says it too,
    and nothing goes anywhere."""
    with caplog.at_level(logging.WARNING, logger="lore"):
        server = start_gateway(extra_plugins=(TinyGeminiPlugin(), UndeclaredProviderPlugin()))
        for stream in (False, True):
            refused = _ask_gemini(server.url, "hello", stream=stream)
            assert refused.status_code == 502, refused.text
            body = refused.json()
            assert body["status"] == 502  # TinyChatCodec.error_body's shape
            assert "upstream.gemini" in body["error"] and "LORE_UPSTREAM_GEMINI" in body["error"]
        nowhere = _ask_gemini(server.url, "hello", path="/tiny/v1/nowhere")
        assert nowhere.status_code == 502, nowhere.text
        assert "'nowhere'" in nowhere.json()["error"]
    assert tiny.requests == []
    logged = [r.getMessage() for r in caplog.records]
    assert any("LORE_UPSTREAM_GEMINI" in line and "502" in line for line in logged), logged
    assert any("tiny-nowhere" in line and "no upstream" in line for line in logged), logged  # at start-up
    # A model prefix names an upstream for it all the same.
    routed = start_gateway(
        config={"upstream": {"byModelPrefix": {"gemini-": tiny.url}}}, extra_plugins=(TinyGeminiPlugin(),)
    )
    assert _ask_gemini(routed.url, "hello").status_code == 200


def test_a_configured_upstream_for_a_provider_nobody_declares_is_refused_at_start(start_gateway, tiny):
    from lore_core.config import ConfigError

    with pytest.raises(ConfigError, match=r"upstream\.gemini: unknown key"):
        start_gateway(config={"upstream": {"gemini": tiny.url}})


def test_a_request_no_codec_owns_goes_to_the_provider_its_marks_name(start_gateway):
    """Passthrough (a models list, count_tokens) finds the provider from what the providers
    declare (request headers, path fragments), else the default one; a provider without an
    upstream gets a 502 in its codec's shape."""
    from lore_core.testing.fake_upstream import FakeUpstream

    with FakeUpstream() as anthropic, FakeUpstream() as openai, FakeUpstream() as gemini:
        env = {
            "LORE_UPSTREAM_ANTHROPIC": anthropic.url,
            "LORE_UPSTREAM_OPENAI": openai.url,
            "LORE_UPSTREAM_GEMINI": gemini.url,
        }
        server = start_gateway(env=env, extra_plugins=(TinyGeminiPlugin(),))
        cases = [
            ("GET", "/v1/models", {"x-api-key": "k", "anthropic-version": "2023-06-01"}, anthropic),
            ("POST", "/v1/messages/count_tokens", {"authorization": "Bearer k"}, anthropic),
            ("GET", "/v1/models", {"authorization": "Bearer k"}, openai),
            ("GET", "/v1/models", {"x-tiny-key": "k"}, gemini),
        ]
        for method, path, headers, expected in cases:
            before = len(expected.requests)
            answer = httpx.request(
                method, server.url + path, headers=headers, json={} if method == "POST" else None
            )
            assert answer.status_code == 200, (path, headers, answer.text)
            assert len(expected.requests) == before + 1, (path, headers)
        assert sum(len(u.requests) for u in (anthropic, openai, gemini)) == len(cases)

    bare = start_gateway(extra_plugins=(TinyGeminiPlugin(),))
    refused = httpx.get(bare.url + "/v1/models", headers={"x-tiny-key": "k"}, timeout=10)
    assert refused.status_code == 502
    assert refused.json()["status"] == 502 and "LORE_UPSTREAM_GEMINI" in refused.json()["error"]
