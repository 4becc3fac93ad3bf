"""``run_search.py ladder``: a search's finalists and baselines at several sizes, fitted and predicted.

Every flag is checked, and the search study, its data, the baselines and every
size's budget and rungs are read, before anything is written; only then is the
ladder study (``STUDY-ladder`` in the search's storage) created or continued.
Running it again trains only the runs it does not hold yet, and with nothing
left to train re-reports (a new ``--target-flops`` costs no training).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from typing import Any

from nas.commands import _runs
from nas.commands.common import non_empty, positive_int
from nas.errors import ConfigError, UserError
from nas.spec.flags import SpecFlags, spec_flags

DEFAULT_TOP = 1
DEFAULT_SAMPLES = 200
#: --share's default (docs/ladder.md, "Sharing": the synthetic measurement behind it)
DEFAULT_SHARE = "E"
#: the flags that choose a ladder's runs (``plan_flags`` writes them)
PLAN_DESTS = ("trial", "top", "sizes", "seeds", "scale", "tokens", "rungs", "baseline", "baseline_shape")
#: bootstrap draws are refitted as one batch per architecture, (draws x starts x points) tensors: 10**8
#: draws filled memory; 10**4 (2.5 times Epoch's 4,000 resamples) take about 50 times the default's time
MAX_SAMPLES = 10_000
#: the figure beside --report (``STEM_ladder.png``)
FIGURES = ("ladder",)


def register(sub: argparse._SubParsersAction) -> None:
    from nas.ladder.fit import FORMS
    from nas.ladder.plan import DEFAULT_RUNGS, DEFAULT_SEEDS, DEFAULT_SIZES, TOKEN_RULES

    p = sub.add_parser(
        "ladder",
        help="train a search's finalists and baselines at several sizes and predict them at a larger compute",
        description="Train the top K of --study and the baselines (as confirm picks them) at each --sizes "
        "multiple of their parameters, one wsd run per size and seed with rungs, fit loss = E + A/N^alpha + "
        "B/D^beta per architecture with bootstrap intervals, and predict each one's loss at --target-flops "
        "with the probability that it is best. Running it again continues where it stopped.",
    )
    _runs.add_selection_args(p, DEFAULT_TOP, "take")
    p.add_argument(
        "--sizes",
        type=non_empty,
        default=DEFAULT_SIZES,
        help=f"multipliers of each architecture's parameters (default {DEFAULT_SIZES})",
    )
    p.add_argument(
        "--seeds",
        type=non_empty,
        default=str(DEFAULT_SEEDS),
        help="seeds per size, from the study's training seed (recipe.seed) up: one count, or one per "
        f"--sizes entry in its order, e.g. 2,2,2,1,1 (default {DEFAULT_SEEDS})",
    )
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="size 1 trains on this multiple of the study's budget, the other sizes as --tokens says "
        "(default 1)",
    )
    p.add_argument(
        "--tokens",
        choices=TOKEN_RULES,
        default="per-param",
        help="per-param (default): every size on size 1's tokens per parameter; same: every size on "
        "size 1's tokens",
    )
    p.add_argument(
        "--rungs",
        type=non_empty,
        default=DEFAULT_RUNGS,
        help=f"wsd rungs of every run, fractions of it (default {DEFAULT_RUNGS})",
    )
    p.add_argument(
        "--target-flops",
        type=float,
        default=None,
        help="predict at this many training FLOPs (default: 10x the largest measured point)",
    )
    p.add_argument(
        "--target-size",
        type=float,
        default=None,
        help="predict at this multiplier of each architecture (default: the compute-optimal size of "
        "its own fit)",
    )
    p.add_argument(
        "--form",
        choices=FORMS,
        default="chinchilla",
        help="chinchilla (default): E + A/N^alpha + B/D^beta; shared: one exponent for both",
    )
    p.add_argument(
        "--samples",
        type=positive_int,
        default=DEFAULT_SAMPLES,
        help=f"bootstrap draws per architecture (default {DEFAULT_SAMPLES})",
    )
    _add_check_args(p)
    p.add_argument(
        "--no-train", action="store_true", help="report on the runs the ladder study holds; train nothing"
    )
    _runs.add_output_args(
        p,
        'print {"families" (fit and prediction each), "ranking", "crossovers", "runs", ...}',
        "write a Markdown report and its plot",
        "its plot",
    )
    # the plan flags' defaults, as the parser has them (unused_plan_flags tells given flags from defaults)
    plan_defaults = {d: p.get_default(d) for d in PLAN_DESTS}
    p.set_defaults(func=run, plan_defaults=plan_defaults)


def _add_check_args(p: argparse.ArgumentParser) -> None:
    """--share and --check: how the ladder is fitted and how it checks its own predictions."""
    from nas.ladder.check import CHECKS
    from nas.ladder.joint import SHARES

    p.add_argument(
        "--share",
        default=DEFAULT_SHARE,
        metavar="{" + ",".join(SHARES) + "}",
        help=f"what every architecture's fit shares, fitted jointly: {', '.join(SHARES)} (default "
        f"{DEFAULT_SHARE}: one loss floor, the data's; each keeps its own A, B and exponents)",
    )
    p.add_argument(
        "--check",
        nargs="?",
        const="heldout",
        default=None,
        metavar="{" + ",".join(CHECKS) + "}",
        help="how the ladder checks its predictions on itself: heldout (plain --check, and the default with "
        "4 sizes or more): fit without the largest size and predict it; rollout: fit the smallest k sizes "
        "(every k >= 3) and predict every larger one; none: no check and no verdict",
    )


def check_kind(args: argparse.Namespace, sizes: int) -> str | None:
    """The check to run: --check's, or (not given) heldout where ``sizes`` allow one; None for none."""
    if args.check is None:
        return "heldout" if sizes >= check_sizes() else None
    return None if args.check == "none" else args.check


def _positive(value: float | None, flag: str, high: float | None = None) -> None:
    import math

    if value is None:
        return
    if not math.isfinite(value) or value <= 0 or (high is not None and value > high):
        limit = f" and at most {high:g}" if high is not None else ""
        raise UserError(f"{flag} {value:g}: must be a number > 0{limit}")


def parse_flags(
    args: argparse.Namespace,
) -> tuple[list[float], tuple[float, ...], list[int] | None, dict[float, int]]:
    """--sizes, --rungs, --trial and --seeds (a count per size) as values; --scale and the targets
    checked.  Reads nothing."""
    from nas.confirm.plan import parse_list
    from nas.ladder.check import CHECKS
    from nas.ladder.joint import SHARES
    from nas.ladder.plan import seed_counts
    from nas.ladder.report import MIN_DRAWS
    from nas.models.sizes import MAX_SIZE
    from nas.spec.fields import fractions

    given = parse_list(args.sizes, "--sizes", bounds=(1e-6, MAX_SIZE))
    counts = seed_counts(args.seeds, given)
    sizes = sorted(given)
    if len(sizes) < 3:
        raise UserError(
            f"--sizes {args.sizes!r}: a ladder needs 3 sizes or more (the fit has five coefficients)"
        )
    rungs = tuple(parse_list(args.rungs, "--rungs"))
    try:
        fractions(rungs, "--rungs")
    except ConfigError as err:
        raise UserError(str(err)) from None
    _positive(args.scale, "--scale", 1e6)
    _positive(args.target_flops, "--target-flops")
    _positive(args.target_size, "--target-size", MAX_SIZE)
    if args.samples < MIN_DRAWS:
        raise UserError(
            f"--samples {args.samples}: the report's 5th-95th percentile intervals and p(best) need at least "
            f"{MIN_DRAWS} bootstrap draws per architecture (default {DEFAULT_SAMPLES}, at most "
            f"{MAX_SAMPLES:,})"
        )
    if args.samples > MAX_SAMPLES:
        raise UserError(f"--samples {args.samples}: at most {MAX_SAMPLES:,} bootstrap draws per architecture")
    _choice(args.share, "--share", SHARES)
    if args.check is not None:
        _choice(args.check, "--check", CHECKS)
    numbers = parse_list(args.trial, "--trial", int) if args.trial else None
    return sizes, rungs, numbers, counts


def _choice(value: str, flag: str, valid: tuple[str, ...]) -> None:
    # not argparse's choices: its refusal is a usage block, not one line naming the valid values
    if value not in valid:
        raise UserError(f"{flag} {value!r}: valid: {', '.join(valid)}")


def build(args: argparse.Namespace) -> tuple[Any, ...]:
    """Check every flag and read everything the ladder needs; writes nothing."""
    from nas.confirm.plan import MAX_RUNS, build_entries
    from nas.ladder.plan import build_ladder, ladder_study_name
    from nas.spec import Budget

    sizes, rungs, numbers, counts = parse_flags(args)
    flags = spec_flags(args)
    _runs.refuse_keep_weights(args, flags)
    _runs.plan_report(args, FIGURES)
    args.top = args.top or DEFAULT_TOP
    p = _runs.pick(args, numbers, args.top)
    spec = p.spec
    if spec.budget.kind == "seconds":
        raise UserError(
            f"--study {args.study!r} has a seconds budget ({spec.budget}); a ladder scales tokens with "
            "parameters and places rungs at steps, so it needs a steps, tokens or flops budget"
        )
    # the study's, or --parametrization
    chosen = _runs.with_parametrization(spec.recipe, args.parametrization)
    recipe = dataclasses.replace(chosen, schedule="wsd")
    if args.no_train:  # the runs the ladder study holds, as its plan records them: no plan flag is checked
        return _as_recorded(args, flags, p, recipe)
    try:
        budget = Budget(spec.budget.kind, spec.budget.value, rungs)
        spec.replace(recipe=recipe, budget=budget)  # the spec's own checks (warmup + cooldown <= 1, ...)
    except ConfigError as err:
        raise UserError(f"the ladder's recipe (the study's, with schedule wsd and --rungs): {err}") from None
    seed0 = p.seed0
    most = max(counts.values())
    _runs.check_last_seed(args.seeds, seed0, most)
    name = ladder_study_name(args.study)
    ladder = _runs.existing_study(name, p.url)
    if ladder is not None:
        refuse_mixing(ladder, recipe.parametrization)
    known = _runs.entries_of(ladder)
    _, wanted, _ = build_entries([], p.finals, p.bases)
    # the plan at one seed first: the runs are counted before --seeds' tuple (and its runs) exist
    every, plan, notes = build_ladder(known, wanted, sizes, (seed0,), args.scale, budget, recipe, args.tokens,
                                      counts)  # fmt: skip
    runs = sum(m.seeds for m in plan.members)
    if runs > MAX_RUNS:
        raise UserError(f"--seeds {args.seeds}: {runs:,} runs; at most {MAX_RUNS:,} in one ladder")
    plan = dataclasses.replace(plan, seeds=tuple(range(seed0, seed0 + most)))
    if args.check in ("heldout", "rollout") and len(plan.sizes()) < check_sizes():
        raise UserError(check_needs(plan.sizes(), args.sizes))  # refused before training, not after it
    flat = plan.without_interval()
    if flat:  # each resample would be all the runs
        n = len(plan.sizes(flat[0]))
        notes.append(
            f"{', '.join(flat)}: {n} sizes of one seed are too few runs for a bootstrap interval or p(best) "
            "(a fourth size, or --seeds 2, gives them)"
        )
    settings = _runs.settings_for(args, flags, name, p, seed0, recipe=recipe, budget=budget)
    _runs.print_notes(p.notes + notes)
    return settings, every, plan, p.url


def _as_recorded(args: argparse.Namespace, flags: SpecFlags, p: _runs.Picked, recipe: Any) -> tuple[Any, ...]:
    """``--no-train``: the ladder study's own plan and architectures, and settings to report them with.
    The plan flags' defaults are never checked against the study (a short study refused the default
    --rungs and --scale, although --no-train trains nothing)."""
    from nas.ladder.plan import LADDER, LadderPlan, ladder_study_name
    from nas.spec import Budget

    name = ladder_study_name(args.study)
    ladder = _existing(name, p.url)
    if args.parametrization is not None:  # asked for one: the runs it reports must be under it
        refuse_mixing(ladder, recipe.parametrization)
    from nas.spec.sections import named

    for field_name in sorted(flags.section("resources")):  # where runs would train: none do
        raise UserError(
            f"{named('resources', field_name)}: --no-train trains nothing, so it would change nothing; "
            "drop it"
        )
    plan = LadderPlan.from_dict(ladder.user_attrs.get(LADDER) or {})
    every = {e.index: e for e in _runs.entries_of(ladder)}
    budget = Budget(p.spec.budget.kind, p.spec.budget.value)
    settings = _runs.settings_for(args, flags, name, p, p.seed0, recipe=recipe, budget=budget)
    _runs.print_notes(p.notes)
    return settings, every, plan, p.url


def refuse_mixing(ladder: Any, parametrization: str) -> None:
    """Refuse to add runs of ``parametrization`` to a ladder study that trained under another: its fits
    would mix two recipes (the study's recorded spec says which it trained under)."""
    from nas.ladder.report import trained_under

    old = trained_under(ladder)
    if old != parametrization:
        raise UserError(
            f"--parametrization {parametrization} (or the study's recipe): ladder study "
            f"{ladder.study_name!r} trained under {old}, and a ladder never mixes two parametrizations; "
            f"continue it with --parametrization {old}, or delete that study for a new ladder"
        )


def check_sizes() -> int:
    """The sizes ``--check`` needs: a fit's, plus the one it holds out."""
    from nas.ladder.report import MIN_SIZES

    return MIN_SIZES + 1


def check_needs(sizes: list[float], flag: str | None) -> str:
    """Why ``--check`` has nothing to report on a ladder of ``sizes`` (``flag``: the ``--sizes`` typed)."""
    given = f"--sizes {flag} gives" if flag is not None else "the ladder study has"
    return (
        f"--check holds out the larger sizes and fits the others, which needs {check_sizes()} distinct sizes "
        f"or more; {given} {len(sizes)} ({', '.join(f'{s:g}' for s in sizes)}): add a size"
    )


def plan_flags(args: argparse.Namespace) -> str:
    """The flags that chose this ladder's runs, as a command line would give them again."""
    own = ["--sizes", args.sizes, "--seeds", str(args.seeds), "--scale", f"{args.scale:g}", "--tokens",
           args.tokens, "--rungs", args.rungs]  # fmt: skip
    return shlex.join(_runs.chosen_flags(args, DEFAULT_TOP, own))


def unused_plan_flags(args: argparse.Namespace, recorded: str) -> list[str]:
    """``--no-train``: the plan flags given (not at their defaults) whose values differ from those of the
    run that chose the study's runs (``recorded``, as :func:`plan_flags` wrote it): they choose nothing."""
    default = dict(_pairs(plan_flags(argparse.Namespace(**{**vars(args), **args.plan_defaults}))))
    had = dict(_pairs(recorded))
    out = []
    for flag, value in _pairs(plan_flags(args)):
        if flag in ("--top", "--trial") and args.trial is None and args.top is None:
            continue  # neither given: the default pick, whatever the study was laddered with
        if value != default.get(flag) and value != had.get(flag):
            out.append(f"{flag} {value}")
    return out


def _pairs(flags: str) -> list[tuple[str, str]]:
    """``--sizes 1,2 --baseline a --baseline b`` -> [("--sizes", "1,2"), ("--baseline", "a b")]."""
    words = shlex.split(flags)
    out: dict[str, list[str]] = {}
    for flag, value in zip(words[::2], words[1::2], strict=False):
        out.setdefault(flag, []).append(value)
    return [(f, " ".join(v)) for f, v in out.items()]


def run(args: argparse.Namespace) -> int:
    from nas.confirm.runner import FLAGS
    from nas.ladder import LADDER, LadderPlan
    from nas.ladder.check import line
    from nas.ladder.markdown import plot, render
    from nas.ladder.report import build_report

    outputs = _runs.plan_report(args, FIGURES)
    settings, every, plan, url = build(args)
    out = _runs.progress(args)
    for m in sorted(plan.members, key=lambda m: (m.family, m.size)):  # what each size is: its layers
        print(f"ladder: {m.family} size {m.size:g} is {every[m.entry].arch.summary()}", file=out)
    if args.no_train:
        study = _existing(settings.study, url)
        unused = unused_plan_flags(args, study.user_attrs.get(FLAGS) or "")
        if unused:
            print(
                f"note: --no-train reports the runs the study holds; {' '.join(unused)} would choose others "
                "(drop --no-train to train them)",
                file=sys.stderr,
            )
    else:
        study = _runs.train_runs(
            args, settings, every, {LADDER: plan.to_dict()}, [lambda _: plan.runs()], plan_flags(args)
        )
    sizes = LadderPlan.from_dict(study.user_attrs.get(LADDER) or {}).sizes()
    report = build_report(
        study,
        args.study,
        settings.spec.recipe.seq_len,
        args.target_flops,
        args.target_size,
        args.form,
        args.samples,
        check_kind(args, len(sizes)),
        args.share,
    )
    if args.check not in (None, "none") and report["check"] is None:  # --no-train, too few sizes
        print(f"note: {check_needs(report['sizes'], None)}", file=sys.stderr)
    # the verdict on the progress stream too: who reads only the console still sees it
    print(f"ladder: {line(report['verdict'])}", file=out)
    if outputs:
        _runs.write_report(outputs, render(report, [plot(report, outputs[1]).name]))
    return _runs.print_report(args, report, lambda: render(report), settings.study, url)


def _existing(name: str, url: str) -> Any:
    """``--no-train``: the ladder study as it is (refused when there is none)."""
    from nas.ladder.plan import LADDER

    study = _runs.existing_study(name, url)
    if study is None:
        raise UserError(
            f"--no-train: there is no ladder study {name!r} yet; run the ladder without --no-train"
        )
    if LADDER not in study.user_attrs:
        raise UserError(f"--no-train: study {name!r} records no ladder plan")
    return study
