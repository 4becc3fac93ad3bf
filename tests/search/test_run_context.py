"""A run is its spec plus its context: every rule about a search's values holds, naming the spec field;
the trial payload keeps the worker's keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from nas.errors import UserError
from nas.execution.payload import TrialPayload
from nas.search.driver.context import RunContext
from nas.search.space.candidate import over_caps
from nas.search.space.load import load_spec
from nas.spec import Resources
from nas.spec.training import Budget

TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")
CONTEXT = ("study", "storage", "data", "runs_dir")
RESOURCES = {f.name for f in dataclasses.fields(Resources)}


def make(**over: Any) -> RunContext:
    """A run of the tiny space: ``over`` sets the context (study, ...) or a search or resources field."""
    spec, space = load_spec(TINY_SPACE)
    sections: dict[str, dict[str, Any]] = {"search": {"trials": 3}, "resources": {}}
    for name, value in over.items():
        if name not in CONTEXT:
            sections["resources" if name in RESOURCES else "search"][name] = value
    spec = spec.replace(budget=Budget("steps", 4), **sections)
    context = {"study": "s", "storage": "sqlite:///s.db", **{k: v for k, v in over.items() if k in CONTEXT}}
    return RunContext(spec, space, **context)


def test_valid_settings_are_accepted() -> None:
    s = make(local=True, population=4, trial_timeout=None, gpus_per_trial=0.0)
    assert s.fingerprint()["seed"] == 0 and s.fingerprint()["objective"] == "loss+flops"
    assert s.workers == 1 and s.trials == 3 and s.hurdles.fractions == ()


def test_derived_values_come_from_the_spec() -> None:
    s = make(hurdles=(0.5,), prescreen="proxy:params", trials=None, max_flops=1e12)
    assert s.hurdles.fractions == (0.0, 0.5) and s.trials is None
    assert make(runs_dir="r").tb_dir.startswith(str(Path("r") / "s" / "tb"))  # type: ignore[union-attr]
    assert make(runs_dir="r", tensorboard=False).tb_dir is None and make().tb_dir is None


def test_a_rule_between_sections_holds_wherever_a_spec_is_made() -> None:
    spec, _ = load_spec(TINY_SPACE)
    with pytest.raises(UserError, match=r"search.max_flops \(--max-flops\) 1e\+09 is less than one"):
        spec.replace(budget=Budget("flops", 1e12), search={"max_flops": 1e9})


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
        ({"local": True, "cpus_per_trial": 1.5}, ["resources.cpus_per_trial", "whole number", "--local"]),
        ({"local": True, "cpus_per_trial": 0.5}, ["resources.cpus_per_trial", "whole number"]),
        ({"prescreen": "lm"}, ["search.prescreen", "twice"]),
        ({"prescreen": "proxy:params", "evaluator": "proxy:params"}, ["search.prescreen", "evaluator too"]),
        ({"evaluator": "nope"}, ["search.evaluator"]),
        ({"storage": "sqlite://"}, ["--storage", "memory"]),
    ],
)
def test_settings_refuse_bad_values_naming_the_flag(over: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(UserError) as info:
        make(**over)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


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
    payload = TrialPayload(
        arch={"d_model": 16},
        recipe={"lr": 1e-3},
        budget={"steps": 4},
        data=None,
        hurdles=[0.5],
        thresholds={"0.5": 3.0},
        logdir=None,
        hparams={"trial": 0},
    )
    d = payload.to_dict()
    keys = ["arch", "recipe", "budget", "data", "hurdles", "thresholds", "logdir", "hparams", "spec"]
    assert list(d) == keys
    assert d["thresholds"] == {"0.5": 3.0} and d["arch"] == {"d_model": 16}
    assert TrialPayload.from_dict(d) == payload


def test_the_payload_names_files_from_any_working_directory(tmp_path: Path, monkeypatch) -> None:
    """`--data text.txt` and `--runs-dir runs` went to the worker as typed: a worker of a Ray cluster
    started elsewhere (``--address``) need not share the driver's working directory, and there they name
    other files or none."""
    import optuna

    from nas.models import ArchConfig
    from nas.search.driver.payload import trial_payload

    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text("some words " * 200)
    run = make(data="text.txt", runs_dir="runs")
    study = optuna.create_study()
    arch = ArchConfig.from_dict(
        {"d_model": 16, "n_heads": 2, "max_len": 16, "layers": [{"attention": "mha"}]}
    )
    payload = trial_payload(run, study, study.ask(), arch)
    assert payload.data == str(tmp_path / "text.txt")
    assert payload.logdir is not None and payload.logdir.startswith(str(tmp_path / "runs" / "s" / "tb"))


def test_the_spec_travels_once_in_the_payload(tmp_path: Path, monkeypatch) -> None:
    """The evaluator, the prescreen, compile and the device reach the worker in the payload's spec only:
    no flat copy of them beside it, and the device there is the one the driver resolved."""
    import optuna

    from nas.models import ArchConfig
    from nas.search.driver.payload import trial_payload

    monkeypatch.chdir(tmp_path)
    study = optuna.create_study()
    arch = ArchConfig.from_dict(
        {"d_model": 16, "n_heads": 2, "max_len": 16, "layers": [{"attention": "mha"}]}
    )
    for over, device in (({}, "cpu"), ({"gpus_per_trial": 1.0}, "cuda"), ({"device": "cpu"}, "cpu")):
        payload = trial_payload(make(**over), study, study.ask(), arch).to_dict()
        assert not {"evaluator", "compile", "prescreen", "device"} & set(payload), sorted(payload)
        search, resources = payload["spec"]["search"], payload["spec"]["resources"]
        assert search["evaluator"] == "lm" and search["prescreen"] is None
        assert resources["compile"] is False and resources["device"] == device


def test_over_caps_names_each_cap_broken() -> None:
    assert over_caps({}, 10**9, 1e12) == []
    assert over_caps({"max_params": 100}, 100, 5.0) == []
    over = over_caps({"max_params": 100, "max_flops_per_token": 10}, 101, 11.0)
    assert over == ["params 101 > max_params 100", "FLOPs/token 11 > max_flops_per_token 10"]
