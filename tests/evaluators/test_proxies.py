"""evaluators.proxies: scores from nas.compute, the same result shape as train_lm."""

from __future__ import annotations

import math

import pytest

import nas
from evaluators import PROXIES, RESULT_KEYS, ProxyEvaluator, proxy_metrics

ARCH = nas.ArchConfig.from_dict(
    {"d_model": 32, "n_heads": 2, "max_len": 32, "layers": {"repeat": 2, "attention": "mdha", "ffn": "gelu"}}
)


@pytest.mark.parametrize("proxy", sorted(PROXIES))
def test_proxy_scores_from_compute(proxy: str) -> None:
    result = ProxyEvaluator(proxy)(ARCH)
    assert set(RESULT_KEYS) <= set(result)
    cost = nas.compute(ARCH)
    assert result["params"] == cost.params and result["flops_per_token"] == cost.fwd_flops_per_token
    assert result["score"] == PROXIES[proxy](cost)
    assert result["val_loss"] == pytest.approx(math.log(result["score"]))
    assert result["steps"] == 0 and result["tokens"] == 0 and not result["stopped_early"]


def test_proxy_follows_the_callback_protocol() -> None:
    seen = []
    result = proxy_metrics(
        ARCH, "flops", eval_at=(0.25, 0.5), callback=lambda p: seen.append(p) or p.fraction >= 0.5
    )
    assert [p.fraction for p in seen] == [0.25, 0.5]
    assert result["stopped_early"] and result["stopped_at"] == 0.5
    assert set(result["intermediate"]) == {0.25, 0.5}


def test_unknown_proxy_lists_the_valid_ones() -> None:
    with pytest.raises(nas.ConfigError, match="valid: params"):
        ProxyEvaluator("accuracy")
