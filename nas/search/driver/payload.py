"""From a sampled architecture to a worker's job: the trial payload, made from the run's spec.

The recipe, the budget and the spec's other sections travel as their own ``to_dict`` forms; the
rest is what the driver resolves for the worker (the corpus, the hurdles' thresholds, the
TensorBoard run; the device, resolved in the resources section it sends).  The space's caps,
checked before a candidate gets this far, are in :mod:`nas.search.space.candidate`; the
payload's fields in :mod:`nas.execution.payload`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import Trial

from nas.execution.payload import TrialPayload
from nas.files.paths import recorded
from nas.models import ArchConfig
from nas.search.driver.context import RunContext

#: the spec's sections a payload carries whole under ``spec`` (recipe and budget have keys of their own)
SECTIONS = ("data", "search", "resources")


def trial_payload(run: RunContext, study: optuna.Study, trial: Trial, arch: ArchConfig) -> TrialPayload:
    """What a worker needs to run ``trial``; the hurdle thresholds come from the trials finished so far."""
    spec, hurdles, tb = run.spec, run.hurdles, run.tb_dir
    return TrialPayload(
        arch=arch.to_dict(),
        recipe=spec.recipe.to_dict(),
        budget=spec.budget.to_dict(),
        data=recorded(run.data),  # a worker of a cluster started elsewhere may run in another directory
        hurdles=list(hurdles.fractions),
        thresholds=hurdles.thresholds(study.get_trials(deepcopy=False)) if hurdles.fractions else {},
        logdir=os.path.abspath(Path(tb) / f"trial_{trial.number:05d}") if tb else None,
        hparams=_hparams(trial.params, arch.arch_id, trial.number),
        spec=_sections(run),
    )


def _sections(run: RunContext) -> dict[str, dict[str, Any]]:
    """The spec's sections as the worker reads them, the resources' device resolved (``auto``: a GPU
    when each trial has one, else the CPU)."""
    sections = {name: getattr(run.spec, name).to_dict() for name in SECTIONS}
    r = run.spec.resources
    device = r.device if r.device != "auto" else ("cuda" if r.gpus_per_trial > 0 else "cpu")
    sections["resources"] = {**sections["resources"], "device": device}
    return sections


def _hparams(params: dict[str, Any], arch_id: str, number: int) -> dict[str, Any]:
    """The trial's parameters as TensorBoard's HParams table takes them (scalars and strings)."""
    out: dict[str, Any] = {"trial": number, "arch_id": arch_id}
    for k, v in params.items():
        out[k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out
