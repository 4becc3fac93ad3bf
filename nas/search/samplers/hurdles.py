"""Hurdles: Primer-style early stopping decided by the driver.

At fixed fractions of the budget (``--hurdles 0.25,0.5``) a candidate's
validation loss is compared with a percentile of what earlier trials had at
the same point; a candidate above it stops and ends PRUNED.  Optuna's pruners
refuse multi-objective studies, so the driver does this itself: it computes
the thresholds when it launches a trial, from every trial finished by then,
and the worker stops as soon as it misses one.

Hurdles save compute; they find better candidates only when the compute they
save buys more candidates, i.e. under a search compute budget (``--max-flops``,
:mod:`nas.search.driver.allowance`).  ``benchmarks/hurdle_ranks.py`` measures how well
the loss at each fraction ranks the final loss (poorly at 0.05 of the budget
in the default space, moderately to well from 0.1 on), ``benchmarks/hurdles.py``
what hurdles buy under a compute budget.  The ``evolution`` sampler keeps a
stopped trial in its population, below every COMPLETE one, as Primer did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from evaluators.stopping import fraction_key, missed
from nas.search.storage.records import INTERMEDIATE

__all__ = ["Hurdles", "fraction_key", "hurdle_summary", "missed"]


@dataclasses.dataclass(frozen=True)
class Hurdles:
    """Where the hurdles stand and how high.

    A candidate continues past a hurdle only if its loss there is at or below the
    ``percentile``-th percentile of earlier trials' losses at the same fraction
    (50: it must do at least as well as the median).  A hurdle is active once
    ``min_trials`` earlier trials of distinct architectures have a loss recorded there.
    """

    fractions: tuple[float, ...] = ()
    percentile: float = 50.0
    min_trials: int = 3

    def __post_init__(self) -> None:
        if not 0.0 < self.percentile <= 100.0:
            raise ValueError(f"hurdle percentile must be in (0, 100], got {self.percentile}")
        if self.min_trials < 1:
            raise ValueError(f"hurdle min_trials must be at least 1, got {self.min_trials}")

    def thresholds(self, trials: Iterable[FrozenTrial]) -> dict[str, float]:
        """{fraction key: loss threshold} for the hurdles that are active now.

        Each architecture counts once at each hurdle, with the first loss recorded for it
        there: a duplicate carries its twin's losses and ``arch_id``, and one architecture
        proposed again and again must not pull the percentile toward its own loss.
        """
        losses: dict[str, list[float]] = {fraction_key(f): [] for f in self.fractions}
        counted: set[tuple[str, str]] = set()  # (arch_id, fraction key)
        for t in trials:
            if t.state not in (TrialState.COMPLETE, TrialState.PRUNED):
                continue
            arch_id = t.user_attrs.get("arch_id")
            seen: Mapping[str, float] = t.user_attrs.get(INTERMEDIATE) or {}
            for key, value in seen.items():
                if key not in losses or value is None or not np.isfinite(value):
                    continue
                if arch_id is not None:
                    if (arch_id, key) in counted:
                        continue
                    counted.add((arch_id, key))
                losses[key].append(float(value))
        return {
            key: float(np.percentile(vals, self.percentile))
            for key, vals in losses.items()
            if len(vals) >= self.min_trials
        }

    def stops_at(self, recorded: Mapping[str, float], thresholds: Mapping[str, float]) -> float | None:
        """Where a candidate with the losses ``recorded`` at the hurdles would stop under ``thresholds``.

        The worker stops a candidate at the first hurdle it misses; a candidate trained
        again with the same seed and data reaches the same losses, so its recorded ones
        say where it would stop now.  None when it would pass every hurdle it has a loss
        for: only training it further tells what comes after.
        """
        for f in self.fractions:
            loss = recorded.get(fraction_key(f))
            if loss is None:
                return None
            if missed(thresholds, f, loss):
                return f
        return None


def hurdle_summary(intermediate: Mapping[str, float], fractions: Sequence[float]) -> str:
    return ", ".join(
        f"{fraction_key(f)}: {intermediate[fraction_key(f)]:.4f}"
        for f in fractions
        if fraction_key(f) in intermediate
    )
