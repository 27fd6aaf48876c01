"""glibc's malloc arenas capped for the daemon and its children."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from kdiag.core import malloc


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's arena cap is glibc's")
def test_the_arena_cap_takes_on_glibc():
    assert malloc.limit_arenas(2)


@pytest.mark.integration
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's arena cap is glibc's")
def test_threads_share_the_capped_arenas():
    # Eight threads allocating at once each get an arena of their own uncapped; capped at two, they share the main
    # heap (brk) and one more: an arena beside the main one is an anonymous mapping at a 64 MB-aligned address.
    program = r"""
import ctypes, sys, threading
from kdiag.core import malloc
if sys.argv[1] == "capped":
    malloc.limit_arenas(2)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
barrier = threading.Barrier(8)
def work():
    barrier.wait()
    for _ in range(20000):
        libc.free(ctypes.c_void_p(libc.malloc(1000)))
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
arenas = sum(1 for line in open("/proc/self/maps") if int(line.split()[0].split("-")[0], 16) % (64 << 20) == 0
             and "rw-p" in line and len(line.split()) == 5)
print(arenas)
"""
    counts = {mode: int(subprocess.run([sys.executable, "-c", program, mode], capture_output=True, text=True,
                                       check=True).stdout) for mode in ("capped", "free")}
    assert counts["capped"] <= 1 < counts["free"]


@pytest.mark.integration
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_gives_back_the_free_heap_under_a_live_block():
    # 200 MB in 64 KB blocks (below the mmap threshold: on the heap), one block allocated after them kept: free()
    # cannot shrink the heap past it, malloc_trim gives the free pages back all the same.
    program = r"""
import ctypes
from kdiag.core import malloc
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) // 1024
blocks = [libc.malloc(64 << 10) for _ in range(3200)]
for b in blocks:
    ctypes.memset(b, 1, 64 << 10)
pin = libc.malloc(64 << 10)
for b in blocks:
    libc.free(ctypes.c_void_p(b))
before = rss()
trimmed = malloc.trim()
print(before, rss(), int(trimmed))
"""
    before, after, trimmed = map(int, subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                                                     check=True).stdout.split())
    assert trimmed and before - after > 150, (before, after)
