"""Cheap proxy evaluators: score an architecture from ``nas.compute`` alone, no training.

They return the same dict shape as ``train_lm`` (:data:`evaluators.base.RESULT_KEYS`),
with the training numbers at zero, plus ``proxy`` (its name) and ``score``
(the raw quantity).  ``val_loss`` holds ``log(score)``, so a search that
minimises validation loss runs unchanged on a proxy (in seconds, e.g. to test
the search machinery); it is not a language-modelling loss.  The callback is
called at each ``eval_at`` fraction with that value, so hurdles see the same
protocol as with real training.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evaluators.base import Progress, ProgressCallback, check_eval_at, metrics_from_loss
from nas.compute import Compute, compute
from nas.errors import ConfigError
from nas.models import ArchConfig

#: proxy name -> the quantity it scores (smaller is better).
PROXIES: dict[str, Callable[[Compute], float]] = {
    "params": lambda c: float(c.params),
    "non_embedding_params": lambda c: float(c.non_embedding_params),
    "flops": lambda c: c.fwd_flops_per_token,
    "train_flops": lambda c: c.train_flops_per_token,
}


def proxy_metrics(
    arch: ArchConfig,
    proxy: str = "params",
    *,
    seq_len: int | None = None,
    callback: ProgressCallback | None = None,
    eval_at: Sequence[float] = (),
) -> dict[str, Any]:
    """Score ``arch`` by ``proxy`` (one of :data:`PROXIES`) at ``seq_len`` (default: its max_len)."""
    t0 = time.perf_counter()
    if proxy not in PROXIES:
        raise ConfigError(f"unknown proxy {proxy!r}; valid: {', '.join(PROXIES)}", "proxy")
    cost = compute(arch, seq_len)
    score = PROXIES[proxy](cost)
    loss = math.log(max(score, 1.0))
    intermediate: dict[float, float] = {}
    stopped_at = None
    for f in check_eval_at(eval_at):
        intermediate[f] = loss
        progress = Progress(step=0, fraction=f, tokens=0, flops=0.0, seconds=0.0, train_loss=loss, lr=0.0,
                            val_loss=loss)  # fmt: skip
        if callback is not None and callback(progress) and f < 1.0:
            stopped_at = f
            break
    return {
        **metrics_from_loss(loss),
        "params": cost.params,
        "non_embedding_params": cost.non_embedding_params,
        "flops_per_token": cost.fwd_flops_per_token,
        "train_flops_per_token": cost.train_flops_per_token,
        "train_flops": 0.0,
        "tokens": 0,
        "steps": 0,
        "tokens_per_s": 0.0,
        "seconds": time.perf_counter() - t0,
        "arch_id": arch.arch_id,
        "intermediate": intermediate,
        "stopped_early": stopped_at is not None,
        "stopped_at": stopped_at,
        "device": "none",
        "proxy": proxy,
        "score": score,
    }


class ProxyEvaluator:
    """An :class:`evaluators.base.Evaluator` that scores by a proxy instead of training."""

    def __init__(self, proxy: str = "params", seq_len: int | None = None) -> None:
        if proxy not in PROXIES:
            raise ConfigError(f"unknown proxy {proxy!r}; valid: {', '.join(PROXIES)}", "proxy")
        self.proxy = proxy
        self.seq_len = seq_len

    def __call__(
        self,
        arch: ArchConfig,
        *,
        callback: ProgressCallback | None = None,
        eval_at: Sequence[float] = (),
        logdir: str | None = None,
        log_hparams: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        return proxy_metrics(arch, self.proxy, seq_len=self.seq_len, callback=callback, eval_at=eval_at)
