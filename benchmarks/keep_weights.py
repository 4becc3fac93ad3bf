#!/usr/bin/env python
"""What keeping the best models costs a search (``resources.keep_weights``): bytes and seconds.

The same search (the shipped ``default`` space, Shakespeare, local Ray with 2
workers, fixed seed, no TensorBoard) runs with ``--keep-weights 0`` and
``--keep-weights 2``, taking turns over ``--repeats`` rounds, each in a fresh
process (a fresh Ray).  From the ``weights:`` line of the search's summary: the
checkpoints fetched from the workers (bytes, seconds), written, deleted, and
what is kept at the end.  The worker's own cost, making the checkpoint bytes
(``nas.files.checkpoint.checkpoint_bytes``), is timed here on each kept model (median
of 5).  Whole-search wall times are given too; on a shared machine they vary by
more than the overhead.  Run::

    .venv/bin/python benchmarks/keep_weights.py [--repeats 2] [--trials 8] [--budget-flops 3e11]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def search(tmp: Path, keep: int, trials: int, flops: float) -> tuple[float, str, Path]:
    runs = tmp / f"runs-{keep}-{time.monotonic_ns()}"
    space = str(ROOT / "benchmarks" / "spaces" / "small.yaml")
    argv = [sys.executable, str(ROOT / "run_search.py"), "search", "--space", space, "--study", "bench",
            "--runs-dir", str(runs), "--trials", str(trials), "--budget-flops", f"{flops:g}",
            "--workers", "2", "--seed", "0", "--no-tensorboard", "--keep-weights", str(keep)]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=tmp)
    seconds = time.perf_counter() - started
    line = next((x for x in done.stdout.splitlines() if x.startswith("weights:")), "")
    return seconds, line, runs / "bench" / "weights"


def serialize_seconds(path: Path) -> float:
    import nas
    from nas.files.checkpoint import checkpoint_bytes, load_checkpoint

    doc = load_checkpoint(path)
    model = nas.load_model(path)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        checkpoint_bytes(model, recipe=doc["recipe"], budget=doc["budget"], metrics=doc["metrics"])
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--budget-flops", type=float, default=3e11)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    walls: dict[int, list[float]] = {0: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for keep in (0, 2):
                seconds, line, weights = search(Path(tmp), keep, args.trials, args.budget_flops)
                walls[keep].append(seconds)
                print(f"round {r} keep {keep}: {seconds:.1f} s  {line}", flush=True)
                if keep and weights.is_dir():
                    for f in sorted(weights.glob("trial_*.safetensors")):
                        size = f.stat().st_size
                        print(f"  {f.name}: {size:,} bytes; making its bytes in a worker: "
                              f"{serialize_seconds(f) * 1e3:.1f} ms", flush=True)  # fmt: skip
    for keep, values in walls.items():
        print(f"keep {keep}: whole search {statistics.median(values):.1f} s (median of {len(values)}: "
              f"{', '.join(f'{v:.1f}' for v in values)})")  # fmt: skip


if __name__ == "__main__":
    main()
