"""A stand-in coding client for the ``lore run`` tests (installed on PATH as ``claude``).

fake_client.py call REPORT EXIT
    Write the argv, the environment Lore set and the umask to REPORT (JSON), send one Messages
    request to $ANTHROPIC_BASE_URL, print the answer, exit with EXIT.
fake_client.py signals RECORD READY [SENTINEL]
    Append the name of every SIGINT/SIGTERM/SIGHUP received to RECORD; die by SIGTERM or
    SIGHUP, keep running after SIGINT. With SENTINEL: first fork a sentinel that stays in
    Lore's process group and writes SENTINEL when a SIGINT reaches that group, then move
    to a process group of our own (so the terminal's Ctrl+C no longer reaches us).
    Touch READY when set up.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

WATCHED = (
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_AUTO_COMPACT",
    "NO_PROXY",
)


def call(report: str, code: str) -> int:
    umask = os.umask(0)
    os.umask(umask)
    seen = {"argv": sys.argv, "env": {k: os.environ.get(k) for k in WATCHED}, "umask": umask}
    Path(report).write_text(json.dumps(seen))
    body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "ping"}]}
    request = urllib.request.Request(
        os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-api-key": "sk-ant-test-key"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as response:
        print(json.loads(response.read())["content"][0]["text"], flush=True)
    return int(code)


def signals(record: str, ready: str, sentinel: str | None) -> int:
    if sentinel is not None:

        def noticed(signum: int, frame: object) -> None:
            Path(sentinel).write_text("SIGINT")
            os._exit(0)

        # Set before the fork, so the sentinel has it from its first instant on.
        signal.signal(signal.SIGINT, noticed)
        if os.fork() == 0:
            signal.alarm(60)  # never outlive the test
            while True:
                signal.pause()
        os.setpgid(0, 0)

    def received(signum: int, frame: object) -> None:
        with open(record, "a") as out:
            out.write(signal.Signals(signum).name + "\n")
        if signum != signal.SIGINT:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, received)
    Path(ready).touch()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return 99


def main() -> int:
    mode, *args = sys.argv[1:]
    if mode == "call":
        return call(*args)
    if mode == "signals":
        return signals(args[0], args[1], args[2] if len(args) > 2 else None)
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
