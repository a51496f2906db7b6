"""Operators in the test lab run from compiled bytecode, as they do in their images.

The images compile every module when they are built (`UV_COMPILE_BYTECODE=1` in operators/Dockerfile). A
process that finds no bytecode compiles each module it imports, and holds the memory that took until its
heap is next trimmed: libvirt-vm, whose libvirt bindings are one 391 KB module, measured 93.5 MiB resident
after its imports from source against 84.5 from bytecode, and its peak in `make bench-fleet N=100` fell
from 110.1-111.8 MiB (three runs) to 103.1 (one run); once idle, after the trim, the two hardly differ.
Where PYTHONDONTWRITEBYTECODE is set (as on this project's CI machines) no bytecode is ever cached, so the
lab compiles the interpreter's library, the environment's packages and capfleet's sources into a cache of
its own ($CAPFLEET_CACHE/pycache-<tag>, by PYTHONPYCACHEPREFIX) once per test session, and starts
operators with it: about 25 s the first time on a machine, 7 s once up to date.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from capfleet_e2e.kubebin import cache_root


def source_roots() -> list[str]:
    """Where this interpreter imports from: its library, the environment's packages, and each `src`
    directory on the path (capfleet's editable packages)."""
    paths = sysconfig.get_paths()
    roots = [paths["stdlib"], paths["purelib"], paths["platlib"]]
    roots += [entry for entry in sys.path if entry and Path(entry).name == "src" and Path(entry).is_dir()]
    return list(dict.fromkeys(roots))


@functools.cache
def compiled_env() -> dict[str, str]:
    """The environment an operator gets to run from the lab's compiled bytecode, compiled first."""
    env = {
        "PYTHONPYCACHEPREFIX": str(cache_root() / f"pycache-{sys.implementation.cache_tag}"),
        "PYTHONDONTWRITEBYTECODE": "",  # empty is unset: what is not compiled yet is cached when imported
    }
    # Not checked: a package's stray file that does not compile (a Python 2 example) fails compileall
    # without harming anything an operator imports.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", *source_roots()],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return env
