"""The prompt-layer example in docs/hooks.md, run as written: its text reaches each API's own
system place, and an Anthropic request keeps only user and assistant messages (a "system"
role there is refused by the real API)."""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.server import ThreadedServer

DOC = Path(__file__).resolve().parents[1] / "docs" / "hooks.md"


def documented_plugin() -> types.ModuleType:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    code = next(b for b in blocks if "class HouseRulesLayer" in b)
    module = types.ModuleType("house_rules_example")
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module


REQUESTS = {
    "anthropic": ("/v1/messages", {"model": "claude-test", "max_tokens": 5, "system": "Be brief.",
                                   "messages": [{"role": "user", "content": "hi"}]}),
    "chat": ("/v1/chat/completions", {"model": "gpt-test",
                                      "messages": [{"role": "user", "content": "hi"}]}),
}  # fmt: skip


@pytest.mark.parametrize("api", sorted(REQUESTS))
def test_the_documented_prompt_layer_puts_its_text_where_each_api_wants_it(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, api: str
) -> None:
    server = start_gateway(extra_plugins=(documented_plugin(),))
    path, body = REQUESTS[api]
    headers = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
    assert httpx.post(server.url + path, json=body, headers=headers, timeout=30).status_code == 200
    sent = fake_upstream.api_requests()[-1].json
    if api == "anthropic":
        assert "House rules: use tabs." in str(sent["system"])
        assert {m["role"] for m in sent["messages"]} <= {"user", "assistant"}
    else:
        system = [m for m in sent["messages"] if m["role"] in ("system", "developer")]
        assert any("House rules: use tabs." in str(m["content"]) for m in system)
