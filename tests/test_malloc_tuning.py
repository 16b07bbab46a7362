"""`lore serve` bounds what glibc's malloc keeps: two arenas, large blocks in pages of their
own, and free heap pages handed back by a trimmer thread (lore_core/http/serve.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")

# Runs in a process of its own: it frees ~50 MB in the middle of the heap (a block kept after
# them stops glibc from trimming the top by itself), so only a trim gives the pages back.
_SCRIPT = textwrap.dedent(
    """
    import ctypes, threading, time
    from lore_core.http.serve import _glibc, start_malloc_trimmer, tune_malloc

    def rss_mib():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

    libc = _glibc()
    if libc is None:
        print("no-glibc"); raise SystemExit
    tune_malloc()
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(1000) for _ in range(50_000)]
    for b in blocks:
        ctypes.memset(b, 1, 1000)  # touched: resident
    keep = libc.malloc(1000)
    for b in blocks:
        libc.free(b)
    before = rss_mib()
    stop = threading.Event()
    thread = start_malloc_trimmer(stop, every=0.05)
    deadline = time.monotonic() + 5
    while rss_mib() > before - 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    after = rss_mib()
    stop.set()
    thread.join(2)
    print(f"{before:.0f} {after:.0f} {thread.is_alive()}")
    """
)


def test_the_trimmer_gives_freed_heap_pages_back_and_stops() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    if out == ["no-glibc"]:
        pytest.skip("not glibc")
    before, after, alive = float(out[0]), float(out[1]), out[2]
    assert before - after >= 30, f"RSS {before} -> {after} MiB: the freed pages were not given back"
    assert alive == "False"
