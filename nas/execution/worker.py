"""What a worker does with one trial: plain dict in, plain dict out (no Ray, no Optuna).

The payload carries the architecture, recipe, budget and data as plain data,
plus the hurdle thresholds the driver computed at launch.  Every way a
candidate can fail (divergence, out of memory, an exception inside a block)
comes back as ``status: failed`` with a reason, so one bad candidate never
stops the search.
"""

from __future__ import annotations

import os
import time
import traceback
from typing import Any

import torch

from evaluators import Budget, Diverged, Progress, TrainRecipe, proxy_metrics, train_lm
from nas.data import load_corpus
from nas.models import ArchConfig
from nas.search.hurdles import fraction_key, missed

_CORPORA: dict[str, Any] = {}


def corpus_for(spec: str | None) -> Any:
    """Load a corpus once per worker process."""
    key = spec or ""
    if key not in _CORPORA:
        _CORPORA[key] = load_corpus(spec)
    return _CORPORA[key]


def run_trial(payload: dict[str, Any]) -> dict[str, Any]:
    """Train one candidate; returns {status: ok|pruned|failed, metrics, intermediate, reason, ...}."""
    started = time.perf_counter()
    intermediate: dict[str, float] = {}
    thresholds: dict[str, float] = payload.get("thresholds") or {}
    fractions = tuple(payload.get("hurdles") or ())
    out: dict[str, Any] = {"pid": os.getpid(), "intermediate": intermediate}
    try:
        arch = ArchConfig.from_dict(payload["arch"])
        recipe = TrainRecipe.from_dict(payload["recipe"])
        budget = Budget.from_dict(payload["budget"])

        def on_progress(p: Progress) -> bool:
            if p.val_loss is None or p.fraction >= 1.0:
                return False
            key = min(fractions, key=lambda f: abs(f - p.fraction), default=None)
            if key is None:
                return False
            intermediate[fraction_key(key)] = float(p.val_loss)
            return missed(thresholds, key, p.val_loss)

        evaluator = str(payload.get("evaluator") or "lm")
        if evaluator != "lm":
            metrics = _cheap(evaluator, arch, recipe, on_progress, fractions)
        else:
            metrics = train_lm(
                arch,
                recipe,
                budget,
                corpus_for(payload.get("data")),
                device=payload.get("device", "auto"),
                logdir=payload.get("logdir"),
                callback=on_progress,
                eval_at=fractions,
                log_hparams=payload.get("hparams"),
            )
        out["metrics"] = metrics
        out["status"] = "pruned" if metrics.get("stopped_early") else "ok"
    except Diverged as err:
        out.update(status="failed", reason="diverged", detail=str(err))
    except torch.OutOfMemoryError as err:
        out.update(status="failed", reason="out of memory", detail=str(err).splitlines()[0])
    except Exception as err:  # noqa: BLE001 - any candidate fault ends that trial, not the search
        out.update(
            status="failed",
            reason=f"error: {type(err).__name__}: {err}".splitlines()[0][:300],
            traceback=traceback.format_exc()[-8000:],
        )
    out["seconds"] = time.perf_counter() - started
    return out


def _cheap(
    evaluator: str, arch: ArchConfig, recipe: TrainRecipe, callback: Any, fractions: Any
) -> dict[str, Any]:
    """``proxy:NAME`` scores by a proxy (no training); ``sleep:S`` also waits S seconds.

    ``sleep`` exists to measure the orchestration itself (benchmarks/orchestration.py):
    a trial whose work is a known wait isolates the driver's and Ray's overhead.
    """
    kind, _, arg = evaluator.partition(":")
    if kind == "sleep":
        time.sleep(float(arg or 0.0))
        return proxy_metrics(arch, "params", seq_len=recipe.seq_len, callback=callback, eval_at=fractions)
    if kind == "proxy":
        return proxy_metrics(
            arch, arg or "params", seq_len=recipe.seq_len, callback=callback, eval_at=fractions
        )
    raise ValueError(f"unknown evaluator {evaluator!r}; valid: lm, proxy:NAME, sleep:SECONDS")
