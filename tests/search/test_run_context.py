"""SearchSettings hold every rule about a search's values; the trial payload keeps the worker's keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nas.errors import UserError
from nas.execution.payload import TrialPayload
from nas.search.driver.settings import SearchSettings, flag
from nas.search.space.candidate import over_caps
from nas.search.space.load import load_space
from nas.spec.training import Budget, TrainRecipe

TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")


def make(**over: Any) -> SearchSettings:
    space = load_space(TINY_SPACE)
    fields: dict[str, Any] = dict(study="s", storage="sqlite:///s.db", space=space, trials=3,
                                  budget=Budget("steps", 4), recipe=TrainRecipe.from_dict(space.recipe))
    return SearchSettings(**{**fields, **over})


def test_valid_settings_are_accepted() -> None:
    s = make(local=True, population=4, trial_timeout=None, gpus_per_trial=0.0)
    assert s.fingerprint()["seed"] == 0 and s.fingerprint()["objective"] == "loss+flops"


@pytest.mark.parametrize(
    "over,words",
    [
        ({"trials": 0}, ["search.trials", "positive integer", "0"]),
        ({"trials": 2.5}, ["search.trials", "integer"]),
        ({"seed": -1}, ["search.seed"]),
        ({"seed": 2**32}, ["search.seed", "4294967295"]),
        ({"workers": 0}, ["resources.workers"]),
        ({"retries": -1}, ["resources.retries"]),
        ({"population": 0}, ["search.population"]),
        ({"cpus_per_trial": 0.0}, ["resources.cpus_per_trial", "(0, 4096]"]),
        ({"cpus_per_trial": float("nan")}, ["resources.cpus_per_trial", "finite"]),
        ({"gpus_per_trial": -1.0}, ["resources.gpus_per_trial", ">= 0"]),
        ({"worker_timeout": float("inf")}, ["resources.worker_timeout"]),
        ({"trial_timeout": 0}, ["resources.trial_timeout"]),
        ({"objective": "speed"}, ["search.objective", "loss+flops"]),
        ({"sampler": "genetic"}, ["search.sampler", "nsga2"]),
        ({"device": "tpu"}, ["resources.device", "cuda"]),
        ({"gpus_per_trial": 1.0, "device": "cpu"}, ["resources.gpus_per_trial", "--device"]),
        ({"study": ""}, ["--study"]),
        ({"study": "a/b"}, ["--study"]),
        ({"study": "two\nlines"}, ["--study"]),
        ({"study": ".hidden"}, ["--study"]),
        ({"local": True, "address": "auto"}, ["resources.local", "resources.address"]),
        ({"local": True, "dashboard": True}, ["resources.local", "resources.dashboard"]),
        ({"local": True, "workers": 2}, ["resources.local", "resources.workers"]),
        ({"local": True, "trial_timeout": 5.0}, ["resources.local", "resources.trial_timeout"]),
    ],
)
def test_settings_refuse_bad_values_naming_the_flag(over: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(UserError) as info:
        make(**over)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_flag_names() -> None:
    assert flag("cpus_per_trial") == "resources.cpus_per_trial"
    assert flag("dashboard") == "resources.dashboard"
    assert flag("trials") == "search.trials"


def test_check_environment_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="nowhere"):
        make(data=str(tmp_path / "nowhere")).check_environment()
    corpus = tmp_path / "a.txt"
    corpus.write_text("some words " * 200)
    with pytest.raises(UserError, match="--runs-dir"):
        make(data=str(corpus), runs_dir=str(tmp_path / "file" / "runs")).check_environment()
    with pytest.raises(UserError, match="--storage"):
        make(data=str(corpus), storage="study.db").check_environment()
    assert sorted(tmp_path.iterdir()) == sorted([tmp_path / "file", corpus])  # nothing was created


def test_payload_keys_are_what_the_worker_reads() -> None:
    payload = TrialPayload(arch={"d_model": 16}, recipe={"lr": 1e-3}, budget={"steps": 4}, data=None, device="cpu",
                           hurdles=[0.5], thresholds={"0.5": 3.0}, logdir=None, hparams={"trial": 0},
                           evaluator="lm")
    d = payload.to_dict()
    assert list(d) == ["arch", "recipe", "budget", "data", "device", "hurdles", "thresholds", "logdir",
                       "hparams", "evaluator", "compile", "prescreen"]
    assert d["thresholds"] == {"0.5": 3.0} and d["arch"] == {"d_model": 16}
    assert TrialPayload.from_dict(d) == payload


def test_over_caps_names_each_cap_broken() -> None:
    assert over_caps({}, 10**9, 1e12) == []
    assert over_caps({"max_params": 100}, 100, 5.0) == []
    over = over_caps({"max_params": 100, "max_flops_per_token": 10}, 101, 11.0)
    assert over == ["params 101 > max_params 100", "FLOPs/token 11 > max_flops_per_token 10"]
