"""Who may talk to the gateway (lore_core/http/access.py), through real sockets: the gateway
token on the local API, the Host check against DNS rebinding, browser origins, remote
peers. Each refused request reads, writes and spends nothing."""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core import cli
from lore_core.config import default_data_dir
from lore_core.http import access
from lore_core.http.token import TOKEN_FILE
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.net import free_port
from lore_core.testing.server import ThreadedServer

BODY = {"model": "claude-test", "max_tokens": 20, "messages": [{"role": "user", "content": "hello heron"}]}
CLIENT = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01", "x-claude-code-session-id": "s-acc"}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def token_of(server: ThreadedServer) -> str:
    return server.gateway.tokens.current()


def stored_messages(server: ThreadedServer) -> int:
    server.call(server.gateway.writer.wait_idle(5.0))
    return int(server.call(server.gateway.store.stats())["messages"])


def test_the_token_is_made_at_first_start_private_and_required_by_the_api(
    start_gateway: Callable[..., ThreadedServer],
) -> None:
    server = start_gateway(config={"store": {"backend": "memory"}})
    path = default_data_dir() / TOKEN_FILE
    token = path.read_text().strip()
    assert len(token) >= 43 and token == token_of(server)  # 32 random bytes, URL-safe base64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for headers in ({}, bearer("wrong"), {"authorization": token}, bearer(token[:-1])):
            r = client.get("/lore/api/sessions", headers=headers)
            assert r.status_code == 401 and "gateway token" in r.json()["error"]
        assert client.get("/lore/api/sessions", headers=bearer(token)).status_code == 200
        # The model routes and /health stay open to loopback clients.
        assert client.post("/v1/messages", json=BODY, headers=CLIENT).status_code == 200
        assert client.get("/health").status_code == 200
    assert stored_messages(server) == 2


def test_a_rebinding_page_and_a_cross_origin_post_are_refused(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    server = start_gateway(config={"store": {"backend": "memory"}})
    token = token_of(server)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        # DNS rebinding: the page's own host name resolving to 127.0.0.1.
        foreign = {"host": f"evil.example:{server.port}"}
        r = client.get("/lore/api/sessions", headers=foreign | bearer(token))
        assert r.status_code == 421
        assert client.post("/v1/messages", json=BODY, headers=CLIENT | foreign).status_code == 421
        # A page's fetch carries its origin; a text/plain POST needs no preflight.
        page = {"origin": "http://evil.example", "content-type": "text/plain"}
        r = client.post("/lore/api/distill", content=b"x", headers=page)
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
        assert (
            client.post("/lore/api/distill", content=b"x", headers={"content-type": "text/plain"}).status_code
            == 401
        )
        assert client.post("/v1/messages", json=BODY, headers=CLIENT | {"origin": "null"}).status_code == 403
        # The gateway's own origin (its dashboard, later) is a browser it may answer.
        own = {"origin": f"http://127.0.0.1:{server.port}"}
        assert client.get("/lore/api/sessions", headers=own | bearer(token)).status_code == 200
    # Nothing was stored, nothing reached the provider (no proxied call, no worker call).
    assert stored_messages(server) == 0
    assert fake_upstream.api_requests() == []


def test_allowed_hosts_and_a_configured_token(
    start_gateway: Callable[..., ThreadedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LORE_TOKEN", "a-shared-team-token-of-enough-length")
    server = start_gateway(
        config={"store": {"backend": "memory"}, "server": {"allowedHosts": ["lore.internal"]}},
        env={"LORE_TOKEN": "a-shared-team-token-of-enough-length"},
    )
    with httpx.Client(base_url=server.url, timeout=10) as client:
        headers = {"host": "lore.internal"} | bearer("a-shared-team-token-of-enough-length")
        assert client.get("/lore/api/status", headers=headers).status_code == 200
        assert client.get("/lore/api/status", headers=bearer(token_of(server))).status_code == 200
    # `lore token` prints the configured one and will not rotate it.
    assert cli.main(["token"]) == 0
    assert cli.main(["token", "--rotate"]) == 2


def test_lore_token_prints_and_rotates_and_the_running_gateway_follows(
    start_gateway: Callable[..., ThreadedServer],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = start_gateway(config={"store": {"backend": "memory"}})
    monkeypatch.setenv("LORE_PORT", str(server.port))
    old = token_of(server)
    assert cli.main(["token"]) == 0
    assert capsys.readouterr().out.strip() == old
    assert cli.main(["token", "--rotate"]) == 0
    new = capsys.readouterr().out.strip()
    assert new != old and len(new) >= 43
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.get("/lore/api/sessions", headers=bearer(old)).status_code == 401
        assert client.get("/lore/api/sessions", headers=bearer(new)).status_code == 200
    # The CLI reads the token from the data directory and talks to the running gateway.
    assert cli.main(["sessions", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def _outward_address() -> str | None:
    """An address of this machine that is not loopback (a remote peer's view), if any."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET: nothing is sent
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if access.is_loopback_address(address) else address


@pytest.mark.parametrize("allow_remote", [False, True])
def test_remote_peers(lore_env: dict[str, str], tmp_path: Path, allow_remote: bool) -> None:
    address = _outward_address()
    if address is None:
        pytest.skip("this machine has no address outside loopback")
    from lore_core.gateway import Gateway

    config = {
        "store": {"backend": "memory"},
        "server": {"host": "0.0.0.0", "allowRemote": allow_remote, "allowedHosts": [address]},
    }
    Path(lore_env["LORE_CONFIG"]).write_text(json.dumps(config))
    gateway = Gateway.load(env=dict(os.environ), cwd=tmp_path)
    port = free_port()
    server = ThreadedServer(gateway, host="0.0.0.0", port=port).start()
    try:
        token = token_of(server)
        remote: dict[str, Any] = {"base_url": f"http://{address}:{port}", "timeout": 10}
        with httpx.Client(**remote) as client:
            api = client.get("/lore/api/sessions", headers=bearer(token))
            model = client.post("/v1/messages", json=BODY, headers=CLIENT)
            if not allow_remote:
                assert api.status_code == 403 and model.status_code == 403
            else:
                assert api.status_code == 200
                assert model.status_code == 401  # the token is mandatory on the model routes too
                with_token = CLIENT | {access.TOKEN_HEADER: token}
                assert client.post("/v1/messages", json=BODY, headers=with_token).status_code == 200
                # F13: not an open relay into the gateway's network, even for token holders.
                relay = with_token | {"x-lore-upstream-url": "http://127.0.0.1:9/admin?"}
                for method in ("POST", "DELETE"):
                    refused = client.request(method, "/v1/messages", json=BODY, headers=relay)
                    assert refused.status_code == 403, refused.text
        assert stored_messages(server) == (2 if allow_remote else 0)
    finally:
        server.stop()


def test_host_and_origin_rules() -> None:
    from lore_core.config import LoreConfig

    config = LoreConfig()
    loopback = ("127.0.0.1:8377", "localhost:8377", "[::1]:8377", "127.0.0.2", "app.localhost:8377", None)
    # A fully qualified name's trailing dot names the same host (it was a false 421).
    for host in (*loopback, "localhost.:8377", "localhost.", "127.0.0.1.:8377"):
        assert access.host_allowed(host, config), host
    for host in ("evil.example", "127.0.0.1.nip.io", "10.0.0.5:8377", "0.0.0.0:8377"):
        assert not access.host_allowed(host, config), host
    assert access.origin_allowed(None, "127.0.0.1:8377", config)
    assert access.origin_allowed("http://127.0.0.1:8377", "127.0.0.1:8377", config)
    assert access.origin_allowed("http://[::1]:8377", "[::1]:8377", config)
    for origin in ("http://127.0.0.1:9999", "https://127.0.0.1:8377", "null", "http://evil.example:8377"):
        assert not access.origin_allowed(origin, "127.0.0.1:8377", config), origin
    # A rebinding page's origin matches its Host, but that host is not one we answer.
    assert not access.origin_allowed("http://evil.example:8377", "evil.example:8377", config)
