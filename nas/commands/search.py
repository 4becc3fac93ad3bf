"""``run_search.py search``: launch or continue a search (and the no-argument demo)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from nas.cli import prog_name
from nas.commands.common import add_budget_args, add_device_arg, budget_from_args, data_or_default, non_empty
from nas.commands.stopping import sigterm_stops_the_driver
from nas.errors import ConfigError, UserError
from nas.shipped import shipped_spaces, space_path
from nas.validate import MAX_SEED, check_number, check_study_name

if TYPE_CHECKING:
    from nas.search.hurdles import Hurdles
    from nas.search.settings import SearchSettings

#: a search_spaces/default.yaml in the working directory wins; else the shipped one (nas.shipped)
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
    p.add_argument("--space", type=non_empty, default=None,
                   help=f"search-space YAML, or a shipped space's name: {', '.join(shipped_spaces())} "
                   f"(default: {DEFAULT_SPACE} if there is one here, else the shipped default)")
    p.add_argument("--study", default=None, help="study name (default: the space's name)")
    p.add_argument("--storage", type=non_empty, default=None, help="Optuna RDB URL (default sqlite:///RUNS/STUDY/study.db)")
    p.add_argument("--runs-dir", type=non_empty, default="runs", help="where studies and TensorBoard logs go (default runs/)")
    p.add_argument("--trials", type=int, default=None,
                   help="finished trials wanted in the study (default 20; with --max-flops: no limit)")
    p.add_argument("--max-flops", type=float, default=None, metavar="FLOPS",
                   help="training FLOPs the whole search may spend (e.g. 2.4e12): no trial starts once the "
                   "finished trials spent it; with hurdles, every candidate stopped early buys more "
                   "candidates (default: no limit)")
    add_budget_args(p)
    p.add_argument("--objective", choices=("loss+flops", "loss"), default="loss+flops",
                   help="loss+flops: Pareto front of validation loss and FLOPs/token (default); "
                   "loss: validation loss at the fixed budget")
    p.add_argument("--sampler", choices=("auto", "nsga2", "evolution", "tpe", "random"), default="auto",
                   help="auto (default): the sampler measured to reach a good loss in the fewest trials for "
                   "the objective (docs/BENCHMARKS.md); a study being continued keeps the one it ran with")
    p.add_argument("--population", type=int, default=None,
                   help="population size for nsga2/evolution (default: a third of --trials, between 4 and 50; "
                   "20 under --max-flops without --trials); tpe starts with min(5, population) random trials")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampler and of every trial's training")
    p.add_argument("--hurdles", type=non_empty, default=None, help="budget fractions where weak candidates stop, e.g. 0.25,0.5")
    p.add_argument("--hurdle-percentile", type=float, default=50.0,
                   help="a candidate continues if its loss is at or below this percentile of earlier "
                   "architectures' losses at the hurdle (default 50: the median)")
    p.add_argument("--hurdle-min-trials", type=int, default=3, metavar="N",
                   help="a hurdle stops candidates once N earlier architectures reached it (default 3; "
                   "1 under a tight --max-flops: the first candidates then train less)")
    p.add_argument("--workers", type=int, default=None, help="concurrent trials (default: one per CPU, at most 2)")
    p.add_argument("--cpus-per-trial", type=float, default=1.0)
    p.add_argument("--gpus-per-trial", type=float, default=0.0, help="GPUs per trial (fractions allowed)")
    p.add_argument("--address", default=None, help="join an existing Ray cluster (e.g. 10.0.0.1:6379 or auto)")
    p.add_argument("--retries", type=int, default=2, help="re-runs of a trial whose worker died")
    p.add_argument("--worker-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="a Ray worker that cannot be started or restarted within this time (its node is gone "
                   "and no other has room) is given up and the search goes on with fewer (default 300)")
    p.add_argument("--trial-timeout", type=float, default=None, metavar="SECONDS",
                   help="a trial still running after this long (a hung worker) has its worker killed and "
                   "restarted and ends FAIL 'timed out' (default: no limit)")
    p.add_argument("--local", action="store_true",
                   help="no Ray: run the trials one at a time in this process (for debugging: breakpoints "
                   "and tracebacks work); results are the same as with one Ray worker")
    p.add_argument("--data", default=None, help="text file or directory, or a token-file directory "
                   "(train.bin, val.bin, meta.json), to train on (default: Shakespeare); a task: seq2seq "
                   "space takes a parallel directory (train.src, train.tgt, val.src, val.tgt; default: "
                   "the built-in shakespeare-reversed); the vocabulary comes from it")
    p.add_argument("--tokenizer", metavar="FILE", default=None,
                   help="a Hugging Face tokenizer.json: tokenizes the text corpus once (cached) before "
                   "the search")
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


def _evaluator(text: str) -> str:
    import evaluators

    try:
        return evaluators.check(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def resolve_space_path(arg: str | None) -> Path:
    return space_path(arg or DEFAULT_SPACE)


def build_settings(args: argparse.Namespace) -> SearchSettings:
    """Map the flags (and the space file's defaults) to settings; the settings check the values."""
    from evaluators import Budget, TrainRecipe
    from nas.data import resolve_data
    from nas.search.settings import SearchSettings
    from nas.search.space import load_space
    from nas.search.storage import default_storage

    space = load_space(resolve_space_path(args.space))
    try:
        budget = Budget.from_dict(budget_from_args(args) or space.budget or DEFAULT_BUDGET)
        recipe = TrainRecipe.from_dict(space.recipe)
    except ConfigError as err:
        raise err.in_file(space.source) from None
    seed = check_number(args.seed, "--seed", integer=True, low=0, high=MAX_SEED)
    recipe = dataclasses.replace(recipe, seed=seed)
    # with --tokenizer: the cached token files, made once here
    data = resolve_data(data_or_default(args.data, space.task), args.tokenizer)
    if args.study is None:  # the space's name names the study: an error points at the file
        try:
            check_study_name(space.name, "name")
        except ConfigError as err:
            msg = f"{err.message}; set another name: or pass --study"
            raise ConfigError(msg, err.path, space.source) from None
    study = args.study if args.study is not None else space.name
    runs = Path(args.runs_dir)
    return SearchSettings(
        study=study,
        storage=args.storage or default_storage(runs, study),
        space=space,
        trials=_trials(args),
        max_flops=args.max_flops,
        budget=budget,
        recipe=recipe,
        objective=args.objective,
        sampler=args.sampler,
        population=args.population,
        seed=args.seed,
        hurdles=_hurdles(args.hurdles or (DEMO_HURDLES if args.demo else None), args.hurdle_percentile,
                         args.hurdle_min_trials),
        workers=_default(args.workers, 1 if args.local else max(1, min(2, os.cpu_count() or 1))),
        cpus_per_trial=args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial,
        address=args.address,
        device=args.device,
        data=data,
        tb_dir=None if args.no_tensorboard else str(runs / study / "tb"),
        runs_dir=str(runs),
        retries=args.retries,
        worker_timeout=args.worker_timeout,
        trial_timeout=args.trial_timeout,
        local=args.local,
        dashboard=args.ray_dashboard,
        evaluator=args.evaluator,
        compile=args.compile,
    )


T = TypeVar("T")


def _default(given: T | None, default: T) -> T:
    """The flag's value when given (0 included: the settings refuse it), else ``default``."""
    return default if given is None else given


def _trials(args: argparse.Namespace) -> int | None:
    if args.trials is not None:
        return args.trials
    if args.demo:
        return DEMO_TRIALS
    return None if args.max_flops is not None else 20  # with --max-flops the compute ends the search


def _hurdles(fractions: str | None, percentile: float, min_trials: int) -> Hurdles:
    from nas.search.hurdles import Hurdles, parse_fractions

    try:
        parsed = parse_fractions(fractions) if fractions else ()
    except ValueError as err:
        raise UserError(f"--hurdles: {err}") from None
    if min_trials < 1:
        raise UserError(f"--hurdle-min-trials must be at least 1 trial, got {min_trials}")
    try:
        return Hurdles(parsed, percentile=percentile, min_trials=min_trials)
    except ValueError:
        raise UserError(f"--hurdle-percentile must be in (0, 100], got {percentile:g}") from None


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
            f"vs FLOPs per token comes at the end.\nSee `{prog_name()} search --help` for the real thing.",
            flush=True,
        )
    with sigterm_stops_the_driver():
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
    prog = prog_name()
    print(f"next:        {prog} best --study {settings.study}{where}")
    if args.demo:  # a single-seed search rewards luck: say how to check the winner before trusting it
        print(f"confirm:     {prog} confirm --study {settings.study}{where} --top 3 --seeds 3 --scales 1,4 "
              "--report confirm.md   (re-trains the winners and the baselines over seeds and budgets; "
              "docs/confirming.md)")
    sys.stdout.flush()
    return 0
