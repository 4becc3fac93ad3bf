"""``--recipe.parametrization`` on the command line: train at and away from the base shape, what a run
records, the refusals (one line, exit 2), and ladders that never mix two parametrizations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from nas.cli import main

TRAIN = ["train", "--arch", "vanilla", "--steps", "6", "--threads", "1", "--json", "--recipe.batch_size", "4"]


def _exit(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse
        return int(exc.code)


def _train(capsys: pytest.CaptureFixture[str], corpus: Path, *extra: str) -> dict[str, Any]:
    assert main([*TRAIN, "--data", str(corpus), *extra]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_completep_at_size_1_is_standard_and_grown_it_is_not(corpus_dir: Path, capsys) -> None:
    standard = _train(capsys, corpus_dir)
    complete = _train(capsys, corpus_dir, "--recipe.parametrization", "completep")
    assert complete["val_loss"] == standard["val_loss"]  # every multiplier is 1: bit for bit
    assert standard["parametrization"] == {"name": "standard"}
    assert complete["parametrization"] == {
        "name": "completep", "base_width": 128, "base_depth": 4, "width_mult": 1.0, "depth_mult": 1.0,
    }  # fmt: skip
    grown_standard = _train(capsys, corpus_dir, "--size", "2")
    grown = _train(capsys, corpus_dir, "--size", "2", "--recipe.parametrization", "completep")
    assert grown["val_loss"] != grown_standard["val_loss"]
    # --size grows from the file's architecture, which stays the base: d_model 160, 5 layers against 128 x 4
    assert grown["parametrization"]["base_width"] == 128 and grown["parametrization"]["width_mult"] == 1.25


def test_a_stated_base_shape_is_what_the_multipliers_are_relative_to(corpus_dir: Path, capsys) -> None:
    out = _train(capsys, corpus_dir, "--recipe.parametrization", "completep", "--recipe.base_width", "64",
                 "--recipe.base_depth", "2")  # fmt: skip
    assert out["parametrization"]["width_mult"] == 2.0 and out["parametrization"]["depth_mult"] == 2.0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--recipe.parametrization", "muP"], "recipe.parametrization: must be one of standard, completep"),
        (["--recipe.base_width", "64"], "recipe.base_width: a base shape only applies under"),
        (["--recipe.parametrization", "completep", "--recipe.base_depth", "0"], "recipe.base_depth"),
        (["--arch", "seq2seq", "--recipe.parametrization", "completep"], "completep is for decoder-only"),
    ],
)
def test_train_refuses_in_one_line(corpus_dir: Path, capsys, flags: list[str], message: str) -> None:
    assert _exit([*TRAIN, *flags]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.out == ""


@pytest.mark.parametrize("command", ["ladder", "confirm"])
def test_an_unknown_parametrization_flag_is_one_line(command: str, capsys) -> None:
    assert _exit([command, "--study", "s", "--parametrization", "mup"]) == 2
    err = capsys.readouterr().err
    assert "--parametrization" in err and "completep" in err and err.count("\n") == 1


# -- ladders -----------------------------------------------------------------------------------
SPACE = """
name: ladder-p
globals: {d_model: 32, n_heads: 4, n_layers: 2, max_len: 16}
layers:
  attention: {mha: {}}
  ffn: {activation: relu, mult: 2}
recipe: {batch_size: 4, eval_batches: 2, log_every: 4}
budget: {steps: 24}
"""


@pytest.fixture(scope="module")
def searched(tmp_path_factory, corpus_dir: Path) -> str:
    root = tmp_path_factory.mktemp("ladder-p")
    (root / "space.yaml").write_text(SPACE, encoding="utf-8")
    url = f"sqlite:///{root}/s.db"
    argv = ["search", "--space", str(root / "space.yaml"), "--study", "s", "--storage", url, "--data",
            str(corpus_dir), "--trials", "1", "--local", "--no-tensorboard"]  # fmt: skip
    assert main(argv) == 0
    return url


@pytest.mark.slow
def test_a_completep_ladder_is_relative_to_size_1_and_never_mixes(searched: str, capsys) -> None:
    ladder = ["ladder", "--study", "s", "--storage", searched, "--local", "--no-tensorboard", "--baseline",
              "vanilla", "--sizes", "0.42,1,3.4", "--samples", "20", "--json"]  # fmt: skip
    assert main([*ladder, "--parametrization", "completep"]) == 0
    assert json.loads(capsys.readouterr().out)["parametrization"] == "completep"  # the report says so
    study = optuna.load_study(study_name="s-ladder", storage=searched)
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(done) == 6
    records = [t.user_attrs["parametrization"] for t in done]
    # every size of both architectures against the search's shape (d_model 32, 2 layers), its size 1
    assert {(r["name"], r["base_width"], r["base_depth"]) for r in records} == {("completep", 32, 2)}
    assert {r["width_mult"] for r in records} == {0.75, 1.0, 1.5}
    assert study.user_attrs["spec"]["recipe"]["parametrization"] == "completep"  # recorded
    for flags in (["--parametrization", "standard"], ["--parametrization", "standard", "--no-train"]):
        assert _exit([*ladder, *flags]) == 2
        err = capsys.readouterr().err
        assert "trained under completep, and a ladder never mixes two parametrizations" in err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert len(optuna.load_study(study_name="s-ladder", storage=searched).trials) == 6  # nothing added


def test_a_grown_completep_checkpoint_is_not_exported_without_its_multipliers(
    corpus_dir: Path, tmp_path: Path, capsys
) -> None:
    saved = tmp_path / "grown.safetensors"
    _train(capsys, corpus_dir, "--size", "0.5", "--recipe.parametrization", "completep", "--save", str(saved))
    assert _exit(["export", "--checkpoint", str(saved), "--hf", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "trained under completep away from its base shape" in err and err.count("\n") == 1
    assert not (tmp_path / "hf").exists()


def test_a_seq2seq_search_under_completep_is_refused_before_any_trial(tmp_path: Path, capsys) -> None:
    argv = ["search", "--space", "seq2seq", "--recipe.parametrization", "completep", "--study", "s",
            "--storage", f"sqlite:///{tmp_path}/s.db", "--local", "--trials", "1"]  # fmt: skip
    assert _exit(argv) == 2
    err = capsys.readouterr().err
    assert "recipe.parametrization: completep is for decoder-only models" in err and err.count("\n") == 1
    assert not (tmp_path / "s.db").exists()


def test_the_parametrization_flag_of_confirm_and_ladder_replaces_the_studys() -> None:
    from nas.commands._runs import with_parametrization
    from nas.spec.training import TrainRecipe

    stated = TrainRecipe(parametrization="completep", base_width=64, base_depth=2)
    assert with_parametrization(stated, None) is stated  # the study's own
    assert with_parametrization(stated, "completep") is stated
    assert with_parametrization(stated, "standard") == TrainRecipe()  # a base shape means nothing there
    assert with_parametrization(TrainRecipe(lr=1e-3), "completep") == TrainRecipe(
        lr=1e-3, parametrization="completep"
    )
