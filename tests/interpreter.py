"""A fresh interpreter running this checkout's code: for tests that send it a real signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def answer_sigint() -> None:
    """In a child before it runs: Ctrl-C at its default.  A suite started in the background (``cmd &``
    in a script) runs with SIGINT ignored, and a child inherits that: it would never see a Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_python(code: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    """``python -c code args...`` with this checkout first on the path, text streams, SIGINT answered
    (:func:`answer_sigint`); ``popen`` is passed on (``stdout``, ``stderr``, ``cwd``, ``preexec_fn``)."""
    popen.setdefault("preexec_fn", answer_sigint)
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        **popen,
    )
