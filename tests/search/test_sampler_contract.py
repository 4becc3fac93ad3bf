"""Optuna's own contract suites for samplers, run over every sampler this project registers.

``optuna.testing.pytest_samplers`` is what Optuna checks its samplers with: every
distribution kind (float, log, stepped, int, categorical), conditional and dynamic
spaces, NaN objectives, partially fixed parameters, and (for samplers that take
several objectives) multi-objective studies.  A sampler registered in
``nas.search.samplers.build.SAMPLER_FACTORIES`` is run through them as the driver
builds it (``make_sampler``), with a small population so that the evolutionary
samplers pass their first generation within the suites' trials.
"""

from __future__ import annotations

from collections.abc import Callable

import optuna
import pytest
from optuna.testing.pytest_samplers import BasicSamplerTestCase, MultiObjectiveSamplerTestCase

from nas.search.samplers.build import SAMPLER_FACTORIES, make_sampler
from nas.search.samplers.evolution import AgingEvolutionSampler
from nas.search.samplers.nsga import UnionNSGAIISampler

NAMES = SAMPLER_FACTORIES.names()


def _factory(name: str) -> Callable[[], optuna.samplers.BaseSampler]:
    return lambda: make_sampler(name, population=4, seed=0, trials=12)


class TestBasicContract(BasicSamplerTestCase):
    @pytest.fixture(params=NAMES)
    def sampler(self, request: pytest.FixtureRequest) -> Callable[[], optuna.samplers.BaseSampler]:
        return _factory(request.param)


class TestMultiObjectiveContract(MultiObjectiveSamplerTestCase):
    @pytest.fixture(params=NAMES)
    def sampler(self, request: pytest.FixtureRequest) -> Callable[[], optuna.samplers.BaseSampler]:
        return _factory(request.param)


def test_the_suites_run_the_projects_own_samplers() -> None:
    """The parametrization is the registry's names, and they build the project's own samplers
    (aging evolution and the union-space NSGA-II), not only Optuna's."""
    built = {type(make_sampler(name, 4, 0, 12)) for name in NAMES}
    assert {AgingEvolutionSampler, UnionNSGAIISampler} <= built
