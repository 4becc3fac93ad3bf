#!/usr/bin/env python
"""How long the read commands take from a cold interpreter, and what they import.

Makes a small study (10 trials, the inspection tests' fixture), then runs ``best``,
``show``, ``show --trial`` and ``plot`` each in a fresh interpreter, ``--repeats``
times, and reports the fastest wall time with whether torch, Ray or the trainer
were imported.  ``best``, ``show`` and ``plot`` should import none of them (the
read side is kept torch-free: ``nas/search/reports/``); ``show --trial`` loads the
block formulas for its per-layer FLOPs.  Run::

    .venv/bin/python benchmarks/read_side.py [--repeats 3]

It prints a markdown table and replaces its own section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "inspect"))

from _doc import markdown_table, provenance, write_section  # noqa: E402
from inspect_studies import fill, make_study  # noqa: E402

SECTION = "read_side"
PROBE = (
    "import sys\n"
    "from nas.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "heavy = [m for m in ('torch', 'ray', 'evaluators.lm') if m in sys.modules]\n"
    "print('IMPORTED', ','.join(heavy) or '-', file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def timed(argv: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{argv}: exit {out.returncode}\n{out.stderr}")
    return seconds, out.stderr.rsplit("IMPORTED ", 1)[1].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        study = make_study(runs, "bench")
        fill(study)
        trial = next(t.number for t in study.trials if t.state.name == "COMPLETE")
        where = ["--study", "bench", "--runs-dir", str(runs)]
        cases = {
            "best": ["best", *where],
            "show": ["show", *where],
            "show --trial N": ["show", *where, "--trial", str(trial)],
            "plot": ["plot", *where, "--out", str(Path(tmp) / "figs"), "--force"],
        }
        rows = []
        for name, argv in cases.items():
            runs_of = [timed(argv, Path(tmp)) for _ in range(args.repeats)]
            rows.append([f"`{name}`", f"{min(s for s, _ in runs_of):.2f}", runs_of[0][1]])
    table = markdown_table(["command", "seconds (fastest)", "imported of torch, ray, trainer"], rows)
    print(table)
    body = (
        "## Read commands from a cold interpreter (`benchmarks/read_side.py`)\n\n"
        f"{provenance()}\n\n{table}\n\n"
        "Before the read side was kept torch-free (2026-11-25), `best` and `show` imported torch "
        "and took 3.8-4.1 s here; importing torch alone takes about 2 s of that.\n"
    )
    write_section(SECTION, body)


if __name__ == "__main__":
    main()
