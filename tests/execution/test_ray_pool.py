"""nas.execution.ray_pool: the local Ray a pool starts is stopped whatever stops the pool.

Each check runs in a fresh interpreter with a local Ray of its own (the test session's shared Ray is
another process tree), and reads the kernel's view of the process (``/proc``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from interpreter import start_python

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc (Linux)"),
]

CHECKS = """
import os, signal, sys, time
from nas.execution.ray_pool import RayPool
from nas.execution.ray_start import descendants


def sigterm_caught():
    # the kernel's view: Python's signal.getsignal() reports its own handler even when C reset it
    line = next(l for l in open("/proc/self/status") if l.startswith("SigCgt"))
    return bool(int(line.split()[1], 16) & 1 << (signal.SIGTERM - 1))


def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def settled(pids):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(map(alive, pids)):
        time.sleep(0.2)
    return sorted(filter(alive, pids))


signal.signal(signal.SIGTERM, lambda signum, frame: None)  # a command's handler (nas.commands.stopping)
pool = RayPool(1)
started = descendants(os.getpid())
pool.shutdown()
print("sigterm caught after shutdown:", sigterm_caught())
print("left after shutdown:", settled(started))


def cut_short(self, n_workers):
    started.update(descendants(os.getpid()))  # Ray is up
    raise KeyboardInterrupt  # Ctrl-C before the pool exists: nobody else can stop its Ray


started = set()
RayPool._start_slots = cut_short
try:
    RayPool(1)
except KeyboardInterrupt:
    pass
import ray
print("initialized after a start cut short:", ray.is_initialized())
print("left after a start cut short:", settled(started))
"""


def test_the_local_ray_is_stopped_and_sigterm_still_caught_after_it() -> None:
    """``ray.shutdown()`` leaves SIGTERM at its default action in C (Python still reports its handler):
    a SIGTERM after a search's Ray was down killed the driver outright (exit -15, no line); and a
    pool whose start was cut short after Ray was up left Ray running."""
    proc = start_python(CHECKS, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert out.splitlines() == [
        "sigterm caught after shutdown: True",
        "left after shutdown: []",
        "initialized after a start cut short: False",
        "left after a start cut short: []",
    ], out + err[-3000:]
