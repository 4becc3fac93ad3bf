"""docs/adding_a_sampler.md's example, registered in a fresh interpreter, passes Optuna's sampler
contract suites as the shipped samplers do (tests/search/test_sampler_contract.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_examples import ROOT, run_example_through

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

CHECK = """
from nas.search.samplers.build import SAMPLER_FACTORIES, make_sampler
assert "tpe_plain" in SAMPLER_FACTORIES
assert type(make_sampler("tpe_plain", None, 0, 10)).__name__ == "TPESampler"
"""


def test_the_docs_sampler_passes_the_contract_suites(tmp_path: Path) -> None:
    doc, suite = ROOT / "docs" / "adding_a_sampler.md", ROOT / "tests" / "search" / "test_sampler_contract.py"
    assert run_example_through(doc, suite, "tpe_plain", CHECK, tmp_path) > 50  # both suites ran on it
