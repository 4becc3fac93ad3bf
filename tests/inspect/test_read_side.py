"""The read side (best, show, plot) runs without importing torch or the trainer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from nas.search.storage.records import SPEC
from nas.spec import Spec

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

CHECK = """
import sys
from nas.cli import main
rc = main(sys.argv[1:])
heavy = ("torch", "ray", "evaluators.lm", "nas.models", "nas.search.driver.loop")
heavy = sorted(m for m in heavy if m in sys.modules)
print("IMPORTED", heavy)
sys.exit(rc)
"""


def _run(*argv: str) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-c", CHECK, *argv], capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout + out.stderr


def test_best_show_and_plot_import_neither_torch_nor_the_trainer(multi: optuna.Study, runs: Path, tmp_path):
    tiny = Path(__file__).parents[1] / "search" / "tiny_space.yaml"
    multi.set_user_attr(
        SPEC, Spec.from_dict(yaml.safe_load(tiny.read_text())).to_dict()
    )  # what `search` keeps
    where = ("--study", "multi", "--runs-dir", str(runs))
    for argv in (
        ("best", *where),
        ("best", *where, "--by-layer"),
        ("show", *where),
        ("show", *where, "--spec"),
        ("plot", *where, "--out", str(tmp_path / "figs")),
    ):
        rc, text = _run(*argv)
        assert rc == 0, text
        assert "IMPORTED []" in text, (argv, text)
        if "--spec" in argv:  # the spec comes back as the YAML it was made from
            assert (
                Spec.from_dict(yaml.safe_load(text.split("IMPORTED")[0])).to_dict() == multi.user_attrs[SPEC]
            )
    assert (tmp_path / "figs" / "pareto.png").is_file()


def test_a_trial_in_full_computes_its_layers_with_the_block_formulas(multi: optuna.Study, runs: Path):
    """``show --trial`` gives per-layer FLOPs, which come from the blocks' formulas (torch modules)."""
    number = next(t.number for t in multi.trials if t.state == optuna.trial.TrialState.COMPLETE)
    rc, text = _run("show", "--study", "multi", "--runs-dir", str(runs), "--trial", str(number))
    assert rc == 0, text
    assert "IMPORTED ['nas.models', 'torch']" in text
