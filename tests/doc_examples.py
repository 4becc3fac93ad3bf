"""Running a doc page's one Python example through a contract suite, in a fresh interpreter.

docs/adding_an_evaluator.md and docs/adding_a_sampler.md each show one complete example; their
tests register it in a new interpreter (so the registries of the test session stay as they are)
and run the suite that checks the shipped evaluators or samplers, selected for the new name.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN = """
import sys
import pytest
exec(compile(open(sys.argv[1]).read(), sys.argv[3], "exec"))
exec(sys.argv[4])
args = ["-o", "addopts=", "-q", "-p", "no:cacheprovider", "-W", "ignore", sys.argv[2], "-k", sys.argv[5]]
sys.exit(pytest.main(args))
"""


def run_example_through(doc: Path, suite: Path, name: str, check: str, tmp_path: Path) -> int:
    """Exec ``doc``'s example, then ``check`` (code), then ``suite`` for ``name``; the tests that passed."""
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
    assert len(blocks) == 1, f"{doc.name} should show one Python example, shows {len(blocks)}"
    example = tmp_path / "example.py"
    example.write_text(blocks[0])
    argv = [sys.executable, "-c", RUN, str(example), str(suite), doc.name, check, name]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    passed = re.search(r"(\d+) passed", out.stdout)
    assert passed, out.stdout[-500:]
    return int(passed.group(1))
