"""docs/adding_an_evaluator.md's example, registered in a fresh interpreter, passes the evaluator
contract suite (tests/evaluators/test_contract.py) as the shipped evaluators do."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adding_an_evaluator.md"

RUN = """
import sys
import pytest
exec(compile(open(sys.argv[1]).read(), "adding_an_evaluator.md", "exec"))
from evaluators import registry
assert "random_score" in registry.EVALUATORS
registry.check("random_score:7")
sys.exit(pytest.main(["-o", "addopts=", "-q", "-p", "no:cacheprovider", "-W", "ignore", sys.argv[2],
                      "-k", "random_score"]))
"""


def test_the_docs_evaluator_passes_the_contract_suite(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1
    example = tmp_path / "example.py"
    example.write_text(blocks[0])
    suite = ROOT / "tests" / "evaluators" / "test_contract.py"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", RUN, str(example), str(suite)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"\b3 passed", out.stdout), out.stdout[
        -500:
    ]  # the suite's three checks, on this evaluator
