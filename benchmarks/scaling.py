#!/usr/bin/env python
"""Trials per hour against the number of workers on a multi-node Ray cluster (simulated on one machine).

A ``ray.cluster_utils.Cluster`` with a head node that runs no trials
(``num_cpus=0``) and worker nodes that advertise 4 CPUs each (more than the
machine has: the trials only sleep) stands in for a cluster.  For each W in
1, 2, 4, 8 a search connects to it with ``--address`` and runs N = ``--rounds``
x W trials of the hidden ``--evaluator sleep:S`` on W workers (one CPU each),
so the work is sleep and the measurement isolates orchestration: the driver,
Ray's scheduling across nodes, and the Optuna study (SQLite).  The clock runs
from the start of the search loop (every worker answering, the study created)
to the moment the last trial is told.

    trials per hour = R / loop time * 3600   (R: trials that ran on a worker)
    of ideal        = ceil(R / W) * S / loop time
    efficiency      = of ideal (W workers) / of ideal (1 worker)

R excludes duplicates of an earlier architecture, which end at once without
a worker; when R is not a multiple of W the last round leaves slots idle,
which ``ceil(R / W) * S`` (the best any scheduler could do) accounts for, so
the efficiency measures the orchestration, not the trial count.  Each
search runs in its own process against the same cluster; the W values take
turns over ``--repeats`` rounds and the table gives medians.  Run::

    .venv/bin/python benchmarks/scaling.py [--sleep 3] [--rounds 6] [--repeats 3] [--no-write]

On this machine Cluster must be given no node IP address (it binds to the
machine's address and that works).  It prints the table and replaces the
``scaling`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402
import _timing  # noqa: E402

SECTION = "scaling"
SPACE = ROOT / "benchmarks" / "spaces" / "small.yaml"
CPUS_PER_NODE = 4


def measure(address: str, workers: int, trials: int, sleep: float) -> dict[str, Any]:
    """One search against the cluster at ``address``, in this process."""
    runs = tempfile.mkdtemp(prefix="nas-scaling-")
    study, marks = _timing.timed_search(
        [
            "search",
            "--space",
            str(SPACE),
            "--trials",
            str(trials),
            "--workers",
            str(workers),
            "--evaluator",
            f"sleep:{sleep:g}",
            "--no-tensorboard",
            "--runs-dir",
            runs,
            "--study",
            "bench",
            "--address",
            address,
            "--device",
            "cpu",
        ]
    )
    ran = [t for t in study.trials if "worker_pid" in t.user_attrs]
    nodes = Counter(t.user_attrs.get("worker_node", "?") for t in ran)
    return {
        "loop": marks["last_told"] - marks["ready"],
        "startup": marks["ready"] - marks["start"],
        "ran": len(ran),
        "trials": len(study.trials),
        "nodes": sorted(nodes.values(), reverse=True),
    }


def run_one(address: str, workers: int, trials: int, sleep: float) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--one",
        json.dumps([address, workers, trials, sleep]),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=1800, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"W={workers}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def start_cluster(worker_nodes: int) -> Any:
    from ray.cluster_utils import Cluster

    # No node IP address: on this machine the Cluster binds to the machine's own address.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(worker_nodes):
        cluster.add_node(num_cpus=CPUS_PER_NODE)
    cluster.wait_for_nodes()
    return cluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4,8", help="worker counts (default 1,2,4,8)")
    parser.add_argument("--sleep", type=float, default=3.0, help="seconds per trial (default 3)")
    parser.add_argument("--rounds", type=int, default=6, help="trials per worker (default 6)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default 3)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one search, JSON on stdout
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*json.loads(args.one))), flush=True)
        return 0

    counts = [int(w) for w in args.workers.split(",")]
    nodes = -(-max(counts) // CPUS_PER_NODE)
    t0 = time.perf_counter()
    cluster = start_cluster(nodes)
    print(
        f"cluster up in {time.perf_counter() - t0:.1f} s at {cluster.address}: head (0 CPUs) + "
        f"{nodes} nodes x {CPUS_PER_NODE} CPUs",
        file=sys.stderr,
    )
    results: dict[int, list[dict[str, Any]]] = {w: [] for w in counts}
    try:
        for r in range(args.repeats):
            for w in _doc.rotated(counts, r):
                res = run_one(cluster.address, w, args.rounds * w, args.sleep)
                results[w].append(res)
                print(
                    f"round {r + 1}/{args.repeats} W={w}: {res['ran']} ran in {res['loop']:.2f} s "
                    f"on nodes {res['nodes']}",
                    file=sys.stderr,
                )
    finally:
        cluster.shutdown()

    def tph(res: dict[str, Any]) -> float:
        return res["ran"] / res["loop"] * 3600

    def of_ideal(res: dict[str, Any], w: int) -> float:
        return -(-res["ran"] // w) * args.sleep / res["loop"]

    ideal_1 = _doc.median([of_ideal(x, counts[0]) for x in results[counts[0]]])
    efficiency = {w: _doc.median([of_ideal(x, w) for x in results[w]]) / ideal_1 for w in counts}
    rows = []
    for w in counts:
        last = results[w][-1]
        rows.append(
            [
                w,
                f"{last['ran']} of {last['trials']}",
                f"{_doc.median([x['loop'] for x in results[w]]):.2f}",
                f"{_doc.median([tph(x) for x in results[w]]):,.0f}",
                f"{w * 3600 / args.sleep:,.0f}",
                f"{100 * _doc.median([of_ideal(x, w) for x in results[w]]):.1f}%",
                f"{100 * efficiency[w]:.1f}%",
                " + ".join(str(n) for n in last["nodes"]),
                f"{_doc.median([x['startup'] for x in results[w]]):.1f}",
            ]
        )
    md = _doc.markdown_table(
        [
            "workers",
            "trials ran",
            "loop time (s)",
            "trials/hour",
            "W x 3600 / S",
            "of ideal",
            "efficiency vs linear",
            "trials per node",
            "startup (s)",
        ],
        rows,
    )
    eff8 = efficiency.get(8)
    verdict = (
        f"Target (issue 6): at least 90% of linear at 8 workers: {100 * eff8:.1f}% "
        f"({'met' if eff8 >= 0.9 else 'missed'})."
        if eff8 is not None
        else ""
    )
    print(md)
    print(verdict)
    body = (
        "## Scaling with workers (`benchmarks/scaling.py`)\n\n"
        f"{_doc.provenance()}\n\n"
        f"A Ray cluster simulated on this machine with `ray.cluster_utils.Cluster`: a head node with "
        f"0 CPUs (runs no trials) and {nodes} worker nodes advertising {CPUS_PER_NODE} CPUs each (more "
        "than the machine has, which is fine because the trials only sleep). Each search joins it with "
        f"`--address`, runs {args.rounds} trials per worker of `--evaluator sleep:{args.sleep:g}` on W "
        "workers (one CPU each) over the default space (NSGA-II, SQLite), and is timed from the start "
        "of the search loop (every worker answering, the study created) to the moment the last trial "
        "is told. *trials/hour* counts the R trials that ran on a worker (duplicates of an earlier "
        "architecture end at once without one); *of ideal* = ceil(R/W) x S / loop time, the best any "
        "scheduler could do with R trials on W slots (when R is not a multiple of W the last round "
        "leaves slots idle); *efficiency vs linear* = *of ideal* at W / *of ideal* at 1 worker. "
        "*startup* (connect, place and start the actors, create the "
        "study) is paid once per search and is not in the loop. "
        f"Medians of {args.repeats} interleaved repeats, each search in its own process.\n\n"
        f"{md}\n\n{verdict}\n"
    )
    if not args.no_write:
        _doc.write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
