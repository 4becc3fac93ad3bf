"""``run_search.py search``: launch or continue a search (and the no-argument demo)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evaluators.result import measure_of
from nas.commands.common import data_or_default, non_empty
from nas.commands.stopping import sigterm_stops_the_driver
from nas.errors import ConfigError, UserError
from nas.program import prog_name
from nas.shipped import shipped_spaces, space_path
from nas.spec import Spec
from nas.spec.flags import SpecFlags, add_spec_flags, from_source, spec_flags
from nas.spec.spec import proxy_note, refuse_unused
from nas.validate import check_study_name

if TYPE_CHECKING:
    from nas.search.driver.context import RunContext
    from nas.search.space.load import SearchSpace

#: a search_spaces/default.yaml in the working directory wins; else the shipped one (nas.shipped)
DEFAULT_SPACE = "search_spaces/default.yaml"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="launch or continue a search",
        description="Search architectures: sample candidates from the spec file's space, train each on the "
        "corpus with the same budget on Ray workers, and record everything in an Optuna study. Every field "
        "of the spec is a flag (--search.trials 40, --budget.steps 100, --recipe.seed 3, --resources.workers "
        "2); a field no flag names keeps the file's value. Running it again with the same --study continues "
        "it (without --space: with the spec the study keeps).",
    )
    p.add_argument(
        "--space",
        type=non_empty,
        default=None,
        metavar="SPEC",
        help="the spec file: a search space, optionally with recipe, budget, data, search and "
        f"resources sections; a path or a shipped space's name ({', '.join(shipped_spaces())}). "
        f"Default: the study's own spec when the study exists, else {DEFAULT_SPACE} if there is one "
        "here, else the shipped default (the demo)",
    )
    p.add_argument("--study", default=None, help="study name (default: the space's name)")
    p.add_argument(
        "--storage",
        type=non_empty,
        default=None,
        help="Optuna RDB URL (default sqlite:///RUNS/STUDY/study.db)",
    )
    p.add_argument(
        "--runs-dir",
        type=non_empty,
        default="runs",
        help="where studies and TensorBoard logs go (default runs/)",
    )
    p.add_argument("--demo", action="store_true", help=argparse.SUPPRESS)
    add_spec_flags(p)
    p.set_defaults(func=run)


def resolve_space_path(arg: str | None) -> Path:
    return space_path(arg or DEFAULT_SPACE)


def resolve_spec(args: argparse.Namespace, flags: SpecFlags) -> tuple[Spec, SearchSpace, str, str]:
    """The spec this run follows, its validated space, the study name and the storage URL.

    The file ``--space`` names, or, without it, the spec a study of that name keeps
    (a continuation needs no file), else the shipped default; then ``flags`` (the command
    line's spec flags) on top.
    """
    from nas.search.space.load import load_spec, spec_of
    from nas.search.storage.urls import default_storage

    replaced = [f"data.{key}" for key in flags.section("data")]  # the file's paths there are not read
    runs = Path(args.runs_dir)
    stored = None if args.space is not None else _stored_spec(args)
    if stored is not None:
        spec, space = spec_of(stored.to_dict(), stored.source)
    else:
        spec, space = load_spec(resolve_space_path(args.space), replaced)
    spec = flags.apply(spec)
    if args.space is None and stored is None and space.task == "lm":
        from nas.data import task_of

        if task_of(spec.data.corpus) == "seq2seq":  # the default space is an lm space: take the seq2seq one
            print(
                f"note: --data {spec.data.corpus} is a parallel corpus: searching the shipped seq2seq space "
                "(--space names another)",
                flush=True,
            )
            spec, space = load_spec(resolve_space_path("seq2seq"), replaced)
            spec = flags.apply(spec)
    refuse_unused(spec, flags.values, spec.source or None)  # a setting whose condition the spec does not meet
    if args.study is None:  # the space's name names the study: an error points at the file
        try:
            check_study_name(space.name, "name")
        except ConfigError as err:
            msg = f"{err.message}; set another name: or pass --study"
            raise ConfigError(msg, err.path, space.source) from None
    study = args.study if args.study is not None else space.name
    return spec, space, study, args.storage or default_storage(runs, study)


def demo_banner(settings: RunContext) -> str:
    """What the demo is about to do, read from the spec it runs: the demo's space is a
    search_spaces/default.yaml in the working directory when there is one, whose corpus, workers and
    hurdles need not be the shipped file's."""
    spec = settings.spec
    corpus = data_or_default(spec.data.corpus, settings.space.task) or "Shakespeare"
    res = spec.resources
    where = (
        "in this process"
        if res.local
        else f"on {settings.workers} {'Ray' if res.address else 'local Ray'} worker(s)"
    )
    count = f"{settings.trials} candidate architectures" if settings.trials is not None else "candidates"
    hurdles = spec.search.hurdles
    measure = measure_of(spec.search.evaluator)
    if measure.lm:
        each = f"each trained on {corpus} for the same compute ({spec.budget})"
    elif measure.trains:  # the probes: their own tasks and protocol, neither the corpus nor the budget
        each = f"each scored by {measure.evaluator} ({measure.name}; the budget is not used)"
    else:
        each = f"each scored by {measure.evaluator} without training ({measure.name})"
    lines = [f"Demo search: {count} from {settings.space.source}, {each} {where}{';' if hurdles else '.'}"]
    if hurdles:
        pct = spec.search.hurdle_percentile
        rank = "the median" if pct == 50.0 else f"the {pct:g}th percentile"
        at = (
            "half its budget"
            if hurdles == (0.5,)
            else f"{', '.join(f'{h:g}' for h in hurdles)} of its budget"
        )
        lines.append(
            f"a candidate whose {'validation loss' if measure.lm else measure.name} is worse than {rank} "
            f"at {at} stops there (a hurdle)."
        )
    value = "loss" if measure.lm else measure.name
    end = {
        "loss": "the leaderboard",
        "loss+flops": f"the Pareto front of {value} vs FLOPs per token",
        "loss+flops+state": f"the Pareto front of {value}, FLOPs per token and state bytes",
    }[spec.search.objective]
    lines.append(f"Each line below is one finished candidate; {end} comes at the end.")
    lines.append(f"See `{prog_name()} search --help` for the real thing.")
    return "\n".join(lines)


def _check_demo_study(settings: RunContext) -> None:
    """The demo continues the study ``default`` under the runs directory; one an earlier search made with
    other settings is refused before the demo starts, saying how to continue it or run the demo apart."""
    import optuna

    from nas.search.storage.records import study_exists
    from nas.search.storage.study import check_spec
    from nas.search.storage.urls import open_storage, sqlite_path

    db = sqlite_path(settings.storage)
    if db is not None and not db.exists():
        return
    storage = open_storage(settings.storage, read_only=True)
    if not study_exists(storage, settings.study):
        return
    try:
        check_spec(optuna.load_study(study_name=settings.study, storage=storage), settings.spec)
    except UserError as err:
        text = str(err)
        why = text[text.find("with other values") : text.find("; continue")]
        raise UserError(
            f"the demo searches study {settings.study!r} in {settings.storage}, which an earlier search ran "
            f"{why}; continue that one with `{prog_name()} search --study {settings.study}`, or run the demo "
            "in another directory (or with --runs-dir DIR)"
        ) from None


def _stored_spec(args: argparse.Namespace) -> Spec | None:
    """The spec kept by the study ``--study`` names, when it exists (read-only; None otherwise)."""
    if args.study is None:
        return None
    from nas.search.storage.records import stored_spec, study_exists
    from nas.search.storage.urls import default_storage, open_storage, storage_exists

    url = args.storage or default_storage(Path(args.runs_dir), args.study)
    try:
        if not storage_exists(url):
            return None
        storage = open_storage(url, read_only=True)
        if not study_exists(storage, args.study):
            return None
        import optuna

        return stored_spec(optuna.load_study(study_name=args.study, storage=storage))
    except UserError:
        return None  # a storage that cannot be read is refused, in one line, where the search opens it


def build_run(args: argparse.Namespace, flags: SpecFlags | None = None) -> RunContext:
    """This run: the spec (file, study or default, then flags), checked once, and its context.  ``flags``:
    the command line's spec flags as the command resolved them (None: read from ``args`` here)."""
    from nas.data import resolve_data
    from nas.search.driver.context import RunContext

    flags = spec_flags(args) if flags is None else flags
    spec, space, study, storage = resolve_spec(args, flags)
    try:  # with a tokenizer: the cached token files, made once here
        data = resolve_data(data_or_default(spec.data.corpus, space.task), spec.data.tokenizer,
                            spec.data.text_field, spec.data.on_bad_record)  # fmt: skip
    except UserError as err:  # a file's (or the stored spec's) tokenizer is not --tokenizer's
        raise from_source(err, space.source, flags.texts) from None
    return RunContext(
        spec, space, study=study, storage=storage, data=data, runs_dir=args.runs_dir, flags=flags.texts
    )


def run(args: argparse.Namespace) -> int:
    from nas.search.driver.loop import Driver
    from nas.search.reports.lookup import state_counts
    from nas.search.reports.tables import format_table, leaderboard

    flags = spec_flags(args)
    settings = build_run(args, flags)
    if args.demo:
        _check_demo_study(settings)
        print(demo_banner(settings), flush=True)
    driver = Driver(settings)
    with sigterm_stops_the_driver():
        study = driver.run()
    counts = state_counts(study)
    rows = leaderboard(study, top=10)
    n_obj = len(study.directions)
    measure = measure_of(settings.spec.search.evaluator)
    value = "validation loss" if measure.lm else measure.name
    title = (f"Leaderboard ({value})" if n_obj == 1
             else f"Pareto front ({'loss' if measure.lm else measure.name} vs FLOPs/token"
             + (" and state)" if n_obj > 2 else ")"))  # fmt: skip
    print()
    print(
        f"{title} of study {settings.study!r}: "
        + ", ".join(
            f"{v} {k.lower() if k != 'REQUEUED' else 'interrupted and run again'}"
            for k, v in sorted(counts.items())
        )
    )
    print(format_table(rows, with_state=n_obj > 2, measure=measure) if rows else "(no completed trials)")
    print()
    note = proxy_note(settings.spec, flags.values)
    if note:  # after the run: a refusal stays one line
        print(f"note: {note}")
    print(f"study:       --study {settings.study} --storage {settings.storage}")
    if settings.tb_dir:
        print(f"tensorboard: tensorboard --logdir {settings.tb_dir}")
    # The same flags that found this study find it again (--runs-dir or --storage when not the default).
    where = (
        f" --storage {shlex.quote(settings.storage)}"
        if args.storage is not None
        else ""
        if args.runs_dir == "runs"
        else f" --runs-dir {shlex.quote(args.runs_dir)}"
    )
    prog = prog_name()
    kept = driver.kept.summary()
    if kept:
        print(f"weights:     {kept}")
    print(f"next:        {prog} best --study {settings.study}{where}")
    if driver.kept.kept:
        print(
            f"export:      {prog} export --study {settings.study}{where} --best --hf out/   (no retraining)"
        )
    if args.demo:  # a single-seed search rewards luck: say how to check the winner before trusting it
        print(
            f"confirm:     {prog} confirm --study {settings.study}{where} --top 3 --seeds 3 --scales 1,4 "
            "--report confirm.md   (re-trains the winners and the baselines over seeds and budgets; "
            "docs/confirming.md)"
        )
    sys.stdout.flush()
    return 0
