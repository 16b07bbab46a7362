"""A reader that goes away (`lore config | head -1`) ends the command quietly: exit 0, no
traceback."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest

F_SETPIPE_SZ = 1031  # Linux: fcntl.F_SETPIPE_SZ (Python 3.10+ names it on Linux only)


@pytest.mark.skipif(sys.platform != "linux", reason="the pipe's size is set with a Linux fcntl")
def test_a_closed_pipe_ends_the_command_quietly(lore_env: dict[str, str]) -> None:
    read_end, write_end = os.pipe()
    # The smallest pipe (one page), so the command's output does not fit in it.
    fcntl.fcntl(write_end, getattr(fcntl, "F_SETPIPE_SZ", F_SETPIPE_SZ), 4096)
    process = subprocess.Popen(
        [sys.executable, "-m", "lore_core.cli", "config"],
        stdout=write_end,
        stderr=subprocess.PIPE,
        env={**os.environ, **lore_env},
    )
    os.close(write_end)
    first = os.read(read_end, 100)
    os.close(read_end)  # the reader goes away, as `head -1` does
    _, stderr = process.communicate(timeout=60)
    assert first, "the command printed nothing"
    assert b"Traceback" not in stderr, stderr.decode()
    assert process.returncode == 0, stderr.decode()
