"""Conditional genes (a block's own options) get selection pressure: NSGA-II passes them on to children,
and the default multi-objective sampler (``auto``) learns them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from nas.models.cost import compute
from nas.search.samplers.build import make_sampler, resolve_sampler
from nas.search.samplers.nsga import UnionNSGAIISampler, record_random_draws
from nas.search.space.load import load_space

PRIMER = Path(__file__).resolve().parents[2] / "search_spaces" / "primer.yaml"
GEN = optuna.samplers.NSGAIISampler._GENERATION_KEY


def _loss(arch: Any) -> float:
    # A landscape in which the block's own option matters: kernel 7 is best, mha worst.
    score = {"mha": 1.0, 3: 0.6, 5: 0.3, 7: 0.0}
    total = 0.0
    for layer in arch.layers:
        spec = layer.attention
        total += score["mha"] if spec.type == "mha" else score[spec.options.to_dict()["kernel"]]
        total += 0.1 * (layer.ffn.activation != "squared_relu")
    return total


def _search(sampler: optuna.samplers.BaseSampler, trials: int) -> tuple[optuna.Study, set[tuple[int, str]]]:
    """A two-objective search of primer.yaml; also returns the (trial, gene) pairs drawn at random."""
    space = load_space(PRIMER)
    drawn = record_random_draws(sampler)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    for _ in range(trials):
        trial = study.ask()
        arch = space.suggest(trial)
        study.tell(trial, [_loss(arch), float(compute(arch).fwd_flops_per_token)])
    return study, drawn


def _random_share_of_kernels(study: optuna.Study, drawn: set[tuple[int, str]]) -> float:
    genes = [
        (t.number, k)
        for t in study.trials
        if t.system_attrs.get(GEN, 0) >= 1
        for k in t.params
        if k.endswith(".mdha.kernel")
    ]
    assert len(genes) >= 40
    return sum(g in drawn for g in genes) / len(genes)


def test_optuna_nsga2_redraws_every_conditional_gene():
    """Why our nsga2 is not Optuna's own NSGA-II: a child never inherits a kernel."""
    study, drawn = _search(optuna.samplers.NSGAIISampler(population_size=12, seed=0), 72)
    assert _random_share_of_kernels(study, drawn) == 1.0


def _share7(ts: list[optuna.trial.FrozenTrial]) -> float:
    """Share of kernel 7 (the best in :func:`_loss`) among the mdha kernels of ``ts``."""
    ks = [v for t in ts for k, v in t.params.items() if k.endswith(".mdha.kernel")]
    return sum(k == 7 for k in ks) / len(ks)


def test_the_default_multi_objective_sampler_learns_conditional_genes():
    # auto -> TPE grouped: the kernel (present only where a layer chose mdha) is in the joint model of its
    # group, so the second half of a search favours kernel 7; drawn at random it would be a third.
    late = [
        t
        for seed in range(3)
        for t in _search(make_sampler(resolve_sampler("auto", 2), None, seed, 72), 72)[0].trials[36:]
    ]
    assert _share7(late) > 0.45
    random = [
        t for seed in range(3) for t in _search(optuna.samplers.RandomSampler(seed=seed), 72)[0].trials[36:]
    ]
    assert _share7(random) < 0.4


def test_nsga2_inherits_conditional_genes():
    sampler = make_sampler("nsga2", None, seed=0, trials=36)
    assert isinstance(sampler, UnionNSGAIISampler)
    study, drawn = _search(sampler, 72)
    # Only mutations (one gene in n) and genes neither parent had are drawn at random.
    assert _random_share_of_kernels(study, drawn) < 0.3
    # Selection acts on the kernel: the last generation uses kernel 7 more than the first.
    assert _share7(study.trials[-12:]) > _share7(study.trials[:12])


def test_a_study_begun_with_optuna_nsga2_continues_its_generations():
    study = optuna.create_study(
        directions=["minimize", "minimize"], sampler=optuna.samplers.NSGAIISampler(population_size=4, seed=0)
    )
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)), n_trials=8)
    study.sampler = UnionNSGAIISampler(population_size=4, seed=0)
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)), n_trials=4)
    assert [t.system_attrs[GEN] for t in study.trials[-4:]] == [2, 2, 2, 2]


def test_a_gene_only_one_parent_has_is_taken_from_it():
    sampler = UnionNSGAIISampler(population_size=2, seed=0, crossover_prob=1.0)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    dist = optuna.distributions.CategoricalDistribution([3, 5, 7])
    a = optuna.trial.create_trial(
        params={"j": 3, "k": 7}, distributions={"j": dist, "k": dist}, values=[0.0, 1.0]
    )
    b = optuna.trial.create_trial(params={"j": 5}, distributions={"j": dist}, values=[1.0, 0.0])
    # Over many children, "k" is either taken from the one parent that has it or mutated away (left out).
    kept = [sampler._child(study, {"j": dist, "k": dist}, [a, b]).get("k") for _ in range(50)]
    assert set(kept) <= {7, None}
    assert kept.count(7) > 0


@pytest.mark.parametrize("name", ["nsga2", "evolution", "tpe", "random"])
def test_every_sampler_name_still_builds(name):
    assert isinstance(make_sampler(name, None, 0, 30), optuna.samplers.BaseSampler)
