"""The space's caps on a sampled architecture, and how a candidate over them is told.

A candidate over the space's ``constraints`` is never trained.  It is told
COMPLETE with an infinite loss, its analytic FLOPs per token and Optuna's
constraint values (``trial.set_constraint``: positive means over the cap), so
that NSGA-II's constrained domination and TPE learn to avoid the region (a
FAIL trial teaches them nothing).  The read-side (leaderboard, Pareto front,
best, show, export, plots) treats such a trial as INFEASIBLE, never as a result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import optuna
from optuna.trial import Trial

from nas.search.storage.records import INFEASIBLE
from nas.spec.sections import OBJECTIVE_METRICS


def over_caps(caps: Mapping[str, float], params: int, flops_per_token: float) -> list[str]:
    """Why a candidate breaks the space's ``constraints`` (``max_params``, ``max_flops_per_token``);
    [] if it does not."""
    over = []
    if params > caps.get("max_params", math.inf):
        over.append(f"params {params:,} > max_params {caps['max_params']:,.0f}")
    if flops_per_token > caps.get("max_flops_per_token", math.inf):
        over.append(
            f"FLOPs/token {flops_per_token:,.0f} > max_flops_per_token {caps['max_flops_per_token']:,.0f}"
        )
    return over


def constraint_values(caps: Mapping[str, float], params: int, flops_per_token: float) -> dict[str, float]:
    """Optuna constraint values, one per cap: the relative excess (> 0 over the cap, <= 0 within it)."""
    measured = {"max_params": float(params), "max_flops_per_token": float(flops_per_token)}
    return {key: measured[key] / cap - 1.0 for key, cap in caps.items() if key in measured}


def tell_infeasible(
    study: optuna.Study,
    trial: Trial,
    reason: str,
    flops_per_token: float,
    objective: str,
    state_bytes: int = 0,
) -> tuple[str, str]:
    """Tell an over-cap candidate COMPLETE-but-infeasible (see the module docstring); (state, text)."""
    trial.set_user_attr(INFEASIBLE, reason)
    # The loss is infinite, so that nothing that forgets the constraint can rank it as good.
    measured = {
        "val_loss": math.inf,
        "flops_per_token": float(flops_per_token),
        "state_bytes": float(state_bytes),
    }
    study.tell(trial, [measured[key] for key in OBJECTIVE_METRICS[objective]])
    return "INFEASIBLE", reason
