"""Shared helpers of the benchmark scripts: their own section of docs/BENCHMARKS.md, machine facts.

Every script owns one section of ``docs/BENCHMARKS.md``, delimited by
``<!-- BEGIN name -->`` and ``<!-- END name -->``; writing it replaces that
section only (or appends it when it is new), so the scripts never overwrite
each other.  Each section says the command that made it, the machine and the
date (:func:`provenance`).
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "BENCHMARKS.md"
HEADER = "# Benchmarks\n\nEach section is written by its script.\n"


def write_section(name: str, body: str, path: Path = DOC) -> None:
    """Replace the ``name`` section of ``path`` with ``body`` (appended if the section is new)."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else HEADER
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(
        f"wrote the {name} section of {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}",
        file=sys.stderr,
    )


def command() -> str:
    """The command line that ran this script, as it would be typed from the repository root."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    return " ".join([".venv/bin/python", shlex.quote(str(shown)), *map(shlex.quote, sys.argv[1:])])


def machine(threads: int | None = None) -> str:
    """CPU count and model, torch threads, torch / Python versions, in one phrase."""
    import torch

    cpu = _cpu_model() or platform.machine()
    n = threads if threads is not None else torch.get_num_threads()
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {n} torch thread(s), torch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )


def provenance(threads: int | None = None) -> str:
    """One sentence: the command, the machine and the date."""
    return (
        f"Command: `{command()}`. Machine: {machine(threads)}. Measured {datetime.date.today().isoformat()}."
    )


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def rotated(names: Sequence[str], r: int) -> list[str]:
    """``names`` starting at position ``r`` (interleaved repeats: each contender takes each slot)."""
    k = r % len(names)
    return [*names[k:], *names[:k]]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None) -> str:
    """A markdown table; ``align`` is one letter per column (l or r), default l then r."""
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
