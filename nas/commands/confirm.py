"""``run_search.py confirm``: re-train a search's finalists and baselines over seeds and scales.

Every flag is checked, and the search study, its space, data and the
baselines are read, before anything is written; only then is the confirm
study (``STUDY-confirm`` in the search's storage) created or continued.
"""

from __future__ import annotations

import argparse
import math
import shlex
from typing import Any

from nas.commands import _runs
from nas.commands.common import non_empty, positive_int
from nas.errors import UserError
from nas.plural import plural
from nas.program import prog_name
from nas.spec.flags import spec_flags

DEFAULT_TOP = 3
DEFAULT_SEEDS = 3
DEFAULT_SCALES = "1,4"
#: the figures beside --report (``STEM_compute.png``, ``STEM_deltas.png``)
FIGURES = ("compute", "deltas")
#: what --json prints of the report
JSON_KEYS = ("baselines", "search_evaluator", "runs", "summary", "rank_correlation", "power_law", "verdicts")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "confirm",
        help="re-train a search's finalists and baselines over seeds and scales",
        description="Confirm a search's winners: train the top K of --study (the Pareto front, lowest loss "
        "first, or the leaderboard) and the baselines for --seeds seeds at each --scales multiple of the "
        "study's budget, on the same pool and storage as search, and report paired statistics, rank "
        "stability and a verdict per finalist. Running it again continues where it stopped.",
    )
    _runs.add_selection_args(p, DEFAULT_TOP, "confirm")
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
    _runs.add_output_args(
        p,
        'print {"runs", "summary", "rank_correlation", "search_evaluator", ...} as JSON',
        "write a Markdown report with plots",
        "its figures",
    )
    p.set_defaults(func=run)


def plan_flags(args: argparse.Namespace) -> str:
    """The flags that chose this confirmation's runs, as a command line would give them again."""
    flags = _runs.chosen_flags(args, DEFAULT_TOP, ["--seeds", str(args.seeds), "--scales", args.scales])
    if args.lrs:
        flags += ["--lrs", args.lrs]
    return shlex.join(flags)


def build(args: argparse.Namespace) -> tuple[Any, ...]:
    """Check every flag and read everything the confirmation needs; writes nothing."""
    from nas.confirm import Plan, confirm_study_name
    from nas.confirm.plan import LR_RANGE, SCALE_RANGE, build_entries, parse_list

    scales = parse_list(args.scales, "--scales", bounds=SCALE_RANGE)
    lrs = parse_list(args.lrs, "--lrs", bounds=LR_RANGE) if args.lrs else []
    numbers = parse_list(args.trial, "--trial", int) if args.trial else None
    flags = spec_flags(args)
    _runs.refuse_keep_weights(args, flags)
    # before anything is read: a report that cannot be written is refused first
    _runs.plan_report(args, FIGURES)
    p = _runs.pick(args, numbers, args.top or DEFAULT_TOP)
    _check_whole_steps(scales, p.spec.budget)
    name = confirm_study_name(args.study)
    known = _runs.entries_of(_runs.existing_study(name, p.url))
    every, wanted, baselines = build_entries(known, p.finals, p.bases)
    _check_runs([*wanted, *baselines], scales, p.spec)
    seed0 = p.seed0
    _check_size(args.seeds, seed0, len(wanted) + len(baselines), len(scales), len(lrs))
    plan = Plan(
        tuple(e.index for e in wanted),
        tuple(b.index for b in baselines),
        tuple(scales),
        tuple(range(seed0, seed0 + args.seeds)),
        tuple(lrs),
    )
    recipe = _runs.with_parametrization(p.spec.recipe, args.parametrization)
    settings = _runs.settings_for(args, flags, name, p, seed0, recipe=recipe)
    _runs.print_notes(p.notes)
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

    _runs.check_last_seed(seeds, seed0, seeds)
    runs = n_archs * n_scales * (seeds + max(n_lrs - 1, 0))
    if runs > MAX_RUNS:
        raise UserError(f"--seeds {seeds}: {runs:,} runs ({plural(n_archs, 'architecture')} x "
                        f"{n_scales} scale(s) x "
                        f"seeds and learning rates); at most {MAX_RUNS:,} in one confirmation")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from nas.confirm import PLAN, build_report
    from nas.confirm.markdown import plot, render
    from nas.confirm.runner import confirm_batches

    # checked again when written (a file that appears meanwhile is kept)
    outputs = _runs.plan_report(args, FIGURES)
    settings, every, plan, url = build(args)
    batches = confirm_batches(plan, every, settings.spec.recipe.lr)
    study = _runs.train_runs(args, settings, every, {PLAN: plan.to_dict()}, batches, plan_flags(args))
    report = build_report(study, url)
    if outputs:
        images = plot(report, report["baselines"], outputs[1:])
        _runs.write_report(outputs, render(report, report["baselines"], [p.name for p in images]))
    where = (
        f" --storage {shlex.quote(args.storage)}"
        if args.storage
        else ("" if args.runs_dir == "runs" else f" --runs-dir {shlex.quote(args.runs_dir)}")
    )
    export = f"export:  {prog_name()} export --study {args.study}{where} --confirmed --out confirmed.yaml"
    data = {k: report[k] for k in JSON_KEYS}
    return _runs.print_report(
        args, data, lambda: render(report, report["baselines"]), settings.study, url, [export]
    )
