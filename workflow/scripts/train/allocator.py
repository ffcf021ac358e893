"""glibc's malloc kept from handing freed memory back to the kernel
(train.speed.allocator `keep`).

torch's CPU tensors come from malloc. By default glibc serves a large
block (above a threshold that grows to at most 32 MB) with its own mmap and
unmaps it when freed, and gives the top of its heap back once more than
twice that threshold is free there. A training step frees and allocates
the same activations every step, so each step faults them in again as
fresh pages the kernel must zero (clear_page_erms in a profile). Here the
threshold is fixed at glibc's largest, the heap is never trimmed, and it
grows in generous steps: freed blocks are reused as they are. Nothing in
the arithmetic changes; a rank's resident memory stays at its peak instead
of falling between steps.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 << 20  # glibc's ceiling on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 2 ** 31 - 1  # mallopt takes an int: 2 GiB free at the top before any trim
TOP_PAD = 256 << 20  # virtual: a page costs nothing until it is touched
SETTINGS = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD))


def _mallopt():
    try:
        function = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return None
    function.argtypes, function.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return function


def _apply(settings) -> str | None:
    mallopt = _mallopt()
    if mallopt is None:
        return "this C library has no mallopt (not glibc)"
    for parameter, value in settings:
        if mallopt(parameter, value) != 1:
            return f"mallopt({parameter}, {value}) was refused"
    return None


def keep_freed() -> str | None:
    """Sets this process's malloc to keep what it frees; None, or why not."""
    return _apply(SETTINGS)


def release_freed() -> str | None:
    """glibc's defaults back (the test's contrast): blocks above 128 KB
    mapped and unmapped one by one, the heap trimmed above 128 KB free."""
    return _apply(((M_MMAP_THRESHOLD, 128 << 10), (M_TRIM_THRESHOLD, 128 << 10), (M_TOP_PAD, 128 << 10)))
