"""`lore recall` runs the recall engine through the running gateway: search, open by id,
and clear errors for bad input."""

from __future__ import annotations

import json

import httpx

from lore_core import cli


def test_lore_recall_through_the_gateway(start_gateway, fake_upstream, monkeypatch, capsys):
    server = start_gateway()
    history = []
    for text in ["the flaky test is tests/test_quokka.py", "quokka fails with KeyError: 'wallaby'"]:
        history.append({"role": "user", "content": text})
        body = {"model": "claude-test", "max_tokens": 20, "messages": history}
        headers = {"x-api-key": "k", "x-session-id": "recall-cli", "x-lore-project": "/home/dev/zoo"}
        reply = httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30).json()
        history.append({"role": "assistant", "content": reply["content"]})
    monkeypatch.setenv("LORE_PORT", str(server.port))
    capsys.readouterr()

    assert (
        cli.main(
            ["recall", "which test fails with the wallaby KeyError?", "--project", "/home/dev/zoo", "--json"]
        )
        == 0
    )
    results = json.loads(capsys.readouterr().out)
    assert results and set(results[0]) == {
        "id", "source", "relevance", "score", "created_at", "session", "role", "tool", "tool_source",
        "span", "text",
    }  # fmt: skip
    top = results[0]
    # A result is a passage (not its whole message): its span in the message's text.
    assert top["id"].startswith("t:") and "wallaby" in top["text"] and top["source"] == "message"
    assert len(top["span"]) == 2 and top["span"][0] <= top["span"][1]
    assert top["session"] == "recall-cli" and top["created_at"] > 0

    assert cli.main(["recall", top["id"]]) == 0
    assert "wallaby" in capsys.readouterr().out

    assert cli.main(["recall", "   "]) == 1
    assert "lore:" in capsys.readouterr().err
    assert cli.main(["recall", "quokka", "--scope", "galaxy"]) == 1
    assert "galaxy" in capsys.readouterr().err
    assert cli.main(["recall", "t:no-such-message"]) == 1
