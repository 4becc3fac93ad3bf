"""The aging-evolution sampler: first generation random, then tournament + one mutation."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from nas.search.samplers.evolution import AgingEvolutionSampler


def objective(trial):
    x = trial.suggest_categorical("x", ["a", "b", "c", "d"])
    n = trial.suggest_int("n", 1, 4)
    total = {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.0}[x]
    for i in range(n):  # conditional genes, as per-layer parameters are
        total += trial.suggest_float(f"layer.{i}", 0.0, 1.0)
    return total


def test_first_generation_is_random_then_children_differ_from_parent_by_one_gene():
    sampler = AgingEvolutionSampler(population_size=6, tournament_size=3, seed=1)
    study = optuna.create_study(sampler=sampler)
    study.optimize(objective, n_trials=40)
    trials = study.trials
    assert all("parent" not in t.user_attrs for t in trials[:6])
    children = [t for t in trials[6:] if "parent" in t.user_attrs]
    assert len(children) == 34
    for child in children:
        parent = trials[child.user_attrs["parent"]]
        gene = child.user_attrs["mutated"]
        assert gene in parent.params
        differing = {k for k in child.params if k in parent.params and child.params[k] != parent.params[k]}
        assert differing <= {gene}
        # genes the parent lacked were drawn fresh; genes it had, other than the mutated one, are copied
        for k in parent.params.keys() & child.params.keys() - {gene}:
            assert child.params[k] == parent.params[k]


def test_parent_comes_from_the_newest_population_and_wins_its_tournament():
    sampler = AgingEvolutionSampler(population_size=5, tournament_size=5, seed=0)
    study = optuna.create_study(sampler=sampler)
    study.optimize(objective, n_trials=30)
    for child in study.trials[5:]:
        earlier = [t for t in study.trials[: child.number] if t.state.name == "COMPLETE"]
        population = earlier[-5:]
        # tournament over the whole population: the parent is its best member
        assert child.user_attrs["parent"] == min(population, key=lambda t: t.value).number


def test_evolution_improves_on_random_start():
    sampler = AgingEvolutionSampler(population_size=8, tournament_size=4, seed=3)
    study = optuna.create_study(sampler=sampler)
    study.optimize(objective, n_trials=80)
    first = min(t.value for t in study.trials[:8])
    assert study.best_value < first
    assert study.best_params["x"] == "d"


def test_multi_objective_parent_is_not_dominated_in_its_tournament():
    def two(trial):
        x = trial.suggest_float("x", 0, 1)
        y = trial.suggest_float("y", 0, 1)
        return x + y, (1 - x) + y

    sampler = AgingEvolutionSampler(population_size=6, tournament_size=6, seed=0)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.optimize(two, n_trials=25)
    for child in study.trials[6:]:
        population = [t for t in study.trials[: child.number]][-6:]
        parent = study.trials[child.user_attrs["parent"]]
        assert not any(
            all(o <= p for o, p in zip(t.values, parent.values, strict=True)) and t.values != parent.values
            for t in population
        )


def test_enqueued_trials_are_not_evolved():
    sampler = AgingEvolutionSampler(population_size=2, tournament_size=1, seed=0)
    study = optuna.create_study(sampler=sampler)
    study.optimize(objective, n_trials=4)
    study.enqueue_trial({"x": "a", "n": 1, "layer.0": 0.5})
    study.optimize(objective, n_trials=1)
    last = study.trials[-1]
    assert last.params["x"] == "a" and "parent" not in last.user_attrs


@pytest.mark.parametrize(
    "value, dist",
    [
        ("a", CategoricalDistribution(["a", "b", "c"])),
        (3, IntDistribution(1, 5)),
        (40, IntDistribution(0, 1000, step=10)),
        (0.5, FloatDistribution(0.0, 1.0)),
        (1e-3, FloatDistribution(1e-5, 1e-1, log=True)),
    ],
)
def test_mutation_changes_the_value_and_stays_in_range(value, dist):
    sampler = AgingEvolutionSampler(seed=0)
    for _ in range(20):
        new = sampler.mutate(value, dist)
        assert new != value
        assert dist._contains(dist.to_internal_repr(new))


def test_trials_stopped_by_hurdles_stay_in_the_population_below_the_complete_ones():
    sampler = AgingEvolutionSampler(population_size=4, tournament_size=4, seed=0)
    study = optuna.create_study(sampler=sampler)
    dist = {"x": CategoricalDistribution(["a", "b", "c", "d"])}

    def stopped(x, reached):  # pruned at its last hurdle with these losses
        study.add_trial(
            optuna.trial.create_trial(
                state=optuna.trial.TrialState.PRUNED,
                params={"x": x},
                distributions=dist,
                user_attrs={"intermediate": reached},
            )
        )

    stopped("a", {"0.1": 3.0})
    stopped("b", {"0.1": 2.0, "0.3": 2.9})  # went further: better than "a" despite the higher last loss
    stopped("c", {"0.1": 1.0})
    population = sampler.population(study)
    assert len(population) == 3  # stopped trials count: no need to wait for COMPLETE ones
    assert sampler.select_parent(study, population).params["x"] == "b"
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE, value=9.0, params={"x": "d"}, distributions=dist
        )
    )
    population = sampler.population(study)
    assert len(population) == 4
    assert sampler.select_parent(study, population).params["x"] == "d"  # any COMPLETE beats the stopped
    study.ask({"x": dist["x"]})
    assert study.trials[-1].user_attrs["parent"] == 3  # evolved at once, from the COMPLETE trial
