"""Property-based tests of the input contract (see ``tests/contract_fuzz.py``).

A fixed, derandomized number of examples per input kind keeps the suite's share
bounded and CI deterministic; ``benchmarks/fuzz.py`` runs many more.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import nas.search.driver.loop
from nas.cli import main
from tests.contract_fuzz import arch_cases, flag_cases, run_case, space_cases

FUZZ = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip


@pytest.fixture(autouse=True)
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    local_pool = nas.search.driver.loop.default_pool

    def no_ray_pool(settings: Any) -> Any:  # every case runs with --local: Ray must never start
        if not settings.spec.resources.local:
            raise AssertionError("a fuzz case started the Ray pool")
        return local_pool(settings)

    monkeypatch.setattr(nas.search.driver.loop, "default_pool", no_ray_pool)


@FUZZ
@given(space_cases())
def test_mutated_spaces_keep_the_contract(case: tuple[list[str], dict[str, Any]]) -> None:
    outcome = run_case(*case, main=main)
    assert outcome.broken is None, (outcome, case[1])


@FUZZ
@given(arch_cases())
def test_mutated_architecture_files_keep_the_contract(case: tuple[list[str], dict[str, Any]]) -> None:
    outcome = run_case(*case, main=main)
    assert outcome.broken is None, (outcome, case[1])


@FUZZ
@given(flag_cases())
def test_mutated_flags_keep_the_contract(case: tuple[list[str], dict[str, Any]]) -> None:
    outcome = run_case(*case, main=main)
    assert outcome.broken is None, outcome
