"""Where the gateway token is kept, and the token a command sends.

Apart from :mod:`lore_core.http.access` (which checks requests and pulls in the upstream
client) so that a ``lore`` command talking to a running gateway reads its token without
loading the proxy's HTTP stack.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from lore_core.config import LoreConfig, default_data_dir

TOKEN_FILE = "gateway.token"


def token_path(data_dir: Path | None = None) -> Path:
    return (data_dir or default_data_dir()) / TOKEN_FILE


def configured_token(config: LoreConfig) -> str | None:
    return config.server.token or None


def cli_token(config: LoreConfig, data_dirs: Iterable[Path] = ()) -> str | None:
    """The token the CLI sends: the configured one, else the data directory's file (the
    CLI never makes one: the gateway does at its first start)."""
    fixed = configured_token(config)
    if fixed is not None:
        return fixed
    for path in [token_path(d) for d in data_dirs] or [token_path()]:
        try:
            token = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if token:
            return token
    return None
