"""docs/adding_an_evaluator.md's example, registered in a fresh interpreter, passes the evaluator
contract suite (tests/evaluators/test_contract.py) as the shipped evaluators do."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_examples import ROOT, run_example_through

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

CHECK = """
from evaluators import registry
assert "random_score" in registry.EVALUATORS
registry.check("random_score:7")
"""


def test_the_docs_evaluator_passes_the_contract_suite(tmp_path: Path) -> None:
    doc, suite = ROOT / "docs" / "adding_an_evaluator.md", ROOT / "tests" / "evaluators" / "test_contract.py"
    assert run_example_through(doc, suite, "random_score", CHECK, tmp_path) == 3  # the suite's three checks
