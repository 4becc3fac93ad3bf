"""``--sampler auto``: the measured best per number of objectives, recorded in the study, kept on resume."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from nas.cli import main
from nas.search.samplers.build import AUTO, SAMPLERS, resolve_sampler
from nas.search.storage.records import SAMPLER, UNRECORDED_SAMPLER

TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")


def search(tmp_path: Path, corpus: Path, *extra: str) -> int:
    return main(
        [
            "search",
            "--space",
            str(TINY_SPACE),
            "--study",
            "s",
            "--storage",
            f"sqlite:///{tmp_path}/s.db",
            "--data",
            str(corpus),
            "--local",
            "--evaluator",
            "proxy:params",
            "--no-tensorboard",
            *extra,
        ]
    )


def recorded(tmp_path: Path) -> str:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").user_attrs[SAMPLER]


def test_auto_resolves_per_number_of_objectives() -> None:
    assert resolve_sampler("auto", 1) == AUTO[1] and resolve_sampler("auto", 2) == AUTO[2]
    assert resolve_sampler("nsga2", 1) == "nsga2"
    assert set(AUTO.values()) <= set(SAMPLERS) - {"auto"}


@pytest.mark.parametrize("objective", ["loss+flops", "loss"])
def test_the_default_is_auto_and_the_study_records_what_ran(tmp_path, corpus, capsys, objective):
    assert search(tmp_path, corpus, "--trials", "3", "--objective", objective) == 0
    ran = AUTO[1 if objective == "loss" else 2]
    assert recorded(tmp_path) == ran
    assert f"sampler {ran} (auto)" in capsys.readouterr().out


def test_a_resumed_study_keeps_its_sampler_unless_another_is_named(tmp_path, corpus, capsys):
    assert search(tmp_path, corpus, "--trials", "2", "--sampler", "random") == 0
    assert recorded(tmp_path) == "random"
    assert search(tmp_path, corpus, "--trials", "3") == 0  # auto: the study's own
    assert "sampler random (auto)" in capsys.readouterr().out
    assert search(tmp_path, corpus, "--trials", "4", "--sampler", "evolution") == 0  # named: switches
    assert recorded(tmp_path) == "evolution"
    assert search(tmp_path, corpus, "--trials", "5") == 0
    assert "sampler evolution (auto)" in capsys.readouterr().out
    assert len(optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").trials) == 5


def test_a_study_from_before_the_record_continues_with_the_old_default(tmp_path, corpus, capsys, monkeypatch):
    real = optuna.Study.set_user_attr

    def without_sampler(self: optuna.Study, key: str, value: object) -> None:
        if key != SAMPLER:  # as this code wrote studies before the record existed
            real(self, key, value)

    monkeypatch.setattr(optuna.Study, "set_user_attr", without_sampler)
    assert search(tmp_path, corpus, "--trials", "2", "--sampler", "nsga2") == 0
    assert SAMPLER not in optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").user_attrs
    monkeypatch.undo()
    capsys.readouterr()
    assert search(tmp_path, corpus, "--trials", "4") == 0  # nothing refused
    assert f"sampler {UNRECORDED_SAMPLER} (auto)" in capsys.readouterr().out
    assert recorded(tmp_path) == UNRECORDED_SAMPLER == "nsga2"


def test_an_unrecorded_study_that_evolved_continues_with_evolution(tmp_path, corpus, capsys, monkeypatch):
    real = optuna.Study.set_user_attr

    def without_sampler(self: optuna.Study, key: str, value: object) -> None:
        if key != SAMPLER:
            real(self, key, value)

    monkeypatch.setattr(optuna.Study, "set_user_attr", without_sampler)
    # population 4: trials 4 and 5 are children (they record their parent)
    assert search(tmp_path, corpus, "--trials", "6", "--sampler", "evolution", "--population", "4") == 0
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    assert SAMPLER not in study.user_attrs and any("parent" in t.user_attrs for t in study.trials)
    monkeypatch.undo()
    capsys.readouterr()
    assert search(tmp_path, corpus, "--trials", "7", "--population", "4") == 0
    assert "sampler evolution (auto)" in capsys.readouterr().out
    assert recorded(tmp_path) == "evolution"


def test_the_cli_refuses_an_unknown_sampler_in_one_line(tmp_path, corpus, capsys):
    with pytest.raises(SystemExit) as info:
        search(tmp_path, corpus, "--trials", "2", "--sampler", "cmaes")
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "auto" in err and "nsga2" in err and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("sampler", ["random", "evolution"])
def test_each_continuation_draws_new_candidates_not_the_last_ones_again(tmp_path, corpus, sampler):
    # Each run rebuilds the sampler; seeded alike every time, it drew the same candidates
    # as the previous continuation (all duplicates, for random search and a first generation).
    population = () if sampler == "random" else ("--population", "20")  # random has none (refused)
    for n in (4, 8, 12):
        assert search(tmp_path, corpus, "--trials", str(n), "--sampler", sampler, *population) == 0
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    params = [t.params for t in sorted(study.trials, key=lambda t: t.number)]
    assert len(params) == 12 and params[8:12] != params[4:8]
