"""From a sampled architecture to a worker's job: the space's caps and the trial payload."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import Trial

from nas.execution.payload import TrialPayload
from nas.models import ArchConfig
from nas.search.settings import SearchSettings


def over_caps(caps: Mapping[str, float], params: int, flops_per_token: float) -> list[str]:
    """Why a candidate breaks the space's ``constraints`` (``max_params``, ``max_flops_per_token``); [] if not."""
    over = []
    if params > caps.get("max_params", math.inf):
        over.append(f"params {params:,} > max_params {caps['max_params']:,.0f}")
    if flops_per_token > caps.get("max_flops_per_token", math.inf):
        over.append(
            f"FLOPs/token {flops_per_token:,.0f} > max_flops_per_token {caps['max_flops_per_token']:,.0f}"
        )
    return over


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
    )


def _hparams(params: dict[str, Any], arch_id: str, number: int) -> dict[str, Any]:
    """The trial's parameters as TensorBoard's HParams table takes them (scalars and strings)."""
    out: dict[str, Any] = {"trial": number, "arch_id": arch_id}
    for k, v in params.items():
        out[k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out
