"""``export``: write a finished trial as an architecture file that ``train --arch`` retrains, or a
trained checkpoint as a Hugging Face directory (``--checkpoint FILE --hf DIR``, :mod:`nas.hf`).

The file holds the ArchConfig, the study's training recipe (seed included),
budget and data (the corpus and tokenizer by path, name, vocabulary size and
content fingerprint: ``nas.data.Corpus.record``), the trial's measured metrics,
and where it came from, so ``run_search.py train --arch FILE`` rebuilds the same
model and trains it the same way on the same tokens.
"""

from __future__ import annotations

import argparse
import datetime as _dt
from typing import Any

from optuna.trial import TrialState

from evaluators.result import measure_of
from nas.commands._study import add_study_args, open_study
from nas.commands.common import non_empty, non_negative_int
from nas.errors import ConfigError, UserError
from nas.files.archfile import save_arch
from nas.files.outputs import Planned, plan_output, recheck, recorded_inputs
from nas.models import ArchConfig
from nas.program import prog_name
from nas.redact import mask_url
from nas.search.reports.lookup import get_trial
from nas.search.reports.tables import best_trial
from nas.search.reports.trial import metrics_of
from nas.search.storage.records import (
    CONFIRM_OF,
    INFEASIBLE,
    derived_kind,
    evaluator_of,
    is_infeasible,
    settings_of,
    state_name,
)
from nas.search.storage.urls import absolute_url


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a trial as an architecture YAML that train --arch accepts, or trained weights as a "
        "Hugging Face directory",
        description="Export a COMPLETE trial as YAML (--out): architecture, the study's training recipe, "
        f"budget and data, the measured metrics and the source; `{prog_name()} train --arch FILE` retrains "
        "it.  Or export trained weights as a Hugging Face directory (--hf): a checkpoint that train --save "
        "wrote (--checkpoint), or the weights a search kept for a trial (--study with --best or --trial N; "
        "docs/export.md).",
    )
    add_study_args(p, required=False)  # not with --checkpoint: run() checks
    which = p.add_mutually_exclusive_group()
    which.add_argument("--trial", type=non_negative_int, help="trial number")
    which.add_argument(
        "--best",
        action="store_true",
        help="the lowest-loss COMPLETE trial (multi-objective: lowest loss on the Pareto front)",
    )
    which.add_argument(
        "--confirmed",
        action="store_true",
        help=f"the best architecture of the study's confirmation ({prog_name()} confirm): lowest mean loss "
        "over seeds at the largest scale, with the confirmation summary in the file's header",
    )
    p.add_argument("--out", help="architecture file to write (FILE.yaml)")
    p.add_argument(
        "--checkpoint",
        metavar="FILE",
        type=non_empty,
        help="trained weights (train --save: .safetensors or .pt) to export with --hf",
    )
    p.add_argument(
        "--hf",
        metavar="DIR",
        type=non_empty,
        help="write the --checkpoint, or with --study and --best/--trial N the weights the search kept for "
        "that trial (resources.keep_weights; no retraining), as a Hugging Face directory (config.json, "
        "model.safetensors, tokenizer, README.md) that transformers loads without nas-lm: a plain Llama for "
        "Llama-shaped architectures, otherwise with its modeling code (trust_remote_code=True)",
    )
    p.add_argument("--force", action="store_true", help="overwrite --out (or write into a non-empty --hf)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.hf is not None and args.checkpoint is None:
        if args.study is None:
            raise UserError(
                "export --hf DIR needs --checkpoint FILE (train --save), or --study S with --best or "
                "--trial N: a trial whose weights the search kept (resources.keep_weights)"
            )
        return _export_kept(args)
    if args.hf is not None or args.checkpoint is not None:
        return _export_hf(args)
    hf = "or --checkpoint FILE --hf DIR to write a Hugging Face directory"
    if args.study is None:
        raise UserError(f"export: the following arguments are required: --study ({hf})")
    if args.trial is None and not args.best and not args.confirmed:
        raise UserError(f"export: one of the arguments --trial --best --confirmed is required ({hf})")
    if args.out is None:
        raise UserError("export: the following arguments are required: --out (the FILE.yaml to write)")
    out = plan_output(args.out, "--out", force=args.force, example="best.yaml")  # checked again when written
    study, url = open_study(args)
    recheck([out], recorded_inputs(settings_of(study).get("data"), "the study's"))  # never into its corpus
    if args.confirmed:
        return _export_confirmed(study, url, out, args)
    trial = _complete_trial(study, args)
    if trial.user_attrs.get("arch") is None:
        raise UserError(f"--trial {trial.number} of study {study.study_name!r} has no architecture recorded")
    try:
        arch = ArchConfig.from_dict(trial.user_attrs["arch"])
    except ConfigError as err:
        raise UserError(f"trial {trial.number}: its recorded architecture does not validate: {err}") from None
    settings = settings_of(study)
    recipe, budget = settings.get("recipe"), settings.get("budget")
    source: dict[str, Any] = {
        "study": study.study_name,
        "storage": mask_url(absolute_url(url)),  # a record: from any directory
        "trial": trial.number,
        "arch_id": arch.arch_id,
        "exported_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if CONFIRM_OF in study.user_attrs:  # one confirm run: its own seed, lr and scale of the budget
        recipe, budget = _confirm_run(study, trial, settings)
        source.update(
            confirms=study.user_attrs[CONFIRM_OF],
            name=trial.user_attrs.get("name"),
            role=trial.user_attrs.get("role"),
        )
    for key in ("seed_arch", "parent", "duplicate_of"):
        if trial.user_attrs.get(key) is not None:
            source[key] = trial.user_attrs[key]
    save_arch(
        out,
        arch,
        recipe=recipe,
        budget=budget,
        data=settings.get("data"),
        metrics=metrics_of(trial, evaluator_of(study)),
        source=source,
    )
    measure = measure_of(evaluator_of(study))
    value = (
        f"val loss {trial.values[0]:.4f}"
        if measure.lm
        else f"{measure.name} {measure.shown(trial.values[0]):.4f}"
    )
    summary = trial.user_attrs.get("summary", "")
    print(f"wrote {out.path}: trial {trial.number} ({value}) {summary}")
    if not settings:
        print("note: the study records no recipe or budget; train --arch will use its defaults")
    if not measure.lm:  # the study scored it without training a language model: nothing to reproduce
        print(
            f"train it as a language model with: {prog_name()} train --arch {out.path}  (the study scored "
            f"it by {measure.evaluator}, not by a validation loss)"
        )
    elif trial.user_attrs.get("threads"):  # train reuses the recorded thread count: loss reproduces exactly
        print(f"retrain it with: {prog_name()} train --arch {out.path}")
    else:  # CPU sums depend on the thread count; workers use --cpus-per-trial threads (1 by default)
        print(
            f"retrain it with: {prog_name()} train --arch {out.path} --threads 1  "
            "(on CPU, --threads equal to the search's --cpus-per-trial reproduces its loss exactly)"
        )
    return 0


def _complete_trial(study: Any, args: argparse.Namespace) -> Any:
    """The trial ``--best`` or ``--trial N`` names; refused unless it is COMPLETE and was trained."""
    trial = best_trial(study) if args.best else get_trial(study, args.trial)
    if trial.state != TrialState.COMPLETE or is_infeasible(trial):
        why = trial.user_attrs.get("fail_reason") or trial.user_attrs.get(INFEASIBLE)
        why = f" ({why})" if why else ""
        raise UserError(
            f"--trial {trial.number} of study {study.study_name!r} is {state_name(trial)}{why}; "
            f"only COMPLETE trials can be exported (see: {prog_name()} best)"
        )
    return trial


def _export_kept(args: argparse.Namespace) -> int:
    """``--study S --best|--trial N --hf DIR``: the weights the search kept for that trial
    (``resources.keep_weights``), exported exactly as ``--checkpoint FILE --hf DIR`` exports a file:
    no retraining.  A trial without kept weights is refused in one line naming the commands that
    rebuild them; nothing is written."""
    import shlex

    from nas.search.reports.trial import origin

    if args.confirmed or args.out is not None:
        flag = "--confirmed" if args.confirmed else "--out"
        raise UserError(
            f"export --study --hf takes no {flag}: it exports a search trial's kept weights (--best or "
            f"--trial N); write {flag}'s architecture file in a command of its own"
        )
    if args.trial is None and not args.best:
        raise UserError(
            "export --study S --hf DIR needs --best or --trial N (the trial whose kept weights to export)"
        )
    study, url = open_study(args)
    if (kind := derived_kind(study)) is not None:
        raise UserError(f"--study {study.study_name!r} is {kind[0]}, which keeps no weights; {_REBUILD}")
    trial = _complete_trial(study, args)
    path = _kept_checkpoint(study, trial, url, args, shlex.quote)
    # the very path of `export --checkpoint FILE --hf DIR`, given the kept file
    plain: dict[str, Any] = {"checkpoint": str(path), "study": None, "trial": None, "best": False,
                             "confirmed": False}  # fmt: skip
    plain["found"] = {  # the model card and config.json say where the model came from
        "study": study.study_name,
        "storage": mask_url(absolute_url(url)),  # a record: from any directory
        "trial": trial.number,
        "origin": origin(trial),
        "search_loss": trial.values[0] if trial.values else None,
    }
    code = _export_hf(argparse.Namespace(**{**vars(args), **plain}))
    print(f"from trial {trial.number} of study {study.study_name!r}: the weights the search kept, {path} "
          "(SHA-256 checked against the trial's record; nothing retrained)")  # fmt: skip
    return code


_REBUILD = "export the architecture (--out FILE.yaml) and train it with train --arch FILE.yaml --save"


def _kept_checkpoint(study: Any, trial: Any, url: str, args: argparse.Namespace, quote: Any) -> Any:
    """The checkpoint file the search kept for ``trial`` (a duplicate: its twin's), checked against the
    trial's record (present, same SHA-256); else a UserError naming the commands that rebuild it."""
    from nas.files.outputs import sha256_file
    from nas.search.driver.context import weights_dir
    from nas.search.driver.weights import kept_file, record_of
    from nas.search.storage.records import stored_spec

    n, name = trial.number, study.study_name
    owner, rec = trial, record_of(trial)
    twin = trial.user_attrs.get("duplicate_of")
    if rec is None and twin is not None:  # it reused an earlier trial's result: that trial trained it
        owner = get_trial(study, twin)
        rec = record_of(owner)
    whose = f"trial {n}" + (f" (a duplicate of trial {owner.number})" if owner is not trial else "")
    path, why = None, None
    if rec is None:
        spec = stored_spec(study)
        k = spec.resources.keep_weights if spec is not None else 0
        why = f"its weights were not kept (the search ran with resources.keep_weights {k})"
        if k and len(study.directions) > 1:  # several objectives: only the Pareto front is kept, at most K
            why = (f"its weights were not kept (not on the Pareto front as it finished; the search keeps at "
                   f"most {k} of the front, resources.keep_weights)")  # fmt: skip
        elif k:
            why = f"its weights were not kept (not among the best {k} as it finished, resources.keep_weights)"
    else:
        path = kept_file(rec, weights_dir(args.runs_dir, name, url))
        if not path.is_file():
            why = (
                f"its kept weights {path} are gone (the search deletes the file of a trial that drops out "
                "of the best resources.keep_weights)"
            )
        elif sha256_file(path) != rec.get("sha256"):
            why = f"its kept weights {path} changed since the search wrote them (SHA-256 differs)"
    if why is None:
        return path
    where = (
        f" --storage {quote(mask_url(args.storage))}"
        if args.storage
        else ("" if args.runs_dir == "runs" else f" --runs-dir {quote(args.runs_dir)}")
    )
    prog, stem = prog_name(), f"trial_{n}"
    raise UserError(
        f"{whose} of study {name!r}: {why}; rebuild them with `{prog} export --study {quote(name)}{where} "
        f"--trial {n} --out {stem}.yaml && {prog} train --arch {stem}.yaml --save {stem}.safetensors`, then "
        f"`{prog} export --checkpoint {stem}.safetensors --hf {quote(args.hf)}`"
    )


def _confirm_run(study: Any, trial: Any, settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A confirm run's recipe (its seed and lr) and budget (its scale of the study's), from the trial's
    fixed parameters; refused when the trial does not say which run it was."""
    from nas.confirm.plan import Run
    from nas.confirm.winner import recipe_and_budget

    run = Run.from_params(trial.params or {})
    if run is None or "budget" not in settings:
        raise UserError(
            f"--trial {trial.number} of study {study.study_name!r} ({derived_kind(study)[0]} of "  # type: ignore[index]
            f"{study.user_attrs[CONFIRM_OF]!r}) does not record its scale, seed and lr, so its budget and "
            f"seed are not known; export the confirmation's winner with `{prog_name()} export --study "
            f"{study.user_attrs[CONFIRM_OF]} --confirmed`"
        )
    return recipe_and_budget(settings, {"seed": run.seed, "lr": run.lr, "scale": run.scale})


def _export_confirmed(search: Any, url: str, out: Planned, args: argparse.Namespace) -> int:
    """``--confirmed``: the confirmation's winner, its recipe (seed, lr) and budget at the deciding scale."""
    import shlex

    from nas.confirm.runner import FLAGS
    from nas.confirm.winner import confirmed_winner, header_lines, open_confirmation, recipe_and_budget

    if (kind := derived_kind(search)) is not None:
        raise UserError(
            f"--study {search.study_name!r} is {kind[0]}; pass the search study "
            f"{search.user_attrs[CONFIRM_OF]!r} with --confirmed"
        )
    study = open_confirmation(search.study_name, url)
    where = (
        f" --storage {shlex.quote(mask_url(args.storage))}"
        if args.storage
        else ("" if args.runs_dir == "runs" else f" --runs-dir {shlex.quote(args.runs_dir)}")
    )
    flags = study.user_attrs.get(FLAGS)
    finish = f"`{prog_name()} confirm --study {shlex.quote(search.study_name)}{where}" + (
        f" {flags}`" if flags else "` with the flags of the confirm that started it"
    )
    w = confirmed_winner(study, url, finish)
    trial, run = w["trial"], w["run"]
    settings = settings_of(study)
    recipe, budget = recipe_and_budget(settings, run)
    source: dict[str, Any] = {
        "study": study.study_name,
        "storage": mask_url(absolute_url(url)),  # a record: from any directory
        "trial": trial.number,
        "arch_id": run["arch_id"],
        "confirms": search.study_name,
        "name": run["name"],
        "role": run["role"],
        "search_trial": w["best"]["search_trial"],
        "exported_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    confirmed = {"verdict": w["verdict"], "scales": w["rows"]}
    save_arch(
        out,
        ArchConfig.from_dict(trial.user_attrs["arch"]),
        header=header_lines(w),
        recipe=recipe,
        budget=budget,
        data=settings.get("data"),
        metrics=metrics_of(trial),
        source=source,
        confirmed=confirmed,
    )
    best = w["best"]
    print(
        f"wrote {out.path}: {best['name']} (mean val loss {best['mean']:.4f} over {best['n']} seed(s) at "
        f"{best['scale']:g}x) {trial.user_attrs.get('summary', '')}"
    )
    if w["verdict"]:
        print(f"verdict: {w['verdict']}")
    print(f"retrain it with: {prog_name()} train --arch {out.path}")
    return 0


def _export_hf(args: argparse.Namespace) -> int:
    """``--checkpoint FILE --hf DIR``: a Llama-shaped checkpoint as a plain Llama directory, any other
    decoder-only one as a directory carrying its modeling code (``trust_remote_code``,
    :mod:`nas.hf.bundle`)."""
    import time

    from nas.files.checkpoint import load_checkpoint
    from nas.hf.directory import check_dir_reads, plan_dir
    from nas.hf.export import check_exportable, check_finite, export_hf

    if args.hf is None or args.checkpoint is None:
        missing = "--hf DIR" if args.hf is None else "--checkpoint FILE"
        raise UserError(
            f"export needs {missing}: export --checkpoint FILE --hf DIR writes a checkpoint (train --save) "
            "as a Hugging Face directory (from a study's trial: not yet, its weights are not kept)"
        )
    others = [f for f, v in (("--study", args.study), ("--out", args.out)) if v is not None]
    others += [
        f for f, v in (("--trial", args.trial), ("--best", args.best), ("--confirmed", args.confirmed)) if v
    ]
    if others:
        raise UserError(f"export --checkpoint --hf takes no {others[0]} (it exports the checkpoint's model)")
    for module in ("transformers", "tokenizers"):
        try:
            __import__(module)
        except ImportError:
            raise UserError(
                f"export --hf needs {module}, which is not installed: pip install 'nas-lm[hf]'"
            ) from None
    out = plan_dir(args.hf, "--hf", force=args.force, keep=(args.checkpoint,))
    start = time.perf_counter()
    doc = load_checkpoint(args.checkpoint)
    check_dir_reads(out, "--hf", recorded_inputs(doc.get("data"), "the checkpoint's"))  # not into its corpus
    if getattr(args, "found", None):  # a search's kept trial (export --study S --best --hf)
        doc = {**doc, "found": args.found}
    check_exportable(doc["arch"], args.checkpoint)  # before any work: nothing written
    check_finite(doc["model"], args.checkpoint)
    done = export_hf(doc, out, args.checkpoint, force=args.force)
    llama = done["llama"]
    seconds = time.perf_counter() - start
    size = sum((out / f).stat().st_size for f in done["files"])  # what this export wrote, not what was there
    code = done.get("code", [])
    files = [f for f in done["files"] if f not in code]
    if code:
        files.append(f"modeling_nas.py with the {len(code) - 1} engine modules it imports")
    what = "LlamaForCausalLM" if llama else "NasForCausalLM"
    print(
        f"wrote {out}: {', '.join(files)} ({size / 1e6:.2f} MB) in {seconds:.1f} s; "
        f"{what} logits equal the checkpoint's to {done['max_logit_difference']:.2g}; "
        f"tokenizer: {done['tokenizer']}"
    )
    if llama:
        print(f'load it with: LlamaForCausalLM.from_pretrained("{out}") (transformers, no nas-lm needed)')
    else:
        print(
            f'load it with: AutoModelForCausalLM.from_pretrained("{out}", trust_remote_code=True) '
            "(torch and transformers, no nas-lm needed)"
        )
    return 0
