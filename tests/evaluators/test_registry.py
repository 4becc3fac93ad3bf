"""evaluators.registry: one place that turns a name and plain settings into an evaluator."""

from __future__ import annotations

import dataclasses

import pytest

import nas
from evaluators import registry
from evaluators.lm import LMEvaluator
from evaluators.proxies import ProxyEvaluator, SleepEvaluator
from evaluators.registry import EVALUATORS
from evaluators.result import METRICS, RUN_FIELDS, Result
from nas.spec.training import Budget

ARCH = nas.ArchConfig.from_dict(
    {"d_model": 32, "n_heads": 2, "max_len": 32, "layers": {"repeat": 1, "attention": "mha", "ffn": "relu"}}
)


def test_every_name_builds_its_evaluator_from_plain_settings() -> None:
    settings = {
        "recipe": {"batch_size": 4, "seq_len": 16},
        "data": "somewhere",
        "device": "cpu",
        "compile": True,
    }
    lm = registry.build("lm", settings)
    assert isinstance(lm, LMEvaluator) and lm.recipe.batch_size == 4 and lm.data == "somewhere"
    assert lm.device == "cpu" and lm.compile is True
    proxy = registry.build("proxy:flops", settings)
    assert isinstance(proxy, ProxyEvaluator) and proxy.proxy == "flops" and proxy.seq_len == 16
    sleep = registry.build("sleep:0.25", settings)
    assert isinstance(sleep, SleepEvaluator) and sleep.seconds == 0.25
    assert set(EVALUATORS) == {"lm", "proxy", "sleep", "probes"}


@pytest.mark.parametrize("name", ["lm", "proxy:params", "proxy:train_flops", "sleep:0", "sleep:1.5"])
def test_check_accepts_the_valid_names(name: str) -> None:
    assert registry.check(name) == name


@pytest.mark.parametrize(
    "name,why",
    [
        ("bleu", "unknown evaluator 'bleu'"),
        ("proxy:vibes", "NAME must be one of"),
        ("proxy", "NAME must be one of"),
        ("sleep:-1", "SECONDS must be"),
        ("sleep:soon", "SECONDS must be"),
        ("lm:fast", "takes no argument"),
    ],
)
def test_a_bad_name_is_refused_listing_the_valid_ones(name: str, why: str) -> None:
    with pytest.raises(nas.ConfigError, match=why) as err:
        registry.check(name)
    assert (
        "valid: lm; proxy:NAME (NAME: params, non_embedding_params, flops, train_flops); sleep:SECONDS"
        in str(err.value)
    )


def test_metric_names_are_result_fields_and_to_dict_is_plain_data() -> None:
    names = {f.name for f in dataclasses.fields(Result)}
    assert set(METRICS) | set(RUN_FIELDS) <= names and not set(METRICS) & set(RUN_FIELDS)
    assert METRICS[0] == "val_loss" and "device" in RUN_FIELDS and "compile_error" in RUN_FIELDS
    result = ProxyEvaluator("params").evaluate(ARCH, Budget("steps", 1), eval_at=(0.5,))
    plain = result.to_dict()
    assert set(plain) == (names - {"extra"}) | {"proxy", "score"}
    assert plain["intermediate"] == {0.5: result.val_loss} and type(plain["intermediate"]) is dict
