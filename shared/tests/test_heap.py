"""The heap trim gives freed memory back: a fresh interpreter frees 120 MiB of objects that glibc keeps
(every fiftieth is kept alive, so no heap can shrink from its top), and `keep_trimmed` brings its resident
size back down. Run in a fresh interpreter so this one's heap plays no part."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from capfleet import heap

CHURN = """
import asyncio, json, threading, time
from capfleet import heap

baseline = heap.resident_bytes()
kept = []

def churn():
    blocks = [bytes(2048) for _ in range(60_000)]  # each larger than 512 bytes: glibc's, not Python's
    kept.extend(blocks[49::50])

worker = threading.Thread(target=churn)  # a thread of its own: its own glibc heap, as in a lane
worker.start()
worker.join()
freed = heap.resident_bytes()

async def trimmed(within):
    trimming = asyncio.create_task(heap.keep_trimmed(interval=0.05))
    deadline = time.monotonic() + within
    try:
        while heap.resident_bytes() > freed - 50 * 2**20 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        trimming.cancel()
    return heap.resident_bytes()

after = asyncio.run(trimmed(10.0))
print(json.dumps({"baseline": baseline, "freed": freed, "after": after, "kept": len(kept)}))
"""
MIB = 2**20


def glibc() -> bool:
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not glibc(), reason="malloc_trim is glibc's")
def test_glibc_has_a_trimmer() -> None:
    assert heap.trimmer() is not None


@pytest.mark.skipif(not glibc(), reason="malloc_trim is glibc's")
def test_keep_trimmed_returns_freed_memory() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHURN], capture_output=True, text=True, check=True, timeout=120
    )
    sizes = json.loads(done.stdout)
    assert sizes["kept"] == 1200
    # What the test rests on: glibc keeps the freed blocks resident by itself.
    assert sizes["freed"] - sizes["baseline"] > 80 * MIB, sizes
    assert sizes["after"] < sizes["freed"] - 50 * MIB, sizes


def test_resident_bytes_reads_this_process() -> None:
    assert 10 * MIB < heap.resident_bytes() < 8 * 2**30
