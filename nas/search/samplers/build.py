"""Sampler names the CLI accepts -> Optuna samplers, through one registry.

Each sampler is a factory registered under its name in :data:`SAMPLER_FACTORIES`
(``@SAMPLER_FACTORIES.register("name")``; the same :class:`nas.registry.Registry`
type as the attention blocks), called as ``factory(population, seed, trials)``.
``auto`` (the default) is not a sampler but the one that reached random search's
best-of-N in the fewest trials for the study's number of objectives, as measured
in ``docs/BENCHMARKS.md`` (section ``search_efficiency``, by
``benchmarks/search_efficiency.py``): :data:`AUTO` maps each number of objectives
to that name, and :func:`resolve_sampler` turns ``auto`` into it before a study
is made, so the study records what actually ran.  The names a spec accepts
(:data:`nas.spec.sections.SAMPLERS`) are ``auto`` plus this registry's names: a
check at import refuses a registry and a vocabulary that differ.  Adding a
sampler: docs/adding_a_sampler.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import optuna
from optuna.exceptions import ExperimentalWarning

from nas.errors import ConfigError, UserError
from nas.registry import Registry
from nas.search.samplers.evolution import AgingEvolutionSampler
from nas.search.samplers.nsga import UnionNSGAIISampler
from nas.spec.sections import SAMPLERS

#: name -> factory(population, seed, trials) of a resolved sampler (not ``auto``)
SamplerFactory = Callable[[int, int, "int | None"], optuna.samplers.BaseSampler]
SAMPLER_FACTORIES: Registry[SamplerFactory] = Registry("sampler")
#: what ``auto`` runs, by the study's number of objectives (the measured fastest; see the module docstring)
AUTO = {1: "tpe", 2: "tpe", 3: "tpe"}  # 3 (loss+flops+state): not measured; TPE as for 2


def resolve_sampler(name: str, n_objectives: int) -> str:
    """What ``name`` stands for in a study of ``n_objectives`` objectives (``auto`` -> :data:`AUTO`)."""
    return AUTO[n_objectives] if name == "auto" else name


def default_population(trials: int | None) -> int:
    """A population a search of ``trials`` can evolve: a third of the trials, between 4 and 50.

    A search bounded by compute alone (``trials`` None) has no trial count to take a third of: 20.
    """
    return 20 if trials is None else max(4, min(50, trials // 3))


def run_seed(seed: int, n_trials: int) -> int:
    """The sampler's seed for a run that finds ``n_trials`` trials in its study: ``seed`` for a new one.

    Each run builds its sampler afresh; seeded alike every time, a continued search
    would draw again what the previous continuation drew (random search and a first
    generation: all duplicates).  Mixing in the study's size keeps a run reproducible
    from the study it starts on, and a new study's draws as they always were.
    """
    if n_trials == 0:
        return seed
    return int(np.random.SeedSequence([seed, n_trials]).generate_state(1)[0])  # < 2**32, as RandomState needs


def make_sampler(
    name: str, population: int | None, seed: int, trials: int | None
) -> optuna.samplers.BaseSampler:
    """The Optuna sampler ``name`` (resolved: not ``auto``) for a search of ``trials`` trials.

    ``population`` sizes the evolutionary samplers (None: :func:`default_population`)
    and caps TPE's random start-up.  None of them takes a
    ``constraints_func``: the driver stores each candidate's constraint values
    with ``trial.set_constraint`` (``nas.search.space.candidate.constraint_values``),
    which Optuna 5's NSGA-II and TPE read from the trials themselves.
    """
    try:
        factory = SAMPLER_FACTORIES.get(name)
    except ConfigError:
        raise UserError(f"--sampler {name!r}; valid: {', '.join(SAMPLERS)}") from None
    return factory(population or default_population(trials), seed, trials)


@SAMPLER_FACTORIES.register("nsga2")
def _nsga2(pop: int, seed: int, trials: int | None) -> optuna.samplers.BaseSampler:
    return UnionNSGAIISampler(population_size=max(2, pop), seed=seed)


@SAMPLER_FACTORIES.register("evolution")
def _evolution(pop: int, seed: int, trials: int | None) -> optuna.samplers.BaseSampler:
    tournament = max(1, min(5, pop // 2))
    return AgingEvolutionSampler(population_size=max(2, pop), tournament_size=tournament, seed=seed)


@SAMPLER_FACTORIES.register("tpe")
def _tpe(pop: int, seed: int, trials: int | None) -> optuna.samplers.BaseSampler:
    # Five random start-up trials (the space's seed architectures count among them), not
    # Optuna's ten: on the stand-in of benchmarks/search_efficiency.py over 60 seeds, the
    # median trials to random's best-of-N fell from 15.5 to 13 (N = 20) and 18 to 14 (N = 50).
    return tpe(seed, n_startup_trials=min(5, pop))


@SAMPLER_FACTORIES.register("random")
def _random(pop: int, seed: int, trials: int | None) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


def tpe(seed: int, n_startup_trials: int = 10) -> optuna.samplers.TPESampler:
    """Optuna's TPE with a joint model per group of parameters that occur together.

    ``group=True`` is what Optuna recommends for a define-by-run space with
    conditional parameters (a layer's block options exist only where it chose
    that block); ``multivariate=True`` models the genes of a group jointly (and
    ``group`` requires it); ``constant_liar=True`` makes a proposal avoid the
    trials still running, so that several workers asking at once do not get
    the same architecture.  With two objectives Optuna's TPE is MOTPE.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)  # ``group`` is marked experimental
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=n_startup_trials, multivariate=True, group=True, constant_liar=True
        )


if set(SAMPLER_FACTORIES.names()) != set(SAMPLERS) - {"auto"}:  # the spec's vocabulary is the registry's
    raise RuntimeError(
        f"samplers registered ({', '.join(SAMPLER_FACTORIES.names())}) differ from the names a spec accepts "
        f"(nas.spec.sections.SAMPLERS: {', '.join(SAMPLERS)}); add the name to both"
    )
