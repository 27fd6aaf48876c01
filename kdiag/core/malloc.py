"""glibc's malloc tuned for a long-lived daemon with a few threads: two arenas, not eight per core, trimmed after bulk."""

from __future__ import annotations

import ctypes
from typing import Any

M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)
ARENAS = 2
# An answer or a fetch this large leaves megabytes of freed heap behind it (the marshalled admin state of 100,000
# partitions is ~20 MB): worth giving back to the kernel.
TRIM_AFTER_BYTES = 1 << 20


def _libc(name: str, *argtypes: Any) -> Any:
    """glibc's function `name` returning int, from this process's own symbols (dlopen of NULL: no library loaded from
    a path); None where libc has no such function (musl)."""
    try:
        return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)((name, ctypes.CDLL(None)))
    except (OSError, AttributeError):
        return None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas before threads start; whether it took (False where libc is not glibc).

    Each thread that allocates while another holds the main arena gets an arena of its own, up to eight per core, and
    an arena keeps what was freed in it: at 100,000 partitions the daemon's dozen threads held 130 MB in six arenas
    (pmap), most of it free. Python's own allocator serves small objects from its own mappings either way."""
    mallopt = _libc("mallopt", ctypes.c_int, ctypes.c_int)
    return mallopt is not None and bool(mallopt(M_ARENA_MAX, arenas))


def trim() -> bool:
    """Give the free pages inside the heap back to the kernel (glibc's malloc_trim); whether any were (False off glibc).

    free() returns memory to the kernel only from the top of the heap: the buffers of a large fetch, freed below live
    objects, otherwise stay in the process's RSS until the next fetch of that size reuses them."""
    malloc_trim = _libc("malloc_trim", ctypes.c_size_t)
    return malloc_trim is not None and bool(malloc_trim(0))
