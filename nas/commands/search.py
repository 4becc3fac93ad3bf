"""``run_search.py search``: launch or continue a search (and the no-argument demo)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nas.commands.common import (
    add_budget_args,
    add_device_arg,
    budget_from_args,
    non_negative_int,
    positive_int,
    positive_number,
)
from nas.errors import ConfigError, UserError

#: where the shipped spaces live when run from a checkout
SHIPPED_SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
DEFAULT_SPACE = "search_spaces/default.yaml"
DEFAULT_BUDGET = {"steps": 100}
DEMO_TRIALS = 12
DEMO_HURDLES = "0.5"  # the demo shows hurdles at work: weak candidates stop halfway


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="launch or continue a search",
        description="Search architectures: sample candidates from a YAML space, train each on the corpus "
        "with the same budget on Ray workers, and record everything in an Optuna study. Running it again "
        "with the same --study continues up to --trials finished trials.",
    )
    p.add_argument("--space", default=None, help=f"search-space YAML (default {DEFAULT_SPACE})")
    p.add_argument("--study", default=None, help="study name (default: the space's name)")
    p.add_argument("--storage", default=None, help="Optuna RDB URL (default sqlite:///RUNS/STUDY/study.db)")
    p.add_argument("--runs-dir", default="runs", help="where studies and TensorBoard logs go (default runs/)")
    p.add_argument("--trials", type=positive_int, default=None, help="finished trials wanted in the study (default 20)")
    add_budget_args(p)
    p.add_argument("--objective", choices=("loss+flops", "loss"), default="loss+flops",
                   help="loss+flops: Pareto front of validation loss and FLOPs/token (default); "
                   "loss: validation loss at the fixed budget")
    p.add_argument("--sampler", choices=("nsga2", "evolution", "tpe", "random"), default="nsga2")
    p.add_argument("--population", type=positive_int, default=None,
                   help="population size for nsga2/evolution (default: trials/3, between 4 and 50)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the sampler and of every trial's training")
    p.add_argument("--hurdles", default=None, help="budget fractions where weak candidates stop, e.g. 0.25,0.5")
    p.add_argument("--hurdle-percentile", type=positive_number, default=50.0,
                   help="a candidate continues if its loss is at or below this percentile of earlier "
                   "trials' losses at the hurdle (default 50: the median)")
    p.add_argument("--workers", type=positive_int, default=None, help="concurrent trials (default: one per CPU, at most 2)")
    p.add_argument("--cpus-per-trial", type=positive_number, default=1.0)
    p.add_argument("--gpus-per-trial", type=_non_negative_float, default=0.0, help="GPUs per trial (fractions allowed)")
    p.add_argument("--address", default=None, help="join an existing Ray cluster (e.g. 10.0.0.1:6379 or auto)")
    p.add_argument("--retries", type=non_negative_int, default=2, help="re-runs of a trial whose worker died")
    p.add_argument("--worker-timeout", type=positive_number, default=300.0, metavar="SECONDS",
                   help="a Ray worker that cannot be started or restarted within this time (its node is gone "
                   "and no other has room) is given up and the search goes on with fewer (default 300)")
    p.add_argument("--trial-timeout", type=positive_number, default=None, metavar="SECONDS",
                   help="a trial still running after this long (a hung worker) has its worker killed and "
                   "restarted and ends FAIL 'timed out' (default: no limit)")
    p.add_argument("--local", action="store_true",
                   help="no Ray: run the trials one at a time in this process (for debugging: breakpoints "
                   "and tracebacks work); results are the same as with one Ray worker")
    p.add_argument("--data", default=None, help="text file or directory to train on (default: Shakespeare)")
    p.add_argument("--no-tensorboard", action="store_true", help="do not write per-trial TensorBoard runs")
    p.add_argument("--ray-dashboard", action="store_true", help="start the Ray dashboard (off by default)")
    p.add_argument("--evaluator", default="lm", type=_evaluator,
                   help="lm: train each candidate (default); proxy:params / proxy:flops: score without training")
    p.add_argument("--compile", action="store_true",
                   help="train each candidate through torch.compile (compile time is reported apart; a "
                   "candidate that fails to compile trains eager)")
    p.add_argument("--demo", action="store_true", help=argparse.SUPPRESS)
    add_device_arg(p)
    p.set_defaults(func=run)


def _non_negative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return v


def _evaluator(text: str) -> str:
    import evaluators

    try:
        return evaluators.check(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def resolve_space_path(arg: str | None) -> Path:
    path = Path(arg or DEFAULT_SPACE)
    if not path.exists() and arg is None:
        path = SHIPPED_SPACES / "default.yaml"
    return path


def build_settings(args: argparse.Namespace):  # -> SearchSettings
    """Validate every flag and file before anything is created on disk."""
    from evaluators import Budget, TrainRecipe
    from nas.search.driver import SearchSettings
    from nas.search.hurdles import Hurdles, parse_fractions
    from nas.search.space import load_space
    from nas.search.study import default_storage

    space = load_space(resolve_space_path(args.space))
    budget_raw = budget_from_args(args) or space.budget or DEFAULT_BUDGET
    try:
        budget = Budget.from_dict(budget_raw)
        recipe = TrainRecipe.from_dict({**space.recipe, "seed": args.seed})
    except ConfigError as err:
        raise err.in_file(space.source) from None
    if not 0 < args.hurdle_percentile <= 100:
        raise UserError(f"--hurdle-percentile must be in (0, 100], got {args.hurdle_percentile:g}")
    hurdles = Hurdles()
    fractions = args.hurdles or (DEMO_HURDLES if args.demo else None)
    if fractions:
        try:
            hurdles = Hurdles(parse_fractions(fractions), percentile=args.hurdle_percentile)
        except ValueError as err:
            raise UserError(f"--hurdles: {err}") from None
    from nas.data import load_corpus

    load_corpus(args.data)  # a missing or empty corpus is refused now; the default is fetched once here
    study = args.study or space.name
    if not study or any(c in study for c in "/\\") or study.startswith("."):
        raise UserError(f"--study {study!r}: use a plain name (letters, digits, - and _)")
    runs = Path(args.runs_dir)
    _check_writable(runs, "--runs-dir")
    storage = args.storage or default_storage(runs, study)
    trials = args.trials or (DEMO_TRIALS if args.demo else 20)
    workers = args.workers or max(1, min(2, os.cpu_count() or 1))
    if args.gpus_per_trial > 0 and args.device == "cpu":
        raise UserError("--gpus-per-trial > 0 with --device cpu: choose one")
    if args.address is not None and not args.local:
        check_address(args.address)
    if args.local:
        for flag, given in (("--address", args.address), ("--ray-dashboard", args.ray_dashboard),
                            ("--workers", args.workers is not None and args.workers > 1),
                            ("--trial-timeout", args.trial_timeout is not None)):
            if given:
                raise UserError(f"--local runs trials one at a time without Ray; drop {flag}")
        workers = 1
    return SearchSettings(
        study=study,
        storage=storage,
        space=space,
        trials=trials,
        budget=budget,
        recipe=recipe,
        objective=args.objective,
        sampler=args.sampler,
        population=args.population,
        seed=args.seed,
        hurdles=hurdles,
        workers=workers,
        cpus_per_trial=args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial,
        address=args.address,
        device=args.device,
        data=args.data,
        tb_dir=None if args.no_tensorboard else str(runs / study / "tb"),
        retries=args.retries,
        worker_timeout=args.worker_timeout,
        trial_timeout=args.trial_timeout,
        local=args.local,
        dashboard=args.ray_dashboard,
        evaluator=args.evaluator,
        compile=args.compile,
    )


def check_address(address: str) -> None:
    """Refuse a Ray address that is malformed or unreachable now (Ray itself would retry for minutes)."""
    if address in ("auto", "local"):
        return
    target = address[len("ray://") :] if address.startswith("ray://") else address
    host, sep, port = target.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(
            f"--address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379), ray://HOST:PORT or auto"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=10):
            pass
    except OSError as err:
        raise UserError(
            f"--address {address!r}: cannot reach {host}:{port} ({err.strerror or err}); "
            "is the Ray head running?"
        ) from None


@contextlib.contextmanager
def _sigterm_stops_the_driver() -> Iterator[None]:
    """SIGTERM (a scheduler, ``kill``) unwinds the driver like Ctrl-C: running trials are re-queued."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except SystemExit as exc:
        if exc.code == signal.SIGTERM:  # Ray's own handler (installed by ray.init) exits with 15
            raise SystemExit(128 + signal.SIGTERM) from None
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check_writable(path: Path, flag: str) -> None:
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and (not probe.is_dir() or not os.access(probe, os.W_OK)):
        raise UserError(f"{flag} {str(path)!r}: {probe} is not a writable directory")


def run(args: argparse.Namespace) -> int:
    from nas.search.driver import Driver
    from nas.search.report import format_table, leaderboard, state_counts

    settings = build_settings(args)
    if args.demo:
        print(
            f"Demo search: {settings.trials} candidate architectures from {settings.space.source}, each "
            f"trained on Shakespeare for the same compute ({settings.budget}) on {settings.workers} local "
            "Ray worker(s);\na candidate whose validation loss is worse than the median at half its budget "
            "stops there (a hurdle).\nEach line below is one finished candidate; the Pareto front of loss "
            "vs FLOPs per token comes at the end.\nSee `python run_search.py search --help` for the real thing.",
            flush=True,
        )
    with _sigterm_stops_the_driver():
        study = Driver(settings).run()
    counts = state_counts(study)
    rows = leaderboard(study, top=10)
    title = "Pareto front (loss vs FLOPs/token)" if len(study.directions) > 1 else "Leaderboard (validation loss)"
    print()
    print(f"{title} of study {settings.study!r}: " + ", ".join(f"{v} {k.lower()}" for k, v in sorted(counts.items())))
    print(format_table(rows) if rows else "(no completed trials)")
    print()
    print(f"study:       --study {settings.study} --storage {settings.storage}")
    if settings.tb_dir:
        print(f"tensorboard: tensorboard --logdir {settings.tb_dir}")
    # The same flags that found this study find it again (--runs-dir or --storage when not the default).
    where = (f" --storage {shlex.quote(settings.storage)}" if args.storage is not None
             else "" if args.runs_dir == "runs" else f" --runs-dir {shlex.quote(args.runs_dir)}")
    prog = os.path.basename(sys.argv[0]) or "run_search.py"
    prog = f"python {prog}" if prog.endswith(".py") else prog
    print(f"next:        {prog} best --study {settings.study}{where}")
    sys.stdout.flush()
    return 0
