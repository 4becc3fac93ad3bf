"""``run_search.py confirm``: re-train a search's finalists and baselines over seeds and scales.

Every flag is checked, and the search study, its space, data and the
baselines are read, before anything is written; only then is the confirm
study (``STUDY-confirm`` in the search's storage) created or continued.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from nas.commands._study import add_study_args
from nas.commands.common import jsonable, non_empty, positive_int
from nas.errors import ConfigError, UserError
from nas.outputs import Planned, plan_output, write_output
from nas.paths import recorded
from nas.plural import plural
from nas.program import prog_name
from nas.spec.flags import SpecFlags, add_spec_flags, spec_flags
from nas.spec.sections import named
from nas.spec.training import PARAMETRIZATIONS

DEFAULT_TOP = 3
DEFAULT_SEEDS = 3
DEFAULT_SCALES = "1,4"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "confirm",
        help="re-train a search's finalists and baselines over seeds and scales",
        description="Confirm a search's winners: train the top K of --study (the Pareto front, lowest loss "
        "first, or the leaderboard) and the baselines for --seeds seeds at each --scales multiple of the "
        "study's budget, on the same pool and storage as search, and report paired statistics, rank "
        "stability and a verdict per finalist. Running it again continues where it stopped.",
    )
    add_selection_args(p, DEFAULT_TOP, "confirm")
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=DEFAULT_SEEDS,
        help=f"seeds per architecture and scale, from the study's training seed (recipe.seed) up "
        f"(default {DEFAULT_SEEDS})",
    )
    p.add_argument(
        "--scales",
        type=non_empty,
        default=DEFAULT_SCALES,
        help=f"multiples of the study's budget (default {DEFAULT_SCALES})",
    )
    p.add_argument(
        "--lrs",
        type=non_empty,
        default=None,
        help="learning rates to sweep at the first seed per architecture and scale; the best is "
        "used for the other seeds (default: the study's recipe lr)",
    )
    add_spec_flags(p, ("resources",), hidden=("resources.keep_weights",))  # refused: a search's
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"runs", "summary", "rank_correlation", "search_evaluator", ...} as JSON',
    )
    p.add_argument("--report", default=None, metavar="FILE.md", help="write a Markdown report with plots")
    p.add_argument("--force", action="store_true", help="replace --report and its figures even if this tool "
                   "did not write them")  # fmt: skip
    p.set_defaults(func=run)


def add_selection_args(p: argparse.ArgumentParser, top: int, verb: str) -> None:
    """The study and which of its architectures to take, as ``confirm`` and ``ladder`` both take them:
    --study (and its storage), --top K or --trial N,M, --baseline FILE, --baseline-shape."""
    add_study_args(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--top", type=positive_int, default=None, help=f"finalists to {verb} (default {top})")
    which.add_argument(
        "--trial", type=non_empty, default=None, metavar="N[,M...]",
        help=f"{verb} these trial numbers instead of the top K, e.g. 3,17,21",
    )  # fmt: skip
    p.add_argument(
        "--baseline",
        type=non_empty,
        action="append",
        default=None,
        metavar="FILE",
        help="a baseline architecture file or a shipped one's name, e.g. vanilla (repeatable; default: "
        "the space's seed architectures as the search ran them, and Transformer++ for a language model)",
    )
    p.add_argument(
        "--baseline-shape",
        choices=("finalist", "own"),
        default="finalist",
        help="finalist (default): each baseline rebuilt at each finalist's width, heads, depth and context, "
        "so that a comparison isolates the blocks (finalists of one shape share them); own: the baselines "
        "as they are",
    )
    p.add_argument(
        "--parametrization",
        choices=PARAMETRIZATIONS,
        default=None,
        help="train every run under this parametrization instead of the study's recipe.parametrization "
        "(completep: relative to each architecture at size 1 unless the recipe states a base shape; "
        "recorded in the study's recipe; docs/parametrization.md)",
    )


def with_parametrization(recipe: Any, name: str | None) -> Any:
    """``recipe`` under the parametrization ``--parametrization`` names (None: the study's own); a base
    shape the study's recipe states is kept for completep, dropped for standard (it means nothing there)."""
    if name is None or name == recipe.parametrization:
        return recipe
    if name == "standard":
        return dataclasses.replace(recipe, parametrization=name, base_width=None, base_depth=None)
    return dataclasses.replace(recipe, parametrization=name)


def _data_spec(record: Any) -> str | None:
    """The ``--data`` the search ran on, from its record (the fingerprint is checked when the study opens)."""
    from nas.data import DEFAULT_PARALLEL, resolve_data
    from nas.data.corpus import DEFAULT_CORPUS

    if not isinstance(record, dict):
        return None if record in (None, DEFAULT_CORPUS) else str(record)
    corpus = record.get("corpus")
    spec = None if corpus in (None, DEFAULT_CORPUS) else str(corpus)
    if spec not in (None, DEFAULT_PARALLEL) and not Path(spec).expanduser().exists():  # built-ins: no paths
        raise UserError(f"the study's corpus {spec} is not there any more; confirm needs the search's data")
    reading = {k: record[k] for k in ("text_field", "on_bad_record") if k in record}
    return resolve_data(spec, record.get("tokenizer"), **reading)


def _baselines(
    files: list[str] | None, study: Any, seed_archs: Any, data: str | None, task: str
) -> list[tuple[Any, ...]]:
    """Per baseline: (name, ArchConfig, the search trial that measured it or None, the reports' label)."""
    from nas.confirm.plan import ALWAYS_BASELINES, baseline_file, default_baselines, search_twin
    from nas.data import vocab_size_of
    from nas.models import ArchConfig

    if files:
        archs = [baseline_file(f, vocab_size_of(data), task) for f in files]
        seen: dict[str, str] = {}
        for f, (_, arch) in zip(files, archs, strict=True):  # a repeated list item is a mistake, not a merge
            if arch.arch_id in seen:
                same = (
                    "is given twice"
                    if seen[arch.arch_id] == f
                    else f"is the same architecture as {seen[arch.arch_id]!r}"
                )
                raise UserError(f"--baseline {f!r} {same}; give each baseline once")
            seen[arch.arch_id] = f
        return [(name, arch, search_twin(study, arch), name) for name, arch in archs]
    out = [
        (name, ArchConfig.from_dict(t.user_attrs["arch"]), t, name)
        for name, t in default_baselines(study, seed_archs)
    ]
    if task == "lm":  # Transformer++ too, unless a seed already is it
        for extra in ALWAYS_BASELINES:
            if extra not in {b[0] for b in out}:
                name, arch = baseline_file(extra, vocab_size_of(data), task)
                out.append((name, arch, search_twin(study, arch), name))
    return out


def plan_flags(args: argparse.Namespace) -> str:
    """The flags that chose this confirmation's runs, as a command line would give them again."""
    which = ["--trial", args.trial] if args.trial else ["--top", str(args.top or DEFAULT_TOP)]
    flags = [*which, "--seeds", str(args.seeds), "--scales", args.scales]
    for f in args.baseline or ():  # recorded: a file absolute, so it names the same one from anywhere
        flags += ["--baseline", recorded(f)]
    if args.baseline_shape != "finalist":
        flags += ["--baseline-shape", args.baseline_shape]
    if args.lrs:
        flags += ["--lrs", args.lrs]
    return shlex.join(flags)


def baseline_files(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(flag, path) of each ``--baseline`` file: inputs a report never replaces (``nas.outputs``)."""
    from nas.shipped import arch_path

    return [("--baseline", arch_path(f)) for f in args.baseline or ()]


def plan_report(args: argparse.Namespace) -> list[Planned]:
    """The report and the figures beside it (``STEM_compute.png``, ``STEM_deltas.png``), checked now
    under nas.outputs' rule: new files, or what an earlier ``confirm`` wrote and nobody changed since."""
    if args.report is None:
        return []
    report = plan_output(
        args.report, "--report", force=args.force, example="confirm.md", reads=baseline_files(args)
    )
    stem = report.path.with_suffix("")
    figures = [stem.with_name(f"{stem.name}_{kind}.png") for kind in ("compute", "deltas")]
    return [report] + [
        plan_output(f, "--report (its figure)", force=args.force, example=None) for f in figures
    ]


@dataclasses.dataclass(frozen=True)
class Picked:
    """What a confirmation (or a ladder) compares: read from the search study, checked, nothing written."""

    study: Any
    url: str
    record: dict[str, Any]
    spec: Any
    space: Any
    data: str | None
    finals: list[Any]  # the finalists' search trials
    bases: list[tuple[Any, ...]]  # per baseline: (name, ArchConfig, its search trial or None, label)
    notes: list[str]  # for stderr once every check has passed (a refusal stays one line)


def pick(args: argparse.Namespace, numbers: list[int] | None) -> Picked:
    """The search study ``--study``, its spec and data (checked unchanged), its finalists (``--top`` or
    ``--trial``) and the baselines (``--baseline``, ``--baseline-shape``), as confirm and ladder take them."""
    from nas.confirm.plan import finalists
    from nas.data import data_record
    from nas.search.reports.lookup import open_existing_study
    from nas.search.storage.study import check_data

    # not open_study: its note on a study that is no search's would precede _search_record's refusal
    study, url = open_existing_study(args.study, args.storage, args.runs_dir)
    notes: list[str] = []
    record, spec, space = _search_record(args.study, study)
    data = _data_spec(record.get("data"))
    # the same check as a continued search: the finalists' search losses and seed runs were measured
    # on the data the study records, and the new runs are compared with them
    why = (
        f"{args.command} compares new runs with the search's, so it needs the data the search ran on: "
        "put it back as it was, or run a new search on this data"
    )
    check_data(study, data_record(data), why)
    if getattr(args, "report", None):  # the study's corpus is known now: a report never goes into it
        from nas.outputs import check_not_input

        check_not_input(args.report, "--report")
    top = args.top or DEFAULT_TOP
    finals = finalists(study, top, numbers)
    if numbers is None and len(finals) < top:
        front = "Pareto front" if len(study.directions) > 1 else "leaderboard"
        notes.append(
            f"the {front} of {args.study!r} has {len(finals)} architecture(s); "
            f"{args.command} takes those (--trial N,M,... names others)"
        )
    bases = _baselines(args.baseline, study, space.seed_archs, data, space.task)
    if args.baseline_shape == "finalist":
        from nas.confirm.plan import reshaped_baselines

        bases, reshaped = reshaped_baselines(bases, finals, study)
        notes += reshaped
    return Picked(study, url, record, spec, space, data, finals, bases, notes)


def print_notes(notes: list[str]) -> None:
    """The notes gathered while checking, printed once nothing is left to refuse."""
    for note in notes:
        print(f"note: {note}", file=sys.stderr)


def refuse_keep_weights(args: argparse.Namespace, flags: SpecFlags) -> None:
    """``--resources.keep_weights`` is a search's: confirm and ladder (whose resources are their flags)
    refuse it in one line rather than ignore it."""
    if flags.section("resources").get("keep_weights"):
        raise ConfigError(
            f"{args.command} keeps no weights (a search's option); to keep a model, export it "
            f"(`{prog_name()} export ... --out m.yaml`) and `{prog_name()} train --arch m.yaml --save "
            "m.safetensors`",
            named("resources", "keep_weights"),
        )


def build(args: argparse.Namespace) -> tuple[Any, ...]:
    """Check every flag and read everything the confirmation needs; writes nothing."""
    from nas.confirm import ARCHS, Entry, Plan, confirm_study_name
    from nas.confirm.plan import LR_RANGE, SCALE_RANGE, build_entries, parse_list
    from nas.search.storage.records import study_exists
    from nas.search.storage.urls import open_storage

    scales = parse_list(args.scales, "--scales", bounds=SCALE_RANGE)
    lrs = parse_list(args.lrs, "--lrs", bounds=LR_RANGE) if args.lrs else []
    numbers = parse_list(args.trial, "--trial", int) if args.trial else None
    flags = spec_flags(args)
    refuse_keep_weights(args, flags)
    plan_report(args)  # before anything is read: a report that cannot be written is refused first
    p = pick(args, numbers)
    _check_whole_steps(scales, p.spec.budget)
    name = confirm_study_name(args.study)
    storage = open_storage(p.url, read_only=True)
    known: list[Entry] = []
    if study_exists(storage, name):
        import optuna

        known = [
            Entry.from_dict(d)
            for d in optuna.load_study(study_name=name, storage=storage).user_attrs.get(ARCHS) or []
        ]
    every, wanted, baselines = build_entries(known, p.finals, p.bases)
    _check_runs([*wanted, *baselines], scales, p.spec)
    seed0 = int(p.spec.recipe.seed)  # the seed the search trained every trial with (not its sampler's)
    _check_size(args.seeds, seed0, len(wanted) + len(baselines), len(scales), len(lrs))
    plan = Plan(
        tuple(e.index for e in wanted),
        tuple(b.index for b in baselines),
        tuple(scales),
        tuple(range(seed0, seed0 + args.seeds)),
        tuple(lrs),
    )
    recipe = with_parametrization(p.spec.recipe, args.parametrization)
    settings = settings_for(args, flags, name, p, seed0, recipe=recipe)
    print_notes(p.notes)
    return settings, every, plan, p.url


#: how far a scale's steps may be from a whole number of steps (rounding beyond this trained another scale
#: than the reports name: --scales 1e-9 of 24 steps trained 1 step, reported as scale 1e-09)
STEPS_TOLERANCE = 0.01


def _check_whole_steps(scales: list[float], budget: Any) -> None:
    """Refuse a scale of a steps budget that no whole number of steps gives (within 1%), or two scales
    that give the same steps: a run trains whole steps, and the reports name the scale asked for."""
    if budget.kind != "steps":
        return
    seen: dict[int, float] = {}
    for scale in scales:
        exact = budget.value * scale
        steps = round(exact)
        if steps < 1 or abs(steps - exact) > STEPS_TOLERANCE * exact:
            near = sorted({max(1, math.floor(exact)), max(1, math.ceil(exact))})
            valid = " or ".join(f"{n / budget.value:.6g} ({n} step{'s' if n > 1 else ''})" for n in near)
            raise UserError(
                f"--scales {scale:g}: the study's budget is {plural(budget.value, 'step', fmt='g')}, "
                f"so {scale:g} of it is "
                f"{exact:.4g} steps, and a run trains whole steps; give {valid}"
            )
        if steps in seen:
            raise UserError(
                f"--scales {seen[steps]:g} and {scale:g}: both are {plural(steps, 'step')} of the study's "
                f"{budget.value:g}; give one"
            )
        seen[steps] = scale


def _check_runs(entries: list[Any], scales: list[float], spec: Any) -> None:
    """Refuse a scale at which an architecture's run would buy no step or could not place the study's
    rungs: every such run used to be queued and fail (``FAIL ConfigError``), leaving that scale empty."""
    from nas.confirm.plan import check_runs
    from nas.confirm.runner import scaled_budget

    for scale in scales:
        budget = scaled_budget(spec.budget, scale)
        for e in entries:
            seq_len = spec.recipe.seq_len or e.arch.max_len
            label = f"--scales {scale:g}: {e.name}"
            check_runs(budget, spec.recipe, e.arch, seq_len, label, "give larger --scales")


def _check_size(seeds: int, seed0: int, n_archs: int, n_scales: int, n_lrs: int) -> None:
    """Refuse ``--seeds`` past the last seed, or a plan of more runs than one confirm study holds."""
    from nas.confirm.plan import MAX_RUNS
    from nas.validate import MAX_SEED

    if seed0 + seeds - 1 > MAX_SEED:
        raise UserError(
            f"--seeds {seeds}: seeds start at the study's training seed {seed0} and end at most at {MAX_SEED}"
        )
    runs = n_archs * n_scales * (seeds + max(n_lrs - 1, 0))
    if runs > MAX_RUNS:
        raise UserError(f"--seeds {seeds}: {runs:,} runs ({plural(n_archs, 'architecture')} x "
                        f"{n_scales} scale(s) x "
                        f"seeds and learning rates); at most {MAX_RUNS:,} in one confirmation")  # fmt: skip


def _search_record(name: str, study: Any) -> tuple[dict[str, Any], Any, Any]:
    """The search study's settings record, its spec and its space, refused if they cannot be confirmed.

    The spec is the one the study keeps; a study from before studies kept one gets it
    from its record and its space file (which must not have changed).
    """
    from nas.confirm import CONFIRM_OF
    from nas.search.space.load import spec_of
    from nas.search.storage.records import derived_kind, settings_of, stored_spec
    from nas.shipped import space_path
    from nas.spec import Budget, TrainRecipe
    from nas.yamlsafe import read_yaml

    if (kind := derived_kind(study)) is not None:
        raise UserError(
            f"--study {name!r} is {kind[0]}; pass the search study {study.user_attrs[CONFIRM_OF]!r}"
        )
    record = settings_of(study)
    missing = [k for k in ("space_file", "budget", "recipe", "objective") if k not in record]
    if missing:
        raise UserError(f"--study {name!r} records no {missing[0]} (it was not made by `search`)")
    spec = stored_spec(study)
    if spec is not None:
        return record, *spec_of(spec.to_dict(), spec.source)
    # search_spaces/x.yaml: shipped if not here.  The file is this study's record (its fingerprint is
    # checked below): read as spec_of reads a kept spec, not as a new file (load_spec), whose rules a study
    # that ran it may predate; the data is the record's (_data_spec), not the file's
    file = space_path(record["space_file"])
    spec, space = spec_of(read_yaml(file, "search space"), str(file))
    if record.get("space_fingerprint") not in (None, space.fingerprint):
        raise UserError(
            f"{record['space_file']} changed since --study {name!r} searched it "
            f"(fingerprint {record['space_fingerprint']}, now {space.fingerprint})"
        )
    spec = spec.replace(
        recipe=TrainRecipe.from_dict(record["recipe"]),
        budget=Budget.from_dict(record["budget"]),
        search={"objective": record["objective"], "evaluator": record.get("evaluator", "lm")},
    )
    return record, spec, space


def settings_for(args: argparse.Namespace, flags: SpecFlags, name: str, p: Picked, seed0: int,
                 recipe: Any = None, budget: Any = None) -> Any:  # fmt: skip
    """The confirmation's (or ladder's) own settings: the search's spec (``recipe``/``budget`` in place of
    its own when given), one run at a time from a queue, the resources this command was given (``flags``)."""
    from nas.search.driver.context import RunContext
    from nas.spec import Resources

    spec = p.spec
    resources = flags.apply(spec.replace(resources=Resources())).resources
    # Every run trains the LM in full: the search's hurdles and its pre-screen (a hurdle at fraction 0)
    # would stop finalists and baselines, leaving seeds out of the report; and a search scored by a proxy
    # or the probes is confirmed by the loss it stands in for (the same value on every seed otherwise).
    search = {"objective": "loss", "sampler": "random", "trials": 1, "max_flops": None, "population": None,
              "hurdles": (), "hurdle_percentile": 50.0, "hurdle_min_trials": 3, "prescreen": None,
              "evaluator": "lm", "seed": seed0}  # fmt: skip
    changes: dict[str, Any] = {"search": search, "resources": resources}
    if recipe is not None:
        changes["recipe"] = recipe
    if budget is not None:
        changes["budget"] = budget
    return RunContext(spec.replace(**changes), p.space, study=name, storage=p.url, data=p.data,
                      runs_dir=args.runs_dir, planned=True)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from nas.commands.stopping import sigterm_stops_the_driver
    from nas.confirm import build_report, run_confirmation
    from nas.confirm.markdown import plot, render

    outputs = plan_report(args)  # checked again when written (a file that appears meanwhile is kept)
    settings, every, plan, url = build(args)
    with sigterm_stops_the_driver():
        study = run_confirmation(
            settings,
            args.study,
            every,
            plan,
            out=sys.stderr if args.json else sys.stdout,
            flags=plan_flags(args),
        )
    report = build_report(study, url)
    if outputs:
        images = plot(report, report["baselines"], outputs[1:])
        text = render(report, report["baselines"], [p.name for p in images])
        write_output(outputs[0], lambda tmp: tmp.write_text(text, encoding="utf-8"))
    if args.json:
        keys = (
            "baselines",
            "search_evaluator",
            "runs",
            "summary",
            "rank_correlation",
            "power_law",
            "verdicts",
        )
        print(json.dumps(jsonable({k: report[k] for k in keys}), indent=2))
        return 0
    print()
    print(render(report, report["baselines"]))
    where = (
        f" --storage {shlex.quote(args.storage)}"
        if args.storage
        else ("" if args.runs_dir == "runs" else f" --runs-dir {shlex.quote(args.runs_dir)}")
    )
    if args.report:
        print(f"report:  {args.report}")
    prog = prog_name()
    print(f"runs:    {prog} best --study {settings.study} --storage {shlex.quote(url)}")
    print(f"export:  {prog} export --study {args.study}{where} --confirmed --out confirmed.yaml")
    return 0
