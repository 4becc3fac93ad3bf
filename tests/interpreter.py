"""A fresh interpreter running this checkout's code: for tests that send it a real signal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def start_python(code: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    """``python -c code args...`` with this checkout first on the path, text streams; ``popen`` is passed
    on (``stdout``, ``stderr``, ``cwd``, ``preexec_fn``)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        **popen,
    )
