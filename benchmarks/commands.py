"""How long a ``lore`` command takes, with and without a running gateway, and what an idle
gateway holds in memory.

On a copy of a store you give it (``--store``: a DuckDB store file Lore wrote, with its
``.fts``/``.vec`` folders beside it; for example one made by ``real_sessions.py --workdir``),
it times, each ``--repeat`` times (the median is printed):

* ``lore --version``;
* the read commands (``status``, ``sessions``, ``show``, ``knowledge list``,
  ``distillations``, ``search``, ``recall``) with no gateway running: the command opens the
  store itself;
* the same commands through a running gateway (``lore serve`` started on the copy);
* the gateway's resident memory (VmRSS) once it has started and settled, and again after
  its first recall (which loads the embedder).

Before and after a change, in one run: ``--baseline-src DIR`` (a ``git worktree`` of an
earlier commit) runs every command from that source tree too, alternating with this one,
so that the machine's load hits both alike. Every command is started as
``python -m lore_core.cli`` for both.

    python benchmarks/commands.py --store /path/to/store [--baseline-src /tmp/before]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from lore_core.testing.net import free_port, spawn_logged, stop_process, wait_until_serving

# The targets (seconds, MB).
TARGET_WITH_GATEWAY_S = 0.3
TARGET_WITHOUT_GATEWAY_S = 2.0
TARGET_IDLE_RSS_MB = 200


def _copy_store(store: Path, work: Path) -> Path:
    """The store file and its index folders, copied (the benchmark never writes to yours)."""
    target = work / "store"
    shutil.copy2(store, target)
    for suffix in (".fts", ".vec", ".journal"):
        side = store.with_name(store.name + suffix)
        if side.is_dir():
            shutil.copytree(side, target.with_name(target.name + suffix))
        elif side.is_file():
            shutil.copy2(side, target.with_name(target.name + suffix))
    return target


class Target:
    """One source tree's commands, on its own copy of the store."""

    def __init__(self, name: str, src: Path | None, store: Path, root: Path) -> None:
        self.name = name
        self.work = root / name
        (self.work / "home").mkdir(parents=True)
        self.port = free_port()
        copy = _copy_store(store, self.work)
        config = self.work / ".lore.json"
        config.write_text(json.dumps({"store": {"path": str(copy)}, "server": {"port": self.port}}))
        self.env = {
            **os.environ,
            "HOME": str(self.work / "home"),
            "XDG_DATA_HOME": str(self.work / "home" / ".local" / "share"),
            "XDG_CONFIG_HOME": str(self.work / "home" / ".config"),
            "LORE_CONFIG": str(config),
            "LORE_UPSTREAM_ANTHROPIC": "http://127.0.0.1:9",
            "LORE_UPSTREAM_OPENAI": "http://127.0.0.1:9",
        }
        self.env.pop("PYTHONPATH", None)
        if src is not None:
            # Its kernel and plugins shadow the installed ones (entry points name modules).
            paths = [str(src), *(str(p) for p in sorted((src / "plugins").iterdir()) if p.is_dir())]
            self.env["PYTHONPATH"] = os.pathsep.join(paths)
        self.gateway: subprocess.Popen[bytes] | None = None

    def run(self, args: Sequence[str]) -> float:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "lore_core.cli", *args],
            env=self.env,
            cwd=self.work,
            capture_output=True,
            timeout=300,
        )
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(
                f"{self.name}: lore {' '.join(args)} failed ({done.returncode}): "
                f"{done.stderr.decode(errors='replace')[-500:]}"
            )
        return elapsed

    def start_gateway(self) -> None:
        log = self.work / "gateway.log"
        self.gateway = spawn_logged(
            [sys.executable, "-m", "lore_core.cli", "serve"], self.env, log, cwd=self.work
        )
        wait_until_serving(self.gateway, f"http://127.0.0.1:{self.port}/health", log)

    def rss_mb(self) -> float:
        assert self.gateway is not None
        for line in Path(f"/proc/{self.gateway.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def settle(self, seconds: float = 30.0) -> None:
        """Until the gateway's indexer is idle (a copied store may have work left)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as resp:
                health = json.loads(resp.read())
            if (health.get("indexer") or {}).get("state") in (None, "idle", "stopped"):
                return
            time.sleep(0.5)

    def stop_gateway(self) -> None:
        if self.gateway is not None:
            stop_process(self.gateway)
            self.gateway = None


def _first_session(target: Target) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "lore_core.cli", "sessions", "--json", "--limit", "1"],
        env=target.env,
        cwd=target.work,
        capture_output=True,
        check=True,
    )
    rows = json.loads(done.stdout)
    if not rows:
        raise SystemExit("the store holds no session: give a store with traffic in it")
    return str(rows[0]["id"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, type=Path, help="a DuckDB store file Lore wrote (copied)")
    parser.add_argument("--baseline-src", type=Path, help="also run the commands from this source tree")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (median printed)")
    parser.add_argument("--query", default="test failure", help="the search and recall query")
    args = parser.parse_args(argv)
    if not args.store.is_file():
        parser.error(f"--store {args.store}: no such file")
    if args.baseline_src is not None and not (args.baseline_src / "lore_core").is_dir():
        parser.error(f"--baseline-src {args.baseline_src}: no lore_core there")

    root = Path(tempfile.mkdtemp(prefix="lore-commands-"))
    targets = [Target("now", None, args.store, root)]
    if args.baseline_src is not None:
        targets.append(Target("before", args.baseline_src.resolve(), args.store, root))
    session = _first_session(targets[0])
    reads = [
        ["status"],
        ["sessions", "--all"],
        ["show", session],
        ["knowledge", "list", "--all"],
        ["distillations"],
        ["search", args.query],
        ["recall", "--all", args.query],
    ]
    times: dict[tuple[str, str, str], list[float]] = {}
    rss: dict[tuple[str, str], float] = {}

    def measure(phase: str, commands: Sequence[Sequence[str]]) -> None:
        for _ in range(args.repeat):
            for command in commands:
                for target in targets:  # alternating: the load hits both alike
                    key = (
                        phase,
                        " ".join(command[:2]) if command[0] == "knowledge" else command[0],
                        target.name,
                    )
                    times.setdefault(key, []).append(target.run(command))

    try:
        measure("-", [["--version"]])
        measure("no gateway", reads)
        for target in targets:
            target.start_gateway()
            target.settle()
            time.sleep(2.0)
            rss[("idle", target.name)] = target.rss_mb()
        measure("gateway", reads)
        for target in targets:
            rss[("after recall", target.name)] = target.rss_mb()
    finally:
        for target in targets:
            target.stop_gateway()
        shutil.rmtree(root, ignore_errors=True)

    names = [t.name for t in targets]
    print(f"lore commands on a copy of {args.store} (median of {args.repeat}, seconds)")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'phase':<11} {'command':<15} " + " ".join(f"{n:>8}" for n in names) + "  target")
    for phase, command, name in times:
        if name != names[0]:
            continue
        target_s = TARGET_WITHOUT_GATEWAY_S if phase == "no gateway" else TARGET_WITH_GATEWAY_S
        row = [statistics.median(times[(phase, command, n)]) for n in names]
        verdict = "met" if row[0] <= target_s else "MISSED"
        print(
            f"{phase:<11} {command:<15} "
            + " ".join(f"{v:8.2f}" for v in row)
            + f"  <= {target_s:g} {verdict}"
        )
    for moment in ("idle", "after recall"):
        row = [rss[(moment, n)] for n in names]
        line = f"gateway RSS {moment:<15} " + " ".join(f"{v:6.0f} MB" for v in row)
        if moment == "idle":
            line += f"  <= {TARGET_IDLE_RSS_MB} {'met' if row[0] <= TARGET_IDLE_RSS_MB else 'MISSED'}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
