"""How a plugin's command reaches the local gateway: its URL, its token, and the gateway
started in the background when none runs.

The dashboard's login link, ``lore mcp`` and ``lore duckdb-compact`` use this, as any plugin
command should, instead of the ``lore`` command's own launcher (``lore_core.cli.launcher``),
whose functions may change with the CLI."""

from __future__ import annotations

import attrs

from lore_core.config import LoreConfig


class GatewayUnreachable(Exception):
    """No gateway answers and none could be started; the message says why and what to do."""


@attrs.frozen
class LocalGateway:
    """The gateway of ``config.server``'s host and port."""

    url: str
    #: Whether :func:`reach_gateway` started it (it keeps running for other agents).
    started: bool
    #: What happened, for the user: "using the gateway at ..." or "started a gateway at ...".
    status: str
    config: LoreConfig

    def token(self) -> str | None:
        """The gateway token (read at each call: a gateway started later writes a new one)."""
        from lore_core.http.token import cli_token

        return cli_token(self.config)


def reach_gateway(config: LoreConfig, *, start: bool = True) -> LocalGateway:
    """The gateway on ``config.server``'s host and port, started in the background when none
    answers and ``start`` is set; :class:`GatewayUnreachable` otherwise (nothing answers, or
    something that is not Lore, or the start failed)."""
    from lore_core.cli.launcher import LaunchError, ensure_gateway, gateway_url, probe

    host, port = config.server.host, config.server.port
    url = gateway_url(host, port)
    try:
        if start:
            status = ensure_gateway(host, port)
            return LocalGateway(url, status.started, status.describe(), config)
        who, health = probe(host, port)
    except LaunchError as exc:
        raise GatewayUnreachable(str(exc)) from None
    except OSError as exc:  # e.g. the data directory is not writable
        raise GatewayUnreachable(f"cannot start the gateway: {exc}") from None
    if who != "lore":
        raise GatewayUnreachable(
            f"no Lore gateway answers at {url}: start one with `lore serve` (or drop --no-start)"
        )
    return LocalGateway(url, False, f"using the gateway at {url} (Lore {health.get('version')})", config)


def gateway_running(config: LoreConfig) -> bool:
    """Whether a Lore gateway answers on ``config.server``'s host and port."""
    from lore_core.cli.launcher import probe

    return probe(config.server.host, config.server.port)[0] == "lore"
