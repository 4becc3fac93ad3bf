"""GPU packing: trials per hour of ``gpu.yaml``-sized candidates at 1, 2 and 4 trials per GPU.

Run on a CUDA machine::

    .venv/bin/python benchmarks/gpu_packing.py     # writes the gpu_packing section of docs/BENCHMARKS.md

For each packing k, one real search (``search_spaces/gpu.yaml``, the random
sampler with the same seed, so every setting trains the same candidates in the
same order) runs with ``--workers k --gpus-per-trial 1/k`` on a fresh local Ray.
Trials per hour counts finished trials over the span from the first trial's
start to the last one's end (Ray's start-up is left out); over-cap candidates
finish at once without training and are counted apart.  A trial that runs out
of GPU memory while sharing is retried alone (see docs/reliability.md); the
table says how often that happened.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from benchmarks._doc import ROOT, command, markdown_table, write_section  # noqa: E402


def run_search(k: int, args: argparse.Namespace, work: Path) -> optuna.Study:
    storage = f"sqlite:///{work}/pack{k}.db"
    argv = [
        sys.executable, str(ROOT / "run_search.py"), "search",
        "--space", str(ROOT / "search_spaces" / "gpu.yaml"),
        "--study", f"pack{k}", "--storage", storage, "--runs-dir", str(work / "runs"), "--no-tensorboard",
        "--trials", str(args.trials), "--budget-flops", f"{args.budget_flops:g}", "--sampler", "random",
        "--seed", str(args.seed), "--workers", str(k), "--gpus-per-trial", f"{1 / k:g}",
        "--cpus-per-trial", str(args.cpus_per_trial), *(["--compile"] if args.compile else []),
    ]  # fmt: skip
    print("$", " ".join(argv[1:]), flush=True)
    subprocess.run(argv, check=True)
    return optuna.load_study(study_name=f"pack{k}", storage=storage)


def row(k: int, study: optuna.Study) -> list[object]:
    trials = study.trials
    over = [t for t in trials if t.user_attrs.get("fail_reason", "").startswith("over cap")]
    trained = [t for t in trials if t not in over and "duplicate_of" not in t.user_attrs]
    complete = [t for t in trained if t.state == TrialState.COMPLETE]
    over_cap = len(over)
    starts = [t.datetime_start for t in trained if t.datetime_start]
    ends = [t.datetime_complete for t in trained if t.datetime_complete]
    span = (max(ends) - min(starts)).total_seconds() if starts and ends else float("nan")
    oom = sum(1 for t in trials for e in t.user_attrs.get("worker_errors", []) if "memory" in e)
    oom += sum(bool(t.user_attrs.get("retried_alone")) for t in trials)
    peak = max((t.user_attrs.get("peak_memory_bytes") or 0 for t in trials), default=0)
    tps = [t.user_attrs["tokens_per_s"] for t in complete if t.user_attrs.get("tokens_per_s")]
    return [
        k, f"{1 / k:g}", len(complete), over_cap, oom, f"{span:.0f}",
        f"{len(trained) / span * 3600:.0f}" if span == span and span > 0 else "-",
        f"{sum(tps) / len(tps):,.0f}" if tps else "-", f"{peak / 2**30:.1f}" if peak else "-",
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packing", default="1,2,4", help="trials per GPU to measure (default 1,2,4)")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--budget-flops", type=float, default=2e15)
    ap.add_argument("--cpus-per-trial", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_packing.py needs a CUDA GPU; none is visible here", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in (int(x) for x in args.packing.split(",")):
            rows.append(row(k, run_search(k, args, Path(tmp))))
            print(rows[-1], flush=True)
    header = ["trials/GPU", "--gpus-per-trial", "complete", "over cap", "OOM retries", "span s",
              "trials/hour", "mean tokens/s per trial", "peak GiB"]  # fmt: skip
    body = "\n".join(
        [
            "## GPU packing (`benchmarks/gpu_packing.py`)",
            "",
            f"{torch.cuda.get_device_name()}, torch {torch.__version__}; command `{command()}`. "
            f"A real search of `search_spaces/gpu.yaml` per row ({args.trials} trials, random sampler seed "
            f"{args.seed}: the same candidates in every row, {args.budget_flops:g} training FLOPs each, "
            "byte-level Shakespeare), on one GPU shared by k Ray workers. trials/hour counts trained trials "
            "(complete, pruned or failed after training) over the span from the first start to the last end.",
            "",
            markdown_table(header, rows),
        ]
    )
    print(body)
    if not args.no_write:
        write_section("gpu_packing", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
