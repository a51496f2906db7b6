"""Giving the memory Python frees back to the system, so an operator's idle RSS is what it holds.

CPython hands every object larger than 512 bytes (JSON text, dict tables of large objects, TLS buffers)
to the C library's malloc. glibc keeps what is freed for reuse and returns it to the system only from
the top of each heap, so after a burst (hundreds of machines provisioned at once) a few live objects
scattered through the heaps pin the rest: the process stays at its peak. `malloc_trim(0)` releases the
free pages wherever they are, so an idle operator shrinks back after a burst. It is cheap (milliseconds
to give back a burst's worth, next to nothing when there is nothing to give), so every operator trims once
a minute (`keep_trimmed`), in a thread: malloc_trim releases the GIL but holds each heap's lock while it
walks it.

Other C libraries (musl, macOS) have no malloc_trim: there `trimmer()` is None and nothing runs.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
from collections.abc import Callable

from capfleet import metrics

TRIM_SECONDS = 60.0
"""How often an operator trims its heap."""

logger = logging.getLogger(__name__)
_PAGE = os.sysconf("SC_PAGE_SIZE")


def trimmer() -> Callable[[], None] | None:
    """glibc's `malloc_trim(0)`, or None where the C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols, its C library's among them
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def trim_all() -> None:
        trim(0)

    return trim_all


def resident_bytes() -> int:
    """This process's resident set size now (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def trim_once(trim: Callable[[], None]) -> int:
    """Trim, and return how many bytes of resident memory that gave back (0 if none)."""
    before = resident_bytes()
    trim()
    returned = max(0, before - resident_bytes())
    metrics.HEAP_RETURNED.inc(returned)
    return returned


async def keep_trimmed(interval: float = TRIM_SECONDS) -> None:
    """Trim every `interval` seconds until cancelled; returns at once where there is no malloc_trim."""
    trim = trimmer()
    if trim is None:
        logger.info("no malloc_trim in this C library: freed memory is returned as it allows")
        return
    while True:
        await asyncio.sleep(interval)
        returned = await asyncio.to_thread(trim_once, trim)
        if returned:
            logger.debug("gave %.1f MiB of freed heap back to the system", returned / 2**20)
