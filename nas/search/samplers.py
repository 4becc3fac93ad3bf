"""Sampler names the CLI accepts -> Optuna samplers."""

from __future__ import annotations

import optuna

from nas.errors import UserError
from nas.search.evolution import AgingEvolutionSampler
from nas.search.nsga import UnionNSGAIISampler

SAMPLERS = ("nsga2", "evolution", "tpe", "random")


def default_population(trials: int | None) -> int:
    """A population a search of ``trials`` can evolve: a third of the trials, between 4 and 50.

    A search bounded by compute alone (``trials`` None) has no trial count to take a third of: 20.
    """
    return 20 if trials is None else max(4, min(50, trials // 3))


def make_sampler(
    name: str, population: int | None, seed: int, trials: int | None
) -> optuna.samplers.BaseSampler:
    pop = population or default_population(trials)
    if name == "nsga2":
        return UnionNSGAIISampler(population_size=max(2, pop), seed=seed)
    if name == "evolution":
        return AgingEvolutionSampler(population_size=max(2, pop), tournament_size=max(1, min(5, pop // 2)), seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, pop), multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise UserError(f"--sampler {name!r}; valid: {', '.join(SAMPLERS)}")
