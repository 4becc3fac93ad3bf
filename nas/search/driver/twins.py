"""Architectures a search has measured already: their results are reused, never trained again.

The driver matches a candidate to an earlier trial by ``arch_id``.  Within one
study the budget, recipe, seed, data and evaluator are fixed (a study continues
only under the same ones: :meth:`RunContext.fingerprint`), so an
architecture trained again reaches the same losses, in the same order.

* A COMPLETE twin: its result is reused as it is (:func:`nas.search.driver.outcome.reuse`).
* A twin a hurdle stopped (PRUNED): the hurdle thresholds move as trials finish,
  so its recorded losses are checked against today's
  (:meth:`nas.search.samplers.hurdles.Hurdles.stops_at`).  Where they still miss a hurdle,
  the candidate ends PRUNED at that hurdle without training; where they pass
  every hurdle the twin reached, its stop no longer holds and the candidate trains.

A reused trial carries ``duplicate_of`` (the twin's number) and the twin's
losses at the hurdles; it spent no training FLOPs
(:func:`nas.search.driver.allowance.trained_flops`), and a hurdle threshold counts its
architecture once (:meth:`nas.search.samplers.hurdles.Hurdles.thresholds`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from nas.search.driver.outcome import reuse
from nas.search.samplers.hurdles import Hurdles, fraction_key
from nas.search.storage.records import EVALUATOR_PREFIXES, INTERMEDIATE


@dataclasses.dataclass(frozen=True)
class Stopped:
    """A trained trial that a hurdle stopped: its number and user attributes (hurdle losses, metrics)."""

    number: int
    attrs: Mapping[str, Any]

    @property
    def intermediate(self) -> dict[str, float]:
        """{fraction key: validation loss} at the hurdles it reached."""
        return dict(self.attrs.get(INTERMEDIATE) or {})


class Twins:
    """For each architecture measured so far, the trial whose result a new candidate reuses.

    ``keys`` are the user attributes a reused trial copies from its twin (the metrics).
    """

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = tuple(keys)
        self.complete: dict[str, FrozenTrial] = {}  # arch_id -> the first COMPLETE trial of it
        self.stopped: dict[str, Stopped] = {}  # arch_id -> the trained PRUNED trial that went furthest

    @classmethod
    def of(cls, trials: Iterable[FrozenTrial], keys: Sequence[str]) -> Twins:
        """The twins in a study's ``trials`` (a continued search reuses what earlier runs measured)."""
        twins = cls(keys)
        for t in sorted(trials, key=lambda t: t.number):
            arch_id = t.user_attrs.get("arch_id")
            if arch_id is None:
                continue
            if t.state == TrialState.COMPLETE:
                twins.add_complete(arch_id, t)
            elif t.state == TrialState.PRUNED and "duplicate_of" not in t.user_attrs:
                twins.add_stopped(arch_id, t.number, t.user_attrs)
        return twins

    def add_complete(self, arch_id: str, trial: FrozenTrial) -> None:
        """Record a COMPLETE trial of ``arch_id`` (the first one measured stays the twin)."""
        self.complete.setdefault(arch_id, trial)

    def add_stopped(self, arch_id: str, number: int, attrs: Mapping[str, Any]) -> None:
        """Record a trained trial of ``arch_id`` that a hurdle stopped.

        Of two, the one with losses at more hurdles is kept: it can answer for more
        thresholds (the earlier of equals, whose losses are the same).
        """
        new = Stopped(number, dict(attrs))
        old = self.stopped.get(arch_id)
        if old is None or len(new.intermediate) > len(old.intermediate):
            self.stopped[arch_id] = new

    def _keys(self, attrs: Mapping[str, Any]) -> tuple[str, ...]:
        """What a reused trial copies from a twin with ``attrs``: metrics and the evaluator's own numbers."""
        return (*self.keys, *(k for k in attrs if k.startswith(EVALUATOR_PREFIXES)))

    def reuse(
        self, study: optuna.Study, trial: Trial, arch_id: str, hurdles: Hurdles
    ) -> tuple[str, str] | None:
        """End ``trial`` with its twin's result, (state, text); None when it must be trained."""
        twin = self.complete.get(arch_id)
        if twin is not None:
            return reuse(study, trial, twin, (*self._keys(twin.user_attrs), INTERMEDIATE))
        stopped = self.stopped.get(arch_id)
        if stopped is None or not hurdles.fractions:
            return None
        thresholds = hurdles.thresholds(study.get_trials(deepcopy=False))  # as the worker would get them
        at = hurdles.stops_at(stopped.intermediate, thresholds)
        if at is None:
            return None
        return self._stop_again(study, trial, stopped, hurdles, at)

    def _stop_again(
        self, study: optuna.Study, trial: Trial, twin: Stopped, hurdles: Hurdles, at: float
    ) -> tuple[str, str]:
        """Tell ``trial`` PRUNED at hurdle ``at``, as training it would have ended, from ``twin``'s losses."""
        recorded = twin.intermediate
        stop = fraction_key(at)
        inter = {fraction_key(f): recorded[fraction_key(f)] for f in hurdles.fractions if f <= at}
        if max(recorded, key=float) == stop:
            # It stops where the twin stopped: the twin's metrics are what this run would measure.
            # (Stopping earlier, it would train less; the twin's metrics are then left out.)
            for key in self._keys(twin.attrs):
                if key in twin.attrs:
                    trial.set_user_attr(key, twin.attrs[key])
        trial.set_user_attr(INTERMEDIATE, inter)
        if (
            len(study.directions) == 1
        ):  # as a trained trial reports them (nas.search.driver.outcome.tell_result)
            for key, loss in inter.items():
                trial.report(loss, step=int(round(float(key) * 1000)))
        trial.set_user_attr("pruned_at", at)
        trial.set_user_attr("duplicate_of", twin.number)
        study.tell(trial, state=TrialState.PRUNED)
        missed = (f"the prescreen (value {inter[stop]:.4f})" if at == 0.0 and "prescreen_value" in twin.attrs
                  else f"hurdle {at:g} (loss {inter[stop]:.4f})")  # fmt: skip
        return (
            "PRUNED",
            f"same architecture as trial {twin.number}: it still misses {missed}; not trained again",
        )
