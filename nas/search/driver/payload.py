"""From a sampled architecture to a worker's job: the trial payload, made from the run's settings.

The space's caps, checked before a candidate gets this far, are in
:mod:`nas.search.space.candidate`; the payload's fields in :mod:`nas.execution.payload`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.trial import Trial

from nas.execution.payload import TrialPayload
from nas.models import ArchConfig
from nas.search.driver.settings import SearchSettings


def trial_payload(s: SearchSettings, study: optuna.Study, trial: Trial, arch: ArchConfig) -> TrialPayload:
    """What a worker needs to run ``trial``; the hurdle thresholds come from the trials finished so far."""
    return TrialPayload(
        arch=arch.to_dict(),
        recipe=s.recipe.to_dict(),
        budget=s.budget.to_dict(),
        data=s.data,
        device=s.device if s.device != "auto" else ("cuda" if s.gpus_per_trial > 0 else "cpu"),
        hurdles=list(s.hurdles.fractions),
        thresholds=s.hurdles.thresholds(study.get_trials(deepcopy=False)) if s.hurdles.fractions else {},
        logdir=str(Path(s.tb_dir) / f"trial_{trial.number:05d}") if s.tb_dir else None,
        hparams=_hparams(trial.params, arch.arch_id, trial.number),
        evaluator=s.evaluator,
        compile=s.compile,
        prescreen=s.prescreen,
    )


def _hparams(params: dict[str, Any], arch_id: str, number: int) -> dict[str, Any]:
    """The trial's parameters as TensorBoard's HParams table takes them (scalars and strings)."""
    out: dict[str, Any] = {"trial": number, "arch_id": arch_id}
    for k, v in params.items():
        out[k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out
