"""The samplers a user could pick instead of ours, for ``search_efficiency.py``.

* Optuna's TPE as its documentation recommends for a define-by-run space with
  conditional parameters: ``multivariate=True, group=True`` (a joint model per
  group of parameters that occur together), Optuna's other defaults (10 random
  start-up trials).
* Syne Tune's regularized evolution (``syne_tune.optimizer.baselines.REA``),
  driven through its ``AskTellScheduler``.  Syne Tune is an optional
  benchmark dependency (``pip install -e .[bench]``); :func:`syne_tune_missing`
  says why the column is skipped without it.

Syne Tune's configuration spaces are flat, with no conditional parameters, so
the space is mapped to a genome whose genes always exist: every parameter that
``SearchSpace.suggest`` can ask for (each layer position's block, each block's
options at each position, each position's FFN genes), found by recording the
parameters of many uniform draws.  A configuration is turned back into an
architecture by ``SearchSpace.suggest(FixedTrial(params))``, which reads only
the genes that apply (a kernel of a layer that did not choose ``mdha``, or a
layer beyond ``n_layers``, is carried but unused).  That is how a user would
have to express the space to Syne Tune, and it is what regularized evolution
acts on: it mutates one gene chosen uniformly, active or not.  Categorical
genes are offered as indices into their choices, because Syne Tune requires
choices of one type and Optuna stores labels.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.exceptions import ExperimentalWarning


def tpe(seed: int) -> optuna.samplers.BaseSampler:
    """Optuna's TPE with the joint, grouped model for conditional spaces."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)  # ``group`` is marked experimental
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)


def syne_tune_missing() -> str | None:
    """None when Syne Tune can be imported, else a line saying how to install it."""
    try:
        import syne_tune  # noqa: F401
    except ImportError:
        return "Syne Tune is not installed (pip install -e .[bench]): skipping its regularized evolution"
    return None


class _Recorder:
    """Enough of Optuna's Trial for ``SearchSpace.suggest``: draws uniformly, records each distribution."""

    def __init__(self, rng: random.Random, seen: dict[str, BaseDistribution]) -> None:
        self.rng, self.seen = rng, seen
        self.params: dict[str, Any] = {}

    def _draw(self, name: str, dist: BaseDistribution, draw: Callable[[], Any]) -> Any:
        self.seen.setdefault(name, dist)
        if name not in self.params:
            self.params[name] = draw()
        return self.params[name]

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._draw(name, CategoricalDistribution(choices), lambda: self.rng.choice(list(choices)))

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> int:
        dist = IntDistribution(low, high, step=step, log=log)
        return self._draw(name, dist, lambda: self.rng.randrange(low, high + 1, step))

    def suggest_float(
        self, name: str, low: float, high: float, step: float | None = None, log: bool = False
    ) -> float:
        return self._draw(
            name, FloatDistribution(low, high, step=step, log=log), lambda: self.rng.uniform(low, high)
        )


def genome(space: Any, draws: int = 4000) -> dict[str, BaseDistribution]:
    """Every parameter ``space.suggest`` asks for in ``draws`` uniform draws, with its distribution."""
    seen: dict[str, BaseDistribution] = {}
    rng = random.Random(0)
    for _ in range(draws):
        space.suggest(_Recorder(rng, seen))
    return {k: d for k, d in sorted(seen.items()) if not d.single()}


def _domain(dist: BaseDistribution) -> Any:
    from syne_tune.config_space import choice, loguniform, uniform

    if isinstance(dist, CategoricalDistribution):
        return choice(list(range(len(dist.choices))))
    if isinstance(dist, IntDistribution):
        # every value of the range as a choice (the spaces' integer ranges are short)
        return choice(list(range(dist.low, dist.high + 1, dist.step)))
    assert isinstance(dist, FloatDistribution)
    return (loguniform if dist.log else uniform)(dist.low, dist.high)


def _value(dist: BaseDistribution, v: Any) -> Any:
    """An Optuna parameter value from a Syne Tune one."""
    if isinstance(dist, CategoricalDistribution):
        return dist.choices[int(v)]
    if isinstance(dist, IntDistribution):
        return int(v)
    return float(v)


def _index(dist: BaseDistribution, v: Any) -> Any:
    """A Syne Tune value from an Optuna one (the inverse of :func:`_value`)."""
    return dist.choices.index(v) if isinstance(dist, CategoricalDistribution) else v


class SyneTuneREA:
    """Syne Tune's regularized evolution over :func:`genome`, behind an ask / tell of architectures.

    ``population`` and ``sample_size`` are REA's population and tournament; the
    benchmark passes the sizes our ``evolution`` uses for the same N (Syne Tune's
    defaults, 100 and 10, would make a search of up to 100 trials a random one).
    ``seeds`` are partial parameter sets put first (the space's seed
    architectures), completed by draws from the seeded generator.
    """

    def __init__(
        self, space: Any, seed: int, population: int, sample_size: int, seeds: Sequence[dict[str, Any]] = ()
    ) -> None:
        from syne_tune.optimizer.baselines import REA
        from syne_tune.optimizer.schedulers.ask_tell_scheduler import AskTellScheduler

        self.space = space
        self.dists = genome(space)
        config_space = {k: _domain(d) for k, d in self.dists.items()}
        rs = np.random.RandomState(seed)
        first = [
            {
                k: _index(self.dists[k], fixed[k]) if k in fixed else dom.sample(random_state=rs)
                for k, dom in config_space.items()
            }
            for fixed in seeds
        ]
        # REA's first population is drawn with numpy's global generator, not its own seeded one
        # (syne_tune/optimizer/schedulers/searchers/regularized_evolution.py, sample_random_config),
        # so the global generator is seeded too, to make a search repeatable.
        np.random.seed(seed)
        self.scheduler = AskTellScheduler(
            REA(
                config_space,
                metric="loss",
                do_minimize=True,
                random_seed=seed,
                population_size=population,
                sample_size=sample_size,
                points_to_evaluate=first,
            )
        )

    def ask(self) -> tuple[Any, Any]:
        """(Syne Tune's trial, the architecture it proposes)."""
        trial = self.scheduler.ask()
        params = {k: _value(self.dists[k], v) for k, v in trial.config.items() if k in self.dists}
        return trial, self.space.suggest(optuna.trial.FixedTrial(params))

    def tell(self, trial: Any, loss: float | None) -> None:
        """Report a loss; None (over the caps) reports an error, which leaves the population alone."""
        if loss is None:
            self.scheduler.base_scheduler.on_trial_error(trial)
        else:
            self.scheduler.tell(trial, {"loss": loss})
