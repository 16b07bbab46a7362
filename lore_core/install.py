"""How to install what Lore says is missing, as a command that works as written.

The plugins are separate distributions in Lore's repository (``plugins/*``), not on PyPI, and
some of their names belong to other projects there (``lore-mcp``): a hint must never say
``pip install <plugin>``. It names the plugin's folder in the checkout Lore was installed
from, and installs into the environment that runs this ``lore`` (a ``uv tool`` or ``pipx``
environment, a virtual environment, the repository's ``.venv``), whichever that is.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

#: The plugins a default install has (``packaging/lore``, the root's dev group) and their
#: folders in the repository.
DEFAULT_PLUGINS: dict[str, str] = {
    "lore-harness-claude": "plugins/harness_claude",
    "lore-harness-codex": "plugins/harness_codex",
    "lore-harness-opencode": "plugins/harness_opencode",
    "lore-store-duckdb": "plugins/store_duckdb",
    "lore-embed-local": "plugins/embed_local",
    "lore-mcp": "plugins/mcp",
    "lore-dashboard": "plugins/dashboard",
}

#: Plugins of the repository that a default install leaves out, and their folders: a team
#: store on PostgreSQL is a choice (the default store is DuckDB). ``plugin_hint`` names them
#: as it names the default ones.
OPTIONAL_PLUGINS: dict[str, str] = {
    "lore-store-postgres": "plugins/store_postgres",
}

#: The distribution with the default plugins, relative to the repository's root.
DEFAULT_DISTRIBUTION = "packaging/lore"

#: The documented install command, run from the repository's root (docs/quickstart.md).
INSTALL_COMMAND = f"uv tool install --reinstall ./{DEFAULT_DISTRIBUTION}"


def _is_checkout(path: Path) -> bool:
    return (path / DEFAULT_DISTRIBUTION / "pyproject.toml").is_file() and (path / "plugins").is_dir()


def _installed_from() -> Path | None:
    """The local directory lore-core was installed from (its PEP 610 ``direct_url.json``),
    as ``uv tool install`` and ``pipx install`` of ``packaging/lore`` record it."""
    try:
        text = metadata.distribution("lore-core").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        url = urlparse(json.loads(text).get("url", ""))
    except (ValueError, AttributeError):
        return None
    return Path(unquote(url.path)) if url.scheme == "file" else None


def checkout_dir() -> Path | None:
    """The Lore repository this ``lore`` runs from (``uv run``, an editable install) or was
    installed from, when it is still there; else ``None``."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here, _installed_from()):
        if candidate is not None and _is_checkout(candidate):
            return candidate
    return None


def install_command(requirements: list[str]) -> str:
    """A shell command that installs ``requirements`` into the environment running this
    ``lore``: with uv when it is on PATH (uv-made environments have no pip), else pip."""
    python = shlex.quote(sys.executable)
    wanted = " ".join(shlex.quote(r) for r in requirements)
    if shutil.which("uv") is None and importlib.util.find_spec("pip") is not None:
        return f"{python} -m pip install {wanted}"
    return f"uv pip install --python {python} {wanted}"


def plugin_hint(*distributions: str) -> str:
    """The command that adds these plugins (``lore-store-duckdb``, ...) to this
    ``lore``, from the checkout it came from; without one, the same command to run in a clone
    of the repository."""
    root = checkout_dir()
    known = {**DEFAULT_PLUGINS, **OPTIONAL_PLUGINS}
    folders = [known[name] for name in distributions]
    if root is not None:
        return install_command([str(root / folder) for folder in folders])
    names = ", ".join(distributions)
    return f"{install_command(folders)} in a clone of Lore's repository ({names}: not published on PyPI)"
