"""``lore stop``, ``lore doctor`` and ``lore config``, and what ``lore serve`` says at start.

They read the same configuration and plugins every ``lore`` command does
(:func:`lore_core.plugins.bootstrap`) and reach a running gateway only through its pid file
and ``GET /health``: none of them needs the gateway token.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from lore_core.config import FLAT_KEY, LoreConfig, ServerConfig, default_data_dir, env_overrides
from lore_core.interfaces import Command
from lore_core.plugins import LorePluginManager

if TYPE_CHECKING:
    import pluggy

    from lore_core.gateway import Gateway
    from lore_core.interfaces import Store


class StopCommand(Command):
    """``lore stop``."""

    name = "stop"
    help = "stop the gateway running on the configured port (or --port, --all)"
    description = (
        "Stop a gateway as Ctrl+C would: answers in flight finish and queued writes "
        "are flushed. It finds the gateway through the pid file lore run and lore serve keep in "
        "the data directory (gateway-<port>.pid)."
    )
    examples = ("lore stop", "lore stop --port 8400", "lore stop --all --force")

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--port", type=int, default=None, help="the gateway's port (default: server.port)"
        )
        parser.add_argument("--all", action="store_true", help="every gateway a pid file names")
        parser.add_argument(
            "--timeout", type=float, default=None, help="seconds to wait (default: its stop budget)"
        )
        parser.add_argument("--force", action="store_true", help="kill it when it has not stopped in time")
        parser.add_argument("--json", action="store_true", help="print what was done as JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_stop(args)


class DoctorCommand(Command):
    """``lore doctor``."""

    name = "doctor"
    help = (
        "check the setup: configuration, data directory, store, gateway, plugins, clients, "
        "agent setups, worker"
    )
    description = (
        "Check what Lore needs and say what to do about each problem. Exit code 1 when "
        "something is broken (FAIL), 0 otherwise (warnings included)."
    )
    examples = ("lore doctor", "lore doctor --json")

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the checks as JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_doctor(args)


class ConfigCommand(Command):
    """``lore config``."""

    name = "config"
    help = "print the effective configuration and where each value comes from"
    description = (
        "Every setting as the gateway would use it, with its origin: default, a "
        "configuration file (later files win), or an environment variable (wins over files). "
        "Secrets are shown as (set)."
    )
    examples = ("lore config", "lore config server", "lore config worker.model --json")

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("key", nargs="?", help="only this section or key (server, upstream.anthropic)")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_config(args)


# ---------------------------------------------------------------------------------------------
# What lore serve says at start
# ---------------------------------------------------------------------------------------------


def startup_lines(gateway: Gateway) -> list[str]:
    """The lines ``lore serve`` prints before it listens: what it reads and writes, where
    requests go, and who pays for background model calls."""
    from lore_core import __version__

    config = gateway.config
    return [
        f"Lore {__version__}",
        f"  configuration: {_config_files_text(config)}",
        f"  upstreams:     {_upstreams_text(config)}",
        f"  data:          {default_data_dir()}",
        f"  store:         {_store_text(gateway.store)}",
        f"  worker:        {describe_worker(config)}",
        f"  plugins:       {_plugins_text(gateway.pm)}",
    ]


def describe_worker(config: LoreConfig) -> str:
    """Which model background calls (distillation, knowledge curation) use, and whose key
    pays for them."""
    worker = config.worker
    if worker.upstream or worker.api_key:
        model = worker.model or "each session's own model"
        where = worker.upstream or "the provider's default upstream"
        key = "the key in worker.apiKey" if worker.api_key else "no key (none configured)"
        return f"{model} at {where}, billed to {key}"
    model = f"{worker.model} (worker.model)" if worker.model else "each session's own model"
    # Said at every start: background calls cost money, on the key of the session they serve.
    return (
        f"{model}, billed to that session's own API key (distillation and knowledge curation "
        "run in the background with its credentials; worker.upstream and worker.apiKey choose another)"
    )


def _env_overrides(config: LoreConfig, env: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if env is None else env
    return [name for name in env_overrides(config.upstream.urls) if env.get(name)]


def _config_files_text(config: LoreConfig) -> str:
    files = ", ".join(config.sources) if config.sources else "no file (defaults)"
    if os.environ.get("LORE_CONFIG"):
        files += " (LORE_CONFIG)"
    overrides = _env_overrides(config)
    return files + (f"; environment: {', '.join(overrides)}" if overrides else "")


def _upstreams_text(config: LoreConfig) -> str:
    upstream = config.upstream
    parts = [f"{provider} {url}" for provider, url in upstream.urls.items()]
    parts += [f"{prefix}* {url}" for prefix, url in sorted(upstream.by_model_prefix.items())]
    return ", ".join(parts)


def _store_text(store: Store) -> str:
    where = f" at {store.location}" if store.location else ""
    persists = "" if store.journal_dir is not None else " (kept in memory only: nothing survives a restart)"
    return f"{store.name}{where}{persists}"


def _plugins_text(pm: pluggy.PluginManager) -> str:
    rows = pm.report() if isinstance(pm, LorePluginManager) else []
    # Built-ins come with lore-core; the installed plugins are what a user chose.
    loaded = [row.name for row in rows if row.status == "loaded" and row.distribution != "lore-core"]
    text = ", ".join(loaded) or "none besides the built-ins"
    failed = [row.name for row in rows if row.status == "failed"]
    blocked = [row.name for row in rows if row.status == "blocked"]
    if failed:
        text += f"; failed to load: {', '.join(failed)} (lore plugins says why)"
    if blocked:
        text += f"; blocked by LORE_DISABLE_PLUGINS: {', '.join(blocked)}"
    return text


# ---------------------------------------------------------------------------------------------
# lore stop
# ---------------------------------------------------------------------------------------------


def cmd_stop(args: argparse.Namespace) -> int:
    from lore_core.cli.launcher import gateway_files, gateway_url, probe, running_gateways, stop_gateway
    from lore_core.gateway import STOP_MARGIN_SECONDS

    server = ServerConfig()
    if args.port is None and not args.all:
        # The configured port; an explicit --port or --all needs no configuration (a broken
        # .lore.json must not keep a gateway running).
        server = _bootstrap().config.server
    port = args.port if args.port is not None else server.port
    # By default as long as the gateway's own stop may take (Gateway.stop_budget_seconds).
    budget = 2 * server.shutdown_grace_seconds + STOP_MARGIN_SECONDS
    timeout = args.timeout if args.timeout is not None else budget
    ports = sorted(running_gateways()) if args.all else [port]
    report: list[dict[str, Any]] = []
    code = 0
    for each in ports:
        url = gateway_url(server.host, each)
        result = stop_gateway(each, timeout=timeout, force=args.force)
        outcome = result.outcome
        if outcome == "absent" and probe(server.host, each)[0] == "lore":
            outcome = "unmanaged"  # answers, but nothing names its process
        report.append({"port": each, "url": url, "pid": result.pid, "outcome": outcome})
        if args.json:
            code = code or (1 if outcome in ("running", "unmanaged") else 0)
            continue
        if outcome == "stopped":
            print(f"lore: stopped the gateway at {url} (pid {result.pid})")
        elif outcome == "stale":
            gone = f"removed {result.pid_path}: pid {result.pid} is gone"
            print(f"lore: no gateway is running on port {each} ({gone})")
        elif outcome == "absent":
            print(f"lore: no gateway is running on port {each}")
        elif outcome == "unmanaged":
            pid_path, _ = gateway_files(each)
            print(
                f"lore: a gateway answers at {url}, but no pid file names it ({pid_path}): it runs "
                "with another data directory (XDG_DATA_HOME) or an older Lore; stop it where it runs",
                file=sys.stderr,
            )
            code = 1
        else:
            print(
                f"lore: the gateway at {url} (pid {result.pid}) has not stopped after {timeout:g} s; "
                "lore stop --force kills it (its journal keeps what it had not written)",
                file=sys.stderr,
            )
            code = 1
    if args.all and not ports and not args.json:
        print("lore: no gateway is running (no pid file in the data directory names one)")
    if args.json:
        _print_json(report)
    return code


# ---------------------------------------------------------------------------------------------
# lore doctor
# ---------------------------------------------------------------------------------------------

OK, INFO, WARN, FAIL = "ok", "info", "warn", "FAIL"


@attrs.define
class Check:
    status: str
    name: str
    detail: str
    hint: str = ""


def cmd_doctor(args: argparse.Namespace) -> int:
    checks = list(_doctor_checks())
    failures = sum(c.status == FAIL for c in checks)
    warnings = sum(c.status == WARN for c in checks)
    if args.json:
        _print_json({"checks": [attrs.asdict(c) for c in checks], "problems": failures, "warnings": warnings})
    else:
        for c in checks:
            print(f"{c.status:<5} {c.name:<8} {c.detail}")
            if c.hint:
                print(f"{'':14}-> {c.hint}")
        print(f"lore doctor: {_count(failures, 'problem')}, {_count(warnings, 'warning')}")
    return 1 if failures else 0


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _doctor_checks() -> Iterator[Check]:
    from lore_core.cli.launcher import gateway_url, probe, running_gateways
    from lore_core.config import ConfigError
    from lore_core.plugins import PluginError, Registry, bootstrap, make_plugin_manager

    # Configuration first: without it, only what needs none is checked.
    config: LoreConfig | None = None
    try:
        boot = bootstrap()
        config, pm, registry = boot.config, boot.pm, boot.registry
    except ConfigError as exc:
        yield Check(FAIL, "config", str(exc), "fix the file or variable named; lore config shows the rest")
        pm = make_plugin_manager()
        registry = Registry.collect(pm)
    except PluginError as exc:
        # Two plugins claiming one name: nothing else can be checked reliably.
        yield Check(FAIL, "plugins", str(exc), "lore plugins lists them; uninstall or disable one")
        return
    else:
        yield Check(OK, "config", _config_files_text(config) + ": valid")

    yield _data_dir_check(default_data_dir())

    health: dict[str, Any] | None = None
    if config is not None:
        host, port = config.server.host, config.server.port
        url = gateway_url(host, port)
        kind, detail = probe(host, port)
        pids = running_gateways()
        if kind == "lore":
            health = detail
            pid = pids.get(port)
            named = f", pid {pid}" if pid else ", no pid file (lore stop cannot stop it)"
            status = OK if detail.get("status") == "ok" and pid else WARN
            yield Check(
                status,
                "gateway",
                f"{url} answers: {detail.get('status')}, Lore {detail.get('version')}{named}",
            )
            for problem in detail.get("degraded") or []:
                yield Check(WARN, "gateway", f"degraded: {problem}")
        elif kind == "absent":
            yield Check(INFO, "gateway", f"not running on {url}", "lore serve, or lore run <agent> starts it")
        else:
            yield Check(
                FAIL,
                "gateway",
                f"port {port} on {host} is taken by something else: {detail}",
                "stop it, or choose another port (LORE_PORT=... or server.port)",
            )
        for other, pid in sorted(pids.items()):
            if other != port:
                yield Check(INFO, "gateway", f"also running: {gateway_url(host, other)} (pid {pid})")
        yield from _store_checks(config, registry, port, health)

    yield from _plugin_checks(pm)
    if config is not None:
        yield from _client_checks(registry, gateway_url(config.server.host, config.server.port))
        yield from _setup_checks(registry, gateway_url(config.server.host, config.server.port))
        yield _worker_check(config, health)


def _data_dir_check(directory: Path) -> Check:
    try:
        info = directory.stat()
    except FileNotFoundError:
        return Check(INFO, "data", f"{directory} does not exist yet (the first lore serve makes it)")
    except OSError as exc:
        return Check(FAIL, "data", f"{directory}: {exc.strerror or exc}")
    mode = stat.filemode(info.st_mode)
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return Check(
            FAIL,
            "data",
            f"{directory} belongs to uid {info.st_uid}, not to you ({mode})",
            "Lore keeps its token and store there: use your own (XDG_DATA_HOME)",
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        return Check(FAIL, "data", f"{directory} is not writable ({mode})", f"chmod u+rwx {directory}")
    if info.st_mode & 0o077:
        return Check(
            WARN,
            "data",
            f"{directory} is open to others ({mode})",
            f"lore serve makes it owner-only at start; or now: chmod 700 {directory}",
        )
    return Check(OK, "data", f"{directory} ({mode}, yours only)")


def _store_checks(
    config: LoreConfig, registry: Any, port: int, health: dict[str, Any] | None
) -> Iterator[Check]:
    import asyncio

    from lore_core.config import ConfigError
    from lore_core.gateway import store_holder
    from lore_core.install import plugin_hint
    from lore_core.storage.writer import choose_store

    try:
        store = choose_store(config, registry.stores)
    except ConfigError as exc:
        yield Check(FAIL, "store", str(exc))
        return
    label = _store_text(store)
    if store.journal_dir is None:
        yield Check(WARN, "store", label, f"add lore-store-duckdb: {plugin_hint('lore-store-duckdb')}")
        return
    holder = store_holder(store)
    if holder is not None:
        url = str(holder.get("url") or "")
        who = f"the gateway at {url or '?'} (pid {holder.get('pid', '?')})"
        if url.endswith(f":{port}"):
            if health is not None:
                yield Check(OK, "store", f"{label}: held by the running gateway")
            else:  # it has claimed the store and does not answer yet, or no longer
                yield Check(INFO, "store", f"{label}: held by {who}, starting or stopping")
            return
        other = url.rsplit(":", 1)[-1]
        yield Check(
            FAIL,
            "store",
            f"{label}: in use by {who}, not by one on port {port}",
            f"lore serve here would refuse: lore stop --port {other}, or LORE_PORT={other}",
        )
        return
    if health is not None:
        path = ((health.get("store") or {}).get("store") or {}).get("path")
        if path and store.location and path != store.location:
            yield Check(
                WARN,
                "store",
                f"{label}, but the running gateway uses {path}",
                "it was started with another configuration: lore stop, then lore serve",
            )
            return
        yield Check(OK, "store", f"{label}: in use by the running gateway")
        return
    if store.location and not Path(store.location).exists():
        yield Check(OK, "store", f"{label}: not made yet (the first lore serve makes it)")
        return

    async def open_and_close() -> None:
        await store.open()
        await store.close()

    try:
        asyncio.run(open_and_close())
    except Exception as exc:
        yield Check(FAIL, "store", f"{label}: cannot be opened: {' '.join(str(exc).split())}")
        return
    yield Check(OK, "store", f"{label}: opens")


def _plugin_checks(pm: LorePluginManager) -> Iterator[Check]:
    from lore_core.install import DEFAULT_PLUGINS, plugin_hint

    rows = pm.report()
    yield Check(OK, "plugins", _plugins_text(pm))
    for row in rows:
        if row.status == "failed":
            yield Check(FAIL, "plugins", f"{row.name} ({row.distribution}) failed to load: {row.error}")
    have = {row.distribution for row in rows}
    missing = [name for name in DEFAULT_PLUGINS if name not in have]
    if missing:
        yield Check(
            WARN, "plugins", f"default plugins not installed: {', '.join(missing)}", plugin_hint(*missing)
        )


def _client_checks(registry: Any, url: str) -> Iterator[Check]:
    from lore_core.cli.launcher import launchable_names

    for name in launchable_names(registry.harnesses):
        harness = registry.harnesses[name]
        try:
            plan = harness.launch(url, [])
        except Exception:  # a harness that breaks: doctor goes on with the others
            continue
        if not plan.argv:
            continue
        found = shutil.which(plan.argv[0])
        if found:
            yield Check(OK, "client", f"{name}: {found}")
        else:
            package = harness.npm_package
            hint = f"npm install -g {package}" if package else ""
            yield Check(INFO, "client", f"{name}: {plan.argv[0]} is not on PATH", hint)


def _setup_checks(registry: Any, url: str) -> Iterator[Check]:
    """Each agent ``lore setup`` wrote into: do its files still point at this gateway?"""
    from lore_core.cli.setup import SetupError, current_value, plan_setup, read_ledger

    try:
        ledger = read_ledger()
    except SetupError as exc:
        yield Check(WARN, "setup", str(exc))
        return
    for agent, entry in sorted(ledger.items()):
        harness = registry.harnesses.get(agent)
        if harness is None:
            yield Check(
                WARN,
                "setup",
                f"{agent}: set up, but no such harness is installed",
                f"lore setup undo {agent}",
            )
            continue
        try:
            wanted = plan_setup(harness.setup_settings(url), entry.get("settings", []))
            current = [current_value(change.path, change.key) for change in wanted]
        except SetupError as exc:
            yield Check(WARN, "setup", f"{agent}: {exc}")
            continue
        off = [
            c.path + ": " + ".".join(c.key) for c, now in zip(wanted, current, strict=True) if now != c.value
        ]
        if off:
            yield Check(WARN, "setup", f"{agent}: its files no longer point at {url} ({'; '.join(off)})",
                        f"lore setup {agent} writes them again")  # fmt: skip
        else:
            yield Check(OK, "setup", f"{agent}: its own configuration points at {url}")


def _worker_check(config: LoreConfig, health: dict[str, Any] | None) -> Check:
    text = describe_worker(config)
    worker = (health or {}).get("worker") or {}
    state = worker.get("state")
    if state in ("circuit_open", "half_open"):
        return Check(WARN, "worker", f"{text}; now: {state}: {worker.get('reason', '')}".rstrip(": "))
    if (config.worker.upstream or config.worker.api_key) and not config.worker.model:
        return Check(WARN, "worker", text, "set worker.model: a configured worker needs a model name")
    return Check(OK, "worker", text)


# ---------------------------------------------------------------------------------------------
# lore config
# ---------------------------------------------------------------------------------------------


@attrs.define
class Setting:
    key: str
    value: Any
    source: str
    secret: bool = False


def cmd_config(args: argparse.Namespace) -> int:
    boot = _bootstrap()
    settings = effective_settings(boot.config)
    if args.key:
        wanted = args.key.strip(".")
        settings = [s for s in settings if s.key == wanted or s.key.startswith(wanted + ".")]
        if not settings:
            print(f"lore: no setting {args.key!r} (lore config lists them all)", file=sys.stderr)
            return 2
    if args.json:
        _print_json({"files": boot.config.sources, "settings": [_shown(s) for s in settings]})
        return 0
    files = ", ".join(boot.config.sources) or "none (defaults and environment only)"
    print(f"# configuration files, later wins: {files}")
    width = max(len(s.key) for s in settings)
    for s in settings:
        shown = _shown(s)
        print(f"{s.key:<{width}} = {json.dumps(shown['value'])}  # {s.source}")
    return 0


def _shown(setting: Setting) -> dict[str, Any]:
    value = ("(set)" if setting.value else "") if setting.secret else setting.value
    return {"key": setting.key, "value": value, "source": setting.source}


def effective_settings(config: LoreConfig, env: Mapping[str, str] | None = None) -> list[Setting]:
    """Every leaf setting of ``config`` (core and plugin sections) with where its value came
    from: an environment variable, the last configuration file that set it, or the default."""
    from lore_core.config import CORE_SECTIONS

    env = os.environ if env is None else env
    set_by_file: dict[str, str] = {}
    explicit = env.get("LORE_CONFIG")
    for source in config.sources:
        try:
            raw = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # it loaded a moment ago; a file changed since is read next time
        label = f"{source} (LORE_CONFIG)" if explicit else source
        for path in _raw_paths(raw):
            set_by_file[path] = label
    overrides = env_overrides(config.upstream.urls)
    set_by_env = {f"{section}.{key}": var for var, (section, key) in overrides.items() if env.get(var)}

    sections = {key: getattr(config, key) for key in CORE_SECTIONS}
    sections.update(config.plugin_sections)
    settings = []
    for section, value in sections.items():
        for key, leaf, secret in _leaves(value, section):
            source = set_by_env.get(key) or _file_source(key, set_by_file) or "default"
            settings.append(Setting(key, leaf, source, secret))
    return settings


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _leaves(value: Any, path: str, secret: bool = False) -> Iterator[tuple[str, Any, bool]]:
    """``(key.path, value, secret)`` of every leaf, keys as written in ``.lore.json``."""
    if attrs.has(type(value)):
        for field in attrs.fields(type(value)):
            # A flat field's keys sit beside the section's own (upstream.<provider>).
            key = path if field.metadata.get(FLAT_KEY) else f"{path}.{_camel(field.name)}"
            # repr=False marks a secret (server.token, worker.apiKey): never printed.
            yield from _leaves(getattr(value, field.name), key, not field.repr)
    elif isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}", secret)
    else:
        yield path, value, secret


def _raw_paths(raw: Mapping[str, Any], path: str = "") -> Iterator[str]:
    for key, item in raw.items():
        here = f"{path}.{key}" if path else str(key)
        if isinstance(item, Mapping) and item:
            yield from _raw_paths(item, here)
        else:
            yield here


def _file_source(key: str, set_by_file: Mapping[str, str]) -> str | None:
    """The file that set ``key`` or a section above it (an empty ``{}`` sets none)."""
    probe = key
    while probe:
        if probe in set_by_file:
            return set_by_file[probe]
        probe = probe.rpartition(".")[0]
    return None


# ---------------------------------------------------------------------------------------------


def _bootstrap() -> Any:
    from lore_core.plugins import bootstrap

    return bootstrap()


def _print_json(payload: Any) -> None:
    print(json.dumps(payload, indent=2, ensure_ascii=False, default=str))
