"""``--limit`` on the listing commands: 0 means all, a negative value is refused with a
message (both used to show one row without a word)."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from lore_core import cli
from lore_core.testing.server import ThreadedServer


def test_limit_zero_lists_all_and_a_negative_limit_is_refused(
    start_gateway: Callable[..., ThreadedServer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = start_gateway()
    for i in range(3):
        messages = [{"role": "user", "content": f"zebra {i}"}]
        body = {"model": "claude-test", "max_tokens": 5, "messages": messages}
        headers = {"x-api-key": "k", "x-session-id": f"limit-{i}", "x-lore-project": "/home/dev/zoo"}
        answer = httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30)
        assert answer.status_code == 200
    server.call(server.gateway.writer.wait_idle(10.0))
    monkeypatch.setenv("LORE_PORT", str(server.port))
    capsys.readouterr()

    assert cli.main(["sessions", "--limit", "0", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3
    assert cli.main(["sessions", "--limit", "1", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
    assert cli.main(["search", "zebra", "--all", "--limit", "0", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3

    for command in (["sessions"], ["search", "zebra"], ["recall", "zebra"]):
        with pytest.raises(SystemExit) as refused:
            cli.main([*command, "--limit", "-1"])
        assert refused.value.code == 2
        assert "give 0 (all) or a positive number" in capsys.readouterr().err


def test_lore_show_defaults_to_the_latest_session_and_names_its_state(
    start_gateway: Callable[..., ThreadedServer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``lore show`` with no id shows the latest session, and its state by name only (it
    opened with the whole state dictionary, thousands of characters)."""
    server = start_gateway()
    for session in ("older-session", "latest-session"):
        body = {"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": session}]}
        headers = {"x-api-key": "k", "x-session-id": session, "x-lore-project": "/home/dev/zoo"}
        assert (
            httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30).status_code == 200
        )
        server.call(server.gateway.writer.wait_idle(10.0))
    monkeypatch.setenv("LORE_PORT", str(server.port))
    capsys.readouterr()

    assert cli.main(["show"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("session latest-session") and "older-session" not in out
    state_line = next(line for line in out.splitlines() if line.startswith("state"))
    assert "owner" in state_line and "{" not in state_line
