"""nas.execution.ray_start: a local Ray whose start is cut short (Ctrl-C, SIGTERM) leaves nothing running.

Interrupted inside Ray's node start, ``ray.shutdown()`` knows no process yet, and Ray's dashboard and
runtime-env agents (which ignore SIGTERM) outlived the driver for good.  A stand-in for the ``ray``
module starts such processes and is interrupted at that exact point: no real Ray is needed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nas.execution.ray_start import start_ray

#: a process that ignores SIGTERM, with a child that does too (as raylet and its agents)
AGENT = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "if len(sys.argv) > 1:\n"
    "    child = subprocess.Popen([sys.executable, '-c', sys.argv[1]])\n"
    "    print(child.pid, flush=True)\n"
    "time.sleep(600)\n"
)


class _RayCutShort:
    """The part of the ``ray`` module ``start_ray`` uses; ``init`` starts processes, then is interrupted."""

    class exceptions:  # noqa: N801 - as ray.exceptions
        RayError = RuntimeError

    def __init__(self) -> None:
        self.started: list[int] = []
        self.shutdowns = 0

    def init(self, **kwargs: Any) -> None:
        node = subprocess.Popen([sys.executable, "-c", AGENT, AGENT], stdout=subprocess.PIPE, text=True)
        assert node.stdout is not None
        self.started = [node.pid, int(node.stdout.readline())]
        self.node = node
        raise KeyboardInterrupt  # Ctrl-C (or SIGTERM's exception) inside Ray's node start

    def shutdown(self) -> None:
        self.shutdowns += 1  # Ray's own: knows nothing of a node whose start was cut short


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the processes it started through /proc (Linux)")
def test_a_local_start_cut_short_leaves_no_process_of_it_running() -> None:
    ray = _RayCutShort()
    try:
        with pytest.raises(KeyboardInterrupt):
            start_ray(ray, 1, 1.0, None, False)
        deadline = time.monotonic() + 30
        # the direct child is reaped here (poll), its child by init
        while (ray.node.poll() is None or any(map(_alive, ray.started))) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in ray.started if _alive(pid)]
        assert ray.shutdowns == 1
    finally:
        for pid in ray.started:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
