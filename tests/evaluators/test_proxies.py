"""evaluators.proxies: scores from nas.compute, the same Result as train_lm."""

from __future__ import annotations

import math

import pytest

import nas
from evaluators.proxies import PROXIES, ProxyEvaluator, SleepEvaluator
from evaluators.result import METRICS
from nas.spec.training import Budget

ARCH = nas.ArchConfig.from_dict(
    {"d_model": 32, "n_heads": 2, "max_len": 32, "layers": {"repeat": 2, "attention": "mdha", "ffn": "gelu"}}
)


@pytest.mark.parametrize("proxy", sorted(PROXIES))
def test_proxy_scores_from_compute(proxy: str) -> None:
    result = ProxyEvaluator(proxy).evaluate(ARCH, Budget("steps", 1))
    assert all(getattr(result, k) is not None for k in METRICS)
    cost = nas.compute(ARCH)
    assert result.params == cost.params and result.flops_per_token == cost.fwd_flops_per_token
    assert result.extra["score"] == PROXIES[proxy](cost)
    assert result.val_loss == pytest.approx(math.log(result.extra["score"]))
    assert result.steps == 0 and result.tokens == 0 and not result.stopped_early
    plain = result.to_dict()
    assert plain["proxy"] == proxy and plain["val_loss"] == result.val_loss and plain["device"] == "none"


def test_proxy_follows_the_callback_protocol() -> None:
    seen = []
    result = ProxyEvaluator("flops").evaluate(
        ARCH, Budget("steps", 1), lambda p: seen.append(p) or p.fraction >= 0.5, eval_at=(0.25, 0.5)
    )
    assert [p.fraction for p in seen] == [0.25, 0.5]
    assert result.stopped_early and result.stopped_at == 0.5
    assert set(result.intermediate) == {0.25, 0.5}


def test_proxy_flops_follow_the_recipe_sequence_length() -> None:
    short = ProxyEvaluator.from_settings({"proxy": "flops", "recipe": {"seq_len": 8}}).evaluate(
        ARCH, Budget("steps", 1)
    )
    assert (
        short.flops_per_token
        == nas.compute(ARCH, 8).fwd_flops_per_token
        < nas.compute(ARCH).fwd_flops_per_token
    )


def test_sleep_scores_like_the_params_proxy() -> None:
    slept = SleepEvaluator(0.0).evaluate(ARCH, Budget("steps", 1))
    assert slept.val_loss == ProxyEvaluator("params").evaluate(ARCH, Budget("steps", 1)).val_loss


def test_unknown_proxy_lists_the_valid_ones() -> None:
    with pytest.raises(nas.ConfigError, match="valid: params"):
        ProxyEvaluator("accuracy")
