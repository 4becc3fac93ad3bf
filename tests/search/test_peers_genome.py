"""The flat genome benchmarks/_peers.py gives Syne Tune: every conditional gene, mapped back faithfully."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import optuna
import pytest

from nas.search.space.load import load_space
from nas.search.space.sampling import _RandomTrial

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _peers import _index, _value, genome  # noqa: E402  (the benchmark's own mapping)


@pytest.mark.parametrize("name", ["default", "full"])
def test_genome_rebuilds_every_draw_whatever_its_inactive_genes(name):
    space = load_space(ROOT / "search_spaces" / f"{name}.yaml")
    genes = genome(space, draws=2000)
    assert "layers.0.attention.mdha.kernel" in genes  # conditional genes are in it
    rng = random.Random(1)
    for _ in range(50):
        drawn = _RandomTrial(rng)
        arch = space.suggest(drawn)
        searched = {k: v for k, v in drawn.params.items() if k in genes}
        # what Syne Tune holds: an index or value for every gene, the inactive ones arbitrary
        config = {
            k: _index(d, searched[k]) if k in searched else _index(d, _any(d, rng)) for k, d in genes.items()
        }
        params = {k: _value(genes[k], v) for k, v in config.items()}
        assert space.suggest(optuna.trial.FixedTrial(params)) == arch


def _any(dist: optuna.distributions.BaseDistribution, rng: random.Random) -> object:
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return rng.choice(dist.choices)
    if isinstance(dist, optuna.distributions.IntDistribution):
        return rng.randrange(dist.low, dist.high + 1, dist.step)
    return rng.uniform(dist.low, dist.high)
