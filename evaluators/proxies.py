"""Cheap evaluators: score an architecture from ``nas.compute`` alone, no training.

A proxy returns the same :class:`~evaluators.result.Result` as ``train_lm``,
with the training numbers at zero and ``extra`` holding ``proxy`` (its name)
and ``score`` (the raw quantity).  ``val_loss`` holds ``log(score)``, so a
search that minimises validation loss runs unchanged on a proxy (in seconds,
e.g. to test the search machinery); it is not a language-modelling loss.  The
callback is called at each ``eval_at`` fraction with that value, so hurdles
see the same protocol as with real training.

``sleep:S`` is the ``params`` proxy after a wait of S seconds: a trial whose
work is a known wait isolates the driver's and Ray's own overhead
(benchmarks/orchestration.py) and stands in for a long trial in the
reliability tests.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evaluators.base import Progress, ProgressCallback, check_eval_at
from evaluators.result import Result
from nas.errors import ConfigError
from nas.models import ArchConfig
from nas.models.cost import Compute, compute
from nas.spec.training import Budget, TrainRecipe

#: proxy name -> the quantity it scores (smaller is better).
PROXIES: dict[str, Callable[[Compute], float]] = {
    "params": lambda c: float(c.params),
    "non_embedding_params": lambda c: float(c.non_embedding_params),
    "flops": lambda c: c.fwd_flops_per_token,
    "train_flops": lambda c: c.train_flops_per_token,
}


def _seq_len(settings: Mapping[str, Any]) -> int | None:
    return TrainRecipe.from_dict(settings.get("recipe")).seq_len


class ProxyEvaluator:
    """Scores by ``proxy`` (one of :data:`PROXIES`) at ``seq_len`` (default: the architecture's max_len)."""

    def __init__(self, proxy: str = "params", seq_len: int | None = None) -> None:
        if proxy not in PROXIES:
            raise ConfigError(f"unknown proxy {proxy!r}; valid: {', '.join(PROXIES)}", "proxy")
        self.proxy = proxy
        self.seq_len = seq_len

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ProxyEvaluator:
        """``proxy`` (its name) and the ``recipe`` dict, whose ``seq_len`` sets the FLOPs' sequence length."""
        return cls(str(settings.get("proxy") or "params"), _seq_len(settings))

    def evaluate(
        self,
        arch: ArchConfig,
        budget: Budget | None = None,
        callback: ProgressCallback | None = None,
        *,
        eval_at: Sequence[float] = (),
        logdir: str | None = None,
        log_hparams: Mapping[str, Any] | None = None,
    ) -> Result:
        """The budget, ``logdir`` and ``log_hparams`` are ignored: nothing trains."""
        t0 = time.perf_counter()
        cost = compute(arch, self.seq_len)
        score = PROXIES[self.proxy](cost)
        loss = math.log(max(score, 1.0))
        intermediate: dict[float, float] = {}
        stopped_at = None
        for f in check_eval_at(eval_at):
            intermediate[f] = loss
            progress = Progress(
                step=0, fraction=f, tokens=0, flops=0.0, seconds=0.0, train_loss=loss, lr=0.0, val_loss=loss
            )
            if callback is not None and callback(progress) and f < 1.0:
                stopped_at = f
                break
        return Result.measured(
            arch,
            cost,
            loss,
            seconds=time.perf_counter() - t0,
            intermediate=intermediate,
            stopped_early=stopped_at is not None,
            stopped_at=stopped_at,
            extra={"proxy": self.proxy, "score": score},
        )


class SleepEvaluator:
    """Waits ``seconds``, then scores like the ``params`` proxy (for orchestration benchmarks and tests)."""

    def __init__(self, seconds: float, seq_len: int | None = None) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < math.inf:
            raise ConfigError(f"must be a finite number of seconds >= 0, got {seconds!r}", "sleep")
        self.seconds = float(seconds)
        self.proxy = ProxyEvaluator("params", seq_len)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> SleepEvaluator:
        """``sleep`` (seconds) and the ``recipe`` dict, as for :class:`ProxyEvaluator`."""
        return cls(settings.get("sleep", 0.0), _seq_len(settings))

    def evaluate(
        self,
        arch: ArchConfig,
        budget: Budget | None = None,
        callback: ProgressCallback | None = None,
        *,
        eval_at: Sequence[float] = (),
        logdir: str | None = None,
        log_hparams: Mapping[str, Any] | None = None,
    ) -> Result:
        time.sleep(self.seconds)
        return self.proxy.evaluate(arch, budget, callback, eval_at=eval_at)
