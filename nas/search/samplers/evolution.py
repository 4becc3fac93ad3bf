"""Aging (regularized) evolution as in Primer (So et al., 2021) and Real et al. (2019).

Tournament selection over the newest ``population_size`` finished trials:
draw ``tournament_size`` of them, take the best as parent, copy its genes and
mutate one.  Old trials leave the population by age, not by fitness, which
keeps the search from camping on one lucky early candidate.

Optuna has no such sampler (optunahub's needs the network at run time), so it
is written on ``BaseSampler``.  It works with conditional, define-by-run
parameters: a gene the parent never had (say layer 5 after ``n_layers`` grew)
is drawn at random; a gene that is not asked for is simply dropped.
Multi-objective studies pick the tournament winner among the sample's
non-dominated trials.

A trial a hurdle stopped (PRUNED) stays in the population, as in Primer, and
loses every tournament to a COMPLETE one; of two stopped trials the one that
went further wins, then the lower loss at its last hurdle.  Without it a
search whose hurdles stop most candidates would wait many trials for a
population, and evolve from the few that passed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

_PARENT = "evolution:parent"
_MUTATE = "evolution:mutate"


class AgingEvolutionSampler(BaseSampler):
    """Regularized evolution: tournament over the newest trials, mutate one gene of the winner.

    Until ``population_size`` trials have finished, candidates are drawn at
    random (the first generation).  ``user_attrs["parent"]`` of each evolved
    trial names its parent's trial number and ``user_attrs["mutated"]`` the gene.
    """

    def __init__(self, population_size: int = 20, tournament_size: int = 5, seed: int | None = None) -> None:
        if population_size < 2:
            raise ValueError("population_size must be at least 2")
        if not 1 <= tournament_size <= population_size:
            raise ValueError("tournament_size must be between 1 and population_size")
        self.population_size = population_size
        self.tournament_size = tournament_size
        self._rng = np.random.RandomState(seed)
        self._random = RandomSampler(seed=seed)

    def reseed_rng(self) -> None:
        self._rng.seed()
        self._random.reseed_rng()

    # The whole search happens per parameter; there is no joint (relative) model.
    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return {}

    def population(self, study: Study) -> list[FrozenTrial]:
        """The newest ``population_size`` finished trials (COMPLETE or stopped by a hurdle), oldest first."""
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        done.sort(key=lambda t: t.datetime_complete or t.datetime_start)
        return done[-self.population_size :]

    def select_parent(self, study: Study, population: Sequence[FrozenTrial]) -> FrozenTrial:
        idx = self._rng.choice(
            len(population), size=min(self.tournament_size, len(population)), replace=False
        )
        contenders = [population[i] for i in sorted(idx)]
        # Deb's rule, as Optuna's constrained samplers use it: a candidate within the space's caps
        # beats one over them (told with an infinite loss), and of two over them the lesser excess wins.
        least = min(_violation(t) for t in contenders)
        contenders = [t for t in contenders if _violation(t) == least]
        complete = [t for t in contenders if t.state == TrialState.COMPLETE]
        if not complete:  # every contender was stopped by a hurdle
            return min(contenders, key=_hurdle_rank)
        contenders = complete
        directions = study.directions
        if len(directions) == 1:
            sign = 1.0 if directions[0] == StudyDirection.MINIMIZE else -1.0
            return min(contenders, key=lambda t: sign * t.values[0])
        front = [t for t in contenders if not any(_dominates(o, t, directions) for o in contenders)]
        return front[self._rng.randint(len(front))]

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        if "fixed_params" in trial.system_attrs:
            return  # an enqueued trial (seed architecture or re-run) is not evolved
        population = self.population(study)
        if len(population) < self.population_size:
            return
        parent = self.select_parent(study, population)
        gene = sorted(parent.params)[self._rng.randint(len(parent.params))] if parent.params else None
        # private: before_trial gets a FrozenTrial, which nothing public writes to (as in Optuna's samplers)
        storage = study._storage
        storage.set_trial_system_attr(trial._trial_id, _PARENT, parent.number)
        storage.set_trial_system_attr(trial._trial_id, _MUTATE, gene)
        storage.set_trial_user_attr(trial._trial_id, "parent", parent.number)
        storage.set_trial_user_attr(trial._trial_id, "mutated", gene)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        parent_number = trial.system_attrs.get(_PARENT)
        if parent_number is None:
            return self._random.sample_independent(study, trial, param_name, param_distribution)
        # private: no public lookup of one trial by number; study.get_trials re-reads the database each call
        parent = study._storage.get_trial(
            study._storage.get_trial_id_from_study_id_trial_number(study._study_id, parent_number)
        )
        mutate = trial.system_attrs.get(_MUTATE)
        inherited = param_name in parent.params and param_name != mutate
        # private: distributions have no public membership test (Optuna's own samplers call _contains)
        if inherited and param_distribution._contains(
            parent.distributions[param_name].to_internal_repr(parent.params[param_name])
        ):
            return parent.params[param_name]
        if param_name == mutate and param_name in parent.params:
            return self.mutate(parent.params[param_name], param_distribution)
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def mutate(self, value: Any, dist: BaseDistribution) -> Any:
        """A value of ``dist`` different from ``value`` where the distribution allows one."""
        if isinstance(dist, CategoricalDistribution):
            others = [c for c in dist.choices if c != value]
            return others[self._rng.randint(len(others))] if others else value
        if isinstance(dist, IntDistribution):
            step = dist.step
            options = [v for v in range(dist.low, dist.high + 1, step) if v != value]
            if not options:
                return value
            if dist.log or len(options) <= 16:
                return options[self._rng.randint(len(options))]
            # Large integer ranges: a local move of up to a tenth of the range.
            span = max(step, (dist.high - dist.low) // 10 // step * step)
            delta = int(self._rng.randint(1, span // step + 1)) * step * (1 if self._rng.rand() < 0.5 else -1)
            return int(min(dist.high, max(dist.low, value + delta)))
        if isinstance(dist, FloatDistribution):
            if dist.log:
                lo, hi = math.log(dist.low), math.log(dist.high)
                new = math.exp(min(hi, max(lo, math.log(value) + self._rng.normal(0, (hi - lo) / 6))))
            else:
                new = min(dist.high, max(dist.low, value + self._rng.normal(0, (dist.high - dist.low) / 6)))
            if dist.step is not None:
                new = dist.low + round((new - dist.low) / dist.step) * dist.step
            return float(new)
        raise TypeError(f"cannot mutate a {type(dist).__name__}")

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._random.after_trial(study, trial, state, values)


def _hurdle_rank(t: FrozenTrial) -> tuple[float, float]:
    """A stopped trial's rank (smaller is better): the furthest hurdle it reached, then its loss there."""
    seen = t.user_attrs.get("intermediate") or {}  # nas.search.storage.records.INTERMEDIATE
    if not seen:
        return (0.0, math.inf)
    last = max(seen, key=float)
    return (-float(last), float(seen[last]))


def _violation(t: FrozenTrial) -> float:
    return sum(v for v in t.constraints.values() if v > 0)


def _dominates(a: FrozenTrial, b: FrozenTrial, directions: Sequence[StudyDirection]) -> bool:
    better = False
    for va, vb, d in zip(a.values, b.values, directions, strict=True):
        if d == StudyDirection.MAXIMIZE:
            va, vb = -va, -vb
        if va > vb:
            return False
        if va < vb:
            better = True
    return better


__all__ = ["AgingEvolutionSampler"]
