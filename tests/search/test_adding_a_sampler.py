"""docs/adding_a_sampler.md's example, registered in a fresh interpreter, passes Optuna's sampler
contract suites as the shipped samplers do (tests/search/test_sampler_contract.py)."""

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
DOC = ROOT / "docs" / "adding_a_sampler.md"

RUN = """
import sys
import pytest
exec(compile(open(sys.argv[1]).read(), "adding_a_sampler.md", "exec"))
from nas.search.samplers.build import SAMPLER_FACTORIES, make_sampler
assert "tpe_plain" in SAMPLER_FACTORIES
assert type(make_sampler("tpe_plain", None, 0, 10)).__name__ == "TPESampler"
args = ["-o", "addopts=", "-q", "-p", "no:cacheprovider", "-W", "ignore", sys.argv[2], "-k", "tpe_plain"]
sys.exit(pytest.main(args))
"""


def test_the_docs_sampler_passes_the_contract_suites(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1
    example = tmp_path / "example.py"
    example.write_text(blocks[0])
    suite = ROOT / "tests" / "search" / "test_sampler_contract.py"
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
    passed = re.search(r"(\d+) passed", out.stdout)
    assert passed and int(passed.group(1)) > 50, out.stdout[-500:]  # both suites ran, on this sampler
