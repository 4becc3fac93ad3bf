"""Fixtures of the inspection tests: small studies (see ``inspect_studies``) and the CLI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from inspect_studies import fill, make_study

import nas.cli

INSPECT_COMMANDS = ("best", "show", "plot", "export")


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def multi(runs: Path) -> optuna.Study:
    """Multi-objective study 'multi' (loss and FLOPs/token) under ``runs``."""
    study = make_study(runs, "multi")
    fill(study)
    return study


@pytest.fixture
def single(runs: Path) -> optuna.Study:
    """Single-objective study 'single' (loss) under ``runs``."""
    study = make_study(runs, "single", objective="loss")
    fill(study)
    return study


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """``cli(*argv)`` -> (exit status, stdout, stderr) of ``run_search.py`` with the inspection commands.

    Only the four inspection commands are registered: they need neither Ray nor
    the trainer, and importing those would slow every call.
    """
    monkeypatch.setattr(nas.cli, "COMMANDS", INSPECT_COMMANDS)

    def run(*argv: str) -> tuple[int, str, str]:
        try:
            rc = nas.cli.main([str(a) for a in argv])
        except SystemExit as exc:  # argparse errors
            rc = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return rc, out, err

    return run
