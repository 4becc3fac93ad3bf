"""What ``confirm`` and ``ladder`` share: commands that train a search's finalists and baselines as a list
of runs in a study beside the search's, then report on it.

Each takes the same study and architectures (:func:`add_selection_args`, :func:`pick`), trains under the
search's spec with the resources its own flags give (:func:`settings_for`), hands its plan's runs to the
one runner (:func:`train_runs`: :func:`nas.confirm.runner.run_lists` with SIGTERM stopping it as Ctrl-C
does) and writes its report (:func:`plan_report`, :func:`write_report`, :func:`print_report`).  A third
command of that kind is its plan and its report.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from nas.commands._study import add_study_args
from nas.commands.common import jsonable, non_empty, positive_int
from nas.errors import ConfigError, UserError
from nas.files.outputs import Planned, plan_output, write_output
from nas.files.paths import recorded
from nas.program import prog_name
from nas.spec.flags import SpecFlags, add_spec_flags
from nas.spec.sections import named
from nas.spec.training import PARAMETRIZATIONS


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


def add_output_args(p: argparse.ArgumentParser, json_help: str, report_help: str, figures: str) -> None:
    """The flags such a command ends with: its resources (``--resources.keep_weights`` parsed, to be
    refused in one line), ``--json``, ``--report`` and ``--force`` (which replaces ``figures`` too)."""
    add_spec_flags(p, ("resources",), hidden=("resources.keep_weights",))  # refused: a search's
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--report", default=None, metavar="FILE.md", help=report_help)
    p.add_argument(
        "--force",
        action="store_true",
        help=f"replace --report and {figures} even if this tool did not write them",
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
    from nas.spec.flags import from_source

    if not isinstance(record, dict):
        return None if record in (None, DEFAULT_CORPUS) else str(record)
    corpus = record.get("corpus")
    spec = None if corpus in (None, DEFAULT_CORPUS) else str(corpus)
    if spec not in (None, DEFAULT_PARALLEL) and not Path(spec).expanduser().exists():  # built-ins: no paths
        raise UserError(
            f"the study's corpus {spec} is not there any more; confirm and ladder train on the search's data"
        )
    reading = {k: record[k] for k in ("text_field", "on_bad_record") if k in record}
    try:
        return resolve_data(spec, record.get("tokenizer"), **reading)
    except UserError as err:  # the study's tokenizer gone: never typed as --tokenizer
        raise from_source(err, "the study's record", {}) from None


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


def chosen_flags(args: argparse.Namespace, top: int, own: Sequence[str]) -> list[str]:
    """The flags that chose a list of runs, as a command line would give them again: the architectures
    (``--trial``, or ``--top`` with ``top`` its default), the command's ``own`` flags, the baselines."""
    which = ["--trial", args.trial] if args.trial else ["--top", str(args.top or top)]
    flags = [*which, *own]
    for f in args.baseline or ():  # recorded: a file absolute, so it names the same one from anywhere
        flags += ["--baseline", recorded(f)]
    if args.baseline_shape != "finalist":
        flags += ["--baseline-shape", args.baseline_shape]
    return flags


def baseline_files(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(flag, path) of each ``--baseline`` file: inputs a report never replaces (``nas.files.outputs``)."""
    from nas.shipped import arch_path

    return [("--baseline", arch_path(f)) for f in args.baseline or ()]


def plan_report(args: argparse.Namespace, figures: Sequence[str]) -> list[Planned]:
    """The report and the figures beside it (``STEM_KIND.png`` for each of ``figures``), checked now
    under nas.files.outputs' rule: new files, or what an earlier run of the command wrote and nobody changed
    since."""
    if args.report is None:
        return []
    report = plan_output(
        args.report, "--report", force=args.force, example=f"{args.command}.md", reads=baseline_files(args)
    )
    stem = report.path.with_suffix("")
    paths = [stem.with_name(f"{stem.name}_{kind}.png") for kind in figures]
    return [report] + [plan_output(f, "--report (its figure)", force=args.force, example=None) for f in paths]


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

    @property
    def seed0(self) -> int:
        """The seed the search trained every trial with (``recipe.seed``, not its sampler's): the first
        seed of every list of runs."""
        return int(self.spec.recipe.seed)


def pick(args: argparse.Namespace, numbers: list[int] | None, top: int) -> Picked:
    """The search study ``--study``, its spec and data (checked unchanged), its finalists (``top`` of
    them, or ``--trial``) and the baselines (``--baseline``, ``--baseline-shape``), as confirm and ladder
    take them."""
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
        from nas.files.outputs import check_not_input

        check_not_input(args.report, "--report")
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


def check_last_seed(seeds: object, seed0: int, count: int) -> None:
    """Refuse ``--seeds`` (as typed: ``seeds``) whose ``count`` seeds from ``seed0`` up pass the last seed."""
    from nas.validate import MAX_SEED

    if seed0 + count - 1 > MAX_SEED:
        raise UserError(
            f"--seeds {seeds}: seeds start at the study's training seed {seed0} and end at most at {MAX_SEED}"
        )


def existing_study(name: str, url: str) -> Any:
    """The study ``name`` in the storage ``url``, read-only; None when there is none yet."""
    import optuna

    from nas.search.storage.records import study_exists
    from nas.search.storage.urls import open_storage

    storage = open_storage(url, read_only=True)
    return optuna.load_study(study_name=name, storage=storage) if study_exists(storage, name) else None


def entries_of(study: Any) -> list[Any]:
    """The architectures the runs of a confirm or ladder study index (none without a study)."""
    from nas.confirm.plan import Entry
    from nas.confirm.runner import ARCHS

    return [] if study is None else [Entry.from_dict(d) for d in study.user_attrs.get(ARCHS) or []]


def _search_record(name: str, study: Any) -> tuple[dict[str, Any], Any, Any]:
    """The search study's settings record, its spec and its space, refused if they cannot be confirmed.

    The spec is the one the study keeps; a study from before studies kept one gets it
    from its record and its space file (which must not have changed).
    """
    from nas.confirm import CONFIRM_OF
    from nas.files.yamlsafe import read_yaml
    from nas.search.space.load import spec_of
    from nas.search.storage.records import derived_kind, settings_of, stored_spec
    from nas.shipped import space_path
    from nas.spec import Budget, TrainRecipe

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


def progress(args: argparse.Namespace) -> TextIO:
    """Where the progress lines go: stdout, or stderr when stdout is for ``--json``."""
    return sys.stderr if args.json else sys.stdout


def train_runs(
    args: argparse.Namespace,
    settings: Any,
    every: Sequence[Any],
    record: Mapping[str, Any],
    batches: Sequence[Callable[[Any], Any]],
    flags: str,
) -> Any:
    """The study after the one runner (:func:`nas.confirm.runner.run_lists`) trained ``batches``, the
    runs of the plan ``record`` records; SIGTERM stops it as Ctrl-C does (:mod:`nas.commands.stopping`)."""
    from nas.commands.stopping import sigterm_stops_the_driver
    from nas.confirm.runner import run_lists

    with sigterm_stops_the_driver():
        return run_lists(settings, args.study, every, record, batches, flags=flags, out=progress(args))


def write_report(outputs: list[Planned], text: str) -> None:
    """The Markdown ``text`` to the report :func:`plan_report` planned (its figures are drawn already)."""
    write_output(outputs[0], lambda tmp: tmp.write_text(text, encoding="utf-8"))


def print_report(
    args: argparse.Namespace,
    data: Any,
    text: Callable[[], str],
    study: str,
    url: str,
    more: Sequence[str] = (),
) -> int:
    """The command's last words: ``data`` as JSON (``--json``), else the report as ``text()`` gives it,
    where ``--report`` went, how to list the runs of ``study``, and ``more`` lines."""
    if args.json:
        print(json.dumps(jsonable(data), indent=2))
        return 0
    print()
    print(text())
    if args.report:
        print(f"report:  {args.report}")
    print(f"runs:    {prog_name()} best --study {study} --storage {shlex.quote(url)}")
    for line in more:
        print(line)
    return 0
