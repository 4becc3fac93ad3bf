"""NSGA-II whose crossover sees every gene, conditional ones included.

Optuna's ``NSGAIISampler`` crosses over only the *intersection* search space:
the parameters every finished trial has.  In a per-layer space most genes are
conditional (``layers.3.attention.mdha.kernel`` exists only where layer 3 chose
``mdha``; ``layers.2.*`` only where ``n_layers`` is 3), so Optuna draws them at
random for every child and selection never acts on them
(``benchmarks/conditional_genes.py`` measures it).

This sampler keeps Optuna's NSGA-II (its generations, elite selection by
non-dominated sorting and crowding distance, constrained domination) and
replaces only the child generation: uniform crossover and resampling mutation
as Optuna's defaults do them, over the *union* of the parents' genes.  A gene
both parents have is swapped with ``swapping_prob``; a gene one parent has is
taken from it; a gene neither has (a block no parent used) is drawn at random
when the child asks for it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.exceptions import ExperimentalWarning
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from nas.search.samplers.evolution import _dominates

Dominates = Callable[[FrozenTrial, FrozenTrial, Sequence[StudyDirection]], bool]


class UnionNSGAIISampler(optuna.samplers.NSGAIISampler):
    """Optuna's NSGA-II with crossover and mutation over every gene the parents have.

    The arguments are NSGA-II's defaults: crossover with probability
    ``crossover_prob`` (else a copy of one member of the parent population),
    each gene swapped between the two parents with ``swapping_prob``, and each
    gene of the child redrawn at random with probability 1 / (its number of genes).
    """

    def __init__(
        self,
        population_size: int = 50,
        seed: int | None = None,
        crossover_prob: float = 0.9,
        swapping_prob: float = 0.5,
    ) -> None:
        self._child_rng = np.random.RandomState(seed)
        self._crossover_prob = crossover_prob
        self._swapping_prob = swapping_prob
        with warnings.catch_warnings():
            # child_generation_strategy is Optuna's own hook for exactly this; it is marked experimental.
            warnings.simplefilter("ignore", ExperimentalWarning)
            super().__init__(
                population_size=population_size, seed=seed, child_generation_strategy=self._child
            )

    def reseed_rng(self) -> None:
        super().reseed_rng()
        self._child_rng.seed()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """Every gene a finished trial has (a gene whose distribution changed is left out)."""
        space: dict[str, BaseDistribution] = {}
        clashing: set[str] = set()
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            for name, dist in t.distributions.items():
                seen = space.setdefault(name, dist)
                if seen != dist:
                    clashing.add(name)
        return {k: d for k, d in space.items() if k not in clashing and not d.single()}

    def _child(
        self, study: Study, search_space: dict[str, BaseDistribution], parents: list[FrozenTrial]
    ) -> dict[str, Any]:
        """A child's genes from ``parents`` (the parent population); genes left out are drawn at random."""
        rng = self._child_rng
        dominates: Dominates = _constrained_dominates if _constrained(parents) else _dominates
        if rng.rand() < self._crossover_prob:
            a = _tournament(study, parents, rng, dominates)
            b = _tournament(study, [t for t in parents if t is not a] or parents, rng, dominates)
        else:
            a = b = parents[rng.choice(len(parents))]
        child: dict[str, Any] = {}
        for name, dist in search_space.items():
            have = [p for p in (a, b) if name in p.params and p.distributions[name] == dist]
            if have:
                swap = len(have) == 2 and rng.rand() < self._swapping_prob
                child[name] = have[1 if swap else 0].params[name]
        rate = 1.0 / max(1, len(child))
        return {k: v for k, v in child.items() if rng.rand() >= rate}


# NSGA-II keys its generations by class name; sharing Optuna's keys lets a study begun with
# NSGAIISampler continue its generations under this sampler (and the other way round).
UnionNSGAIISampler._GENERATION_KEY = optuna.samplers.NSGAIISampler._GENERATION_KEY
UnionNSGAIISampler._PARENT_CACHE_KEY_PREFIX = optuna.samplers.NSGAIISampler._PARENT_CACHE_KEY_PREFIX


def _tournament(
    study: Study, population: Sequence[FrozenTrial], rng: np.random.RandomState, dominates: Dominates
) -> FrozenTrial:
    """Binary tournament, as Optuna's NSGA-II picks each parent."""
    x = population[rng.choice(len(population))]
    y = population[rng.choice(len(population))]
    return x if dominates(x, y, study.directions) else y


def _constrained(trials: Sequence[FrozenTrial]) -> bool:
    return any(t.constraints for t in trials)


def _constrained_dominates(a: FrozenTrial, b: FrozenTrial, directions: Sequence[StudyDirection]) -> bool:
    """Deb's constrained domination: feasible beats infeasible; two infeasible compare by total violation."""
    va = sum(v for v in a.constraints.values() if v > 0)
    vb = sum(v for v in b.constraints.values() if v > 0)
    if va == 0 and vb == 0:
        return _dominates(a, b, directions)
    return va < vb


__all__ = ["UnionNSGAIISampler"]


def record_random_draws(sampler: optuna.samplers.BaseSampler) -> set[tuple[int, str]]:
    """Make ``sampler`` note each (trial number, parameter) it draws at random rather than inherits.

    Optuna routes every parameter a sampler does not set itself through
    ``sample_independent``; wrapping it is how tests/search/test_nsga.py and
    benchmarks/conditional_genes.py measure which genes a child inherits.
    Returns the set that fills as the study runs.
    """
    drawn: set[tuple[int, str]] = set()
    independent = sampler.sample_independent

    def record(study: Study, trial: FrozenTrial, name: str, dist: BaseDistribution) -> Any:
        drawn.add((trial.number, name))
        return independent(study, trial, name, dist)

    sampler.sample_independent = record  # type: ignore[method-assign]
    return drawn
