"""``probe``: score one architecture file on the capability probes (:mod:`evaluators.probes`).

The architecture is trained from scratch once per task with the probe's own protocol (the
file's ``recipe``, ``budget`` and ``data`` sections are not used; the task sets the vocabulary
and length).  Prints a table of task accuracies and their mean, the score; ``--json`` makes the
last line of stdout one JSON object (the result's metrics, with ``probe_score`` and
``probe_<task>``); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from evaluators.lm import stderr_log
from evaluators.probes import DEFAULT_STEPS, MAX_STEPS, TASKS, ProbeEvaluator, parse_tasks
from nas.commands.common import jsonable, non_empty, non_negative_int, positive_int
from nas.errors import ConfigError, UserError
from nas.files.archfile import load_arch_file
from nas.plural import plural
from nas.shipped import arch_path, shipped_archs
from nas.validate import MAX_SEED, MAX_THREADS, check_number


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "probe",
        help="score one architecture file on the synthetic capability probes (MAD's tasks, scaled down)",
        description="Train the architecture in an architecture file from scratch on each synthetic probe "
        "task (in-context recall, noisy and fuzzy recall, selective copying, compression, memorization; "
        "docs/probes.md) with the task's vocabulary and length, and print each task's test accuracy, its "
        "score (the accuracy; for the two in-context recall tasks, the share of the way from the no-recall "
        "rule's accuracy to 1) and the mean of the scores, the probe score.  The file's recipe, budget and "
        "data are not used.",
    )
    p.add_argument(
        "--arch",
        required=True,
        type=non_empty,
        metavar="FILE",
        help=f"architecture file (YAML), or a shipped one's name: {', '.join(shipped_archs())}",
    )
    p.add_argument(
        "--tasks",
        type=non_empty,
        default=None,
        metavar="TASK,TASK",
        help=f"comma-separated subset of the tasks (default: all): {', '.join(TASKS)}",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        default=DEFAULT_STEPS,
        help=f"optimizer steps per task (default {DEFAULT_STEPS})",
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of the data and the weights (default 0)"
    )
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="where to train (default auto: CUDA when available)",
    )
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON line on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        tasks = parse_tasks(args.tasks)
    except ConfigError as err:
        raise UserError(f"--tasks: {err.message}") from None
    threads = (
        None
        if args.threads is None
        else check_number(args.threads, "--threads", integer=True, low=1, high=MAX_THREADS)
    )
    check_number(args.seed, "--seed", integer=True, low=0, high=MAX_SEED)  # not the probe recipe's field
    check_number(args.steps, "--steps", integer=True, low=1, high=MAX_STEPS)
    doc = load_arch_file(arch_path(str(args.arch)))  # a missing or bad file is one line (UserError)
    evaluator = ProbeEvaluator(
        tasks, steps=args.steps, seed=args.seed, device=args.device, threads=threads, log=stderr_log
    )
    try:
        flops = evaluator.planned_flops(doc["arch"])
        # a line before the first task ends (one per task follows): a long run is not silent for minutes
        work = f"{plural(len(tasks), 'task')} x {plural(args.steps, 'step', fmt=',')}"
        stderr_log(f"probing: {work}, {flops:.3g} training FLOPs")
        result = evaluator.evaluate(doc["arch"])
    except ConfigError as err:  # an option that cannot hold at a task's length
        raise err.in_file(args.arch) from None
    metrics = result.to_dict()
    if args.json:
        print(json.dumps(jsonable(metrics), sort_keys=False))
    else:
        print(format_table(metrics, tasks))
    return 0


def _where(m: dict[str, Any]) -> str:
    """``cpu (1 thread)``: the device, and the CPU threads when the run recorded them."""
    threads = m.get("threads")
    return m["device"] if threads is None else f"{m['device']} ({plural(threads, 'thread')})"


def format_table(m: dict[str, Any], tasks: tuple[str, ...]) -> str:
    width = max(len(t) for t in (*tasks, "score"))
    lines = [f"{'task':<{width}}     score  accuracy", f"{'-' * width}  --------  --------"]
    for t in tasks:
        acc = m.get(f"probe_{t}_accuracy", m[f"probe_{t}"])  # recall: scored above its no-recall plateau
        plateau = m.get(f"probe_{t}_plateau")
        note = "" if plateau is None else f"  (no-recall rule {plateau:.3f}; above it is scored)"
        lines.append(f"{t:<{width}}  {m[f'probe_{t}']:8.3f}  {acc:8.3f}{note}")
    lines += [f"{'-' * width}  --------", f"{'score':<{width}}  {m['probe_score']:8.3f}"]
    lines.append(
        f"\n{m['arch_id']}: {plural(m['probe_steps'], 'step')} per task, {m['seconds']:.1f} s on {_where(m)}"
    )
    return "\n".join(lines)
