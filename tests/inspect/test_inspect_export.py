"""``export``: an architecture file that round-trips and that ``train --arch`` reads."""

from __future__ import annotations

from pathlib import Path

import optuna

import nas
from nas.files.archfile import load_arch_file
from nas.models import ArchConfig
from nas.spec.training import Budget, TrainRecipe


def test_round_trip(cli, multi: optuna.Study, runs, tmp_path: Path) -> None:
    out = tmp_path / "exported" / "t3.yaml"
    rc, text, err = cli("export", "--study", "multi", "--runs-dir", runs, "--trial", "3", "--out", out)
    assert rc == 0, err
    assert text.startswith(f"wrote {out}: trial 3 (val loss 2.2000)")
    doc = load_arch_file(out)
    trial = multi.trials[3]
    settings = multi.user_attrs["settings"]
    assert doc["arch"] == ArchConfig.from_dict(trial.user_attrs["arch"])
    assert doc["arch"].arch_id == trial.user_attrs["arch_id"]
    assert TrainRecipe.from_dict(doc["recipe"]) == TrainRecipe.from_dict(settings["recipe"])
    assert doc["recipe"]["seed"] == 7
    assert Budget.from_dict(doc["budget"]) == Budget.from_dict(settings["budget"])
    assert doc["data"] == "shakespeare"
    assert doc["metrics"]["val_loss"] == 2.2 and doc["metrics"]["params"] == trial.user_attrs["params"]
    assert doc["metrics"]["train_flops_per_token"] == trial.user_attrs["train_flops_per_token"]
    src = doc["source"]
    assert src["study"] == "multi" and src["trial"] == 3 and src["arch_id"] == trial.user_attrs["arch_id"]
    assert src["storage"] == f"sqlite:///{runs / 'multi' / 'study.db'}" and src["exported_at"]
    assert nas.load_arch(out) == doc["arch"]  # the Python API reads it too


def test_the_source_names_the_study_from_any_directory(cli, multi, runs, tmp_path, monkeypatch) -> None:
    """`--runs-dir runs` was recorded as `sqlite:///runs/multi/study.db`: read from anywhere else, the
    exported file's source named another database (or none)."""
    monkeypatch.chdir(runs.parent)
    rc, _, err = cli("export", "--study", "multi", "--runs-dir", "runs", "--trial", "3", "--out", "t3.yaml")
    assert rc == 0, err
    assert (
        load_arch_file(tmp_path / "t3.yaml")["source"]["storage"]
        == f"sqlite:///{runs / 'multi' / 'study.db'}"
    )


def test_best_is_lowest_loss_on_the_front(
    cli, multi: optuna.Study, single: optuna.Study, runs, tmp_path
) -> None:
    for name in ("multi", "single"):
        out = tmp_path / f"{name}.yaml"
        rc, _, err = cli("export", "--study", name, "--runs-dir", runs, "--best", "--out", out)
        assert rc == 0, err
        assert load_arch_file(out)["source"]["trial"] == 3


def test_force_overwrites(cli, multi: optuna.Study, runs, tmp_path: Path) -> None:
    out = tmp_path / "a.yaml"
    out.write_text("old\n")
    rc, _, err = cli("export", "--study", "multi", "--runs-dir", runs, "--trial", "1", "--out", out)
    assert rc == 2 and "pass --force" in err and out.read_text() == "old\n"
    rc, _, _ = cli("export", "--study", "multi", "--runs-dir", runs, "--trial", "1", "--out", out, "--force")
    assert rc == 0 and load_arch_file(out)["source"]["trial"] == 1


def test_a_probes_studys_export_claims_no_perplexity(cli, runs, tmp_path: Path) -> None:
    """The file's metrics carried val_ppl (the exp of 1 - score) and val_bpb, as if measured on text."""
    from inspect_studies import add_trial, make_study

    study = make_study(runs, "probes")
    study.set_user_attr("settings", {**study.user_attrs["settings"], "evaluator": "probes@5"})
    add_trial(study, "vanilla", 0.75, probe_score=0.25)
    out = tmp_path / "p.yaml"
    rc, said, err = cli("export", "--study", "probes", "--runs-dir", runs, "--best", "--out", out)
    metrics = load_arch_file(out)["metrics"]
    assert rc == 0 and metrics["probe_score"] == 0.25, err
    assert "val_loss" not in metrics and "val_ppl" not in metrics and "val_bpb" not in metrics
    # the message named 1 - score "val loss" and promised a retrain would reproduce "its loss"
    assert "(probe score (mean accuracy) 0.2500)" in said and "loss 0.7500" not in said
    assert "reproduces its loss" not in said and "not by a validation loss" in said


def test_a_proxy_studys_export_names_the_proxys_value(cli, runs, tmp_path: Path) -> None:
    from inspect_studies import add_trial, make_study

    study = make_study(runs, "proxy")
    study.set_user_attr("settings", {**study.user_attrs["settings"], "evaluator": "proxy:flops"})
    add_trial(study, "vanilla", 9.5)
    out = tmp_path / "p.yaml"
    rc, said, err = cli("export", "--study", "proxy", "--runs-dir", runs, "--best", "--out", out)
    metrics = load_arch_file(out)["metrics"]
    assert rc == 0 and metrics["proxy_value"] == 9.5 and "val_loss" not in metrics, err
    assert "(proxy:flops value (ln flops) 9.5000)" in said and "val loss" not in said
