"""Run a command as the reaper of every process it orphans: for a test libvirtd whose QEMUs are counted.

libvirtd starts each QEMU as a daemon (forked twice), so QEMU is nobody's child: the kernel hands it to
the nearest ancestor marked as a "child subreaper", else to init. `make bench-fleet` counts the CPU of
its whole process tree, QEMU included, so it starts the scale lab's libvirtd under this: QEMUs are then
this process's children while they run and, once reaped here, in its own figure of reaped children's CPU.
Reaping at once matters as much: libvirtd knows a killed QEMU is gone only when its pid is (a zombie
still answers `kill(pid, 0)`), so an ancestor that adopts QEMUs and never reaps them makes each domain's
destroy wait through libvirtd's whole kill sequence (over a minute per call in the first bench run).

Usage: `python -m capfleet_e2e.libvirt.reaper COMMAND [ARG...]`. SIGTERM and SIGINT are passed on to
COMMAND; it exits with COMMAND's status once COMMAND has exited.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m capfleet_e2e.libvirt.reaper COMMAND [ARG...]", file=sys.stderr)
        return 2
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    child = os.fork()
    if child == 0:
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: os.kill(child, received))
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if pid == child:
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
