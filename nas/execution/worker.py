"""What a worker does with one trial: plain dict in, plain dict out (no Ray, no Optuna, no search).

The payload carries the evaluator's settings (architecture, recipe, budget,
data) as plain data, the spec's sections (the evaluator and the prescreen in
``search``, the device and compile in ``resources``), and the hurdle thresholds
the driver computed at launch.  When the search keeps weights (``resources.keep_weights``)
a trial that finished returns its model too, as safetensors checkpoint bytes
under :data:`WEIGHTS`.  Every way a candidate can fail (divergence, out of
memory, an exception inside a block) comes back as ``status: failed`` with a
reason, so one bad candidate never stops the search.  A failed trial still
reports the training it did before it failed (``spent``: steps, tokens,
``train_flops``), so that its compute is counted.  A trial that ran out of
memory gives its memory back before the next one starts on this process.
"""

from __future__ import annotations

import os
import time
import traceback
from typing import Any

import torch

from evaluators import registry
from evaluators.base import Diverged, Progress, Spent
from evaluators.device import release_memory
from evaluators.prescreen import Prescreened
from evaluators.stopping import fraction_key, missed
from nas.models import ArchConfig
from nas.spec.training import Budget

OUT_OF_MEMORY = "out of memory"
#: why a trial failed whose losses went non-finite: its own outcome (same seed, same data: same again)
DIVERGED = "diverged"
#: the result's key for the trained model as safetensors checkpoint bytes (``resources.keep_weights``);
#: the pools take it out of the result (:class:`nas.execution.pool.Finished` ``weights``)
WEIGHTS = "weights"


def run_trial(payload: dict[str, Any]) -> dict[str, Any]:
    """Evaluate one candidate; returns {status: ok|pruned|failed, metrics, intermediate, reason, ...}."""
    started = time.perf_counter()
    intermediate: dict[str, float] = {}
    thresholds: dict[str, float] = payload.get("thresholds") or {}
    fractions = tuple(payload.get("hurdles") or ())
    out: dict[str, Any] = {"pid": os.getpid(), "intermediate": intermediate}

    def on_progress(p: Progress) -> bool:
        if p.val_loss is None or p.fraction >= 1.0:
            return False
        near = min(fractions, key=lambda f: abs(f - p.fraction), default=None)
        # every hurdle reached at this step: two that round to one step are both recorded and checked
        keys = [f for f in fractions if f in p.due] or ([] if near is None else [near])
        for key in keys:
            intermediate[fraction_key(key)] = float(p.val_loss)
        failed = [key for key in keys if missed(thresholds, key, p.val_loss)]
        if failed:  # the hurdle whose threshold it missed: of two on one step, maybe not the later one
            out["missed_at"] = min(failed)
        return bool(failed)

    spec = payload.get("spec") or {}
    search, resources = spec.get("search") or {}, spec.get("resources") or {}
    keep = bool(resources.get("keep_weights"))  # the search keeps its best trials' weights
    # what the evaluators' from_settings read: the payload, and the spec's device and compile
    settings = {**payload, "device": resources.get("device"), "compile": bool(resources.get("compile"))}
    try:
        arch = ArchConfig.from_dict(payload["arch"])
        budget = Budget.from_dict(payload["budget"])
        name = str(search.get("evaluator") or "lm")
        evaluator = registry.build(name, {**settings, "keep_checkpoint": keep})
        if search.get("prescreen"):
            evaluator = Prescreened(registry.build(str(search["prescreen"]), settings), evaluator)
        result = evaluator.evaluate(
            arch,
            budget,
            on_progress,
            eval_at=fractions,
            logdir=payload.get("logdir"),
            log_hparams=payload.get("hparams"),
        )
        out["metrics"] = result.to_dict()  # plain data from here on: it crosses to the driver and Optuna
        out["status"] = "pruned" if result.stopped_early else "ok"
        checkpoint = getattr(evaluator, "checkpoint", None) if keep and not result.stopped_early else None
        if checkpoint is not None:  # the pool hands these bytes to the driver apart from the result
            out[WEIGHTS] = checkpoint
    except Diverged as err:
        out.update(_failed(err), reason=DIVERGED, detail=str(err))
    except torch.OutOfMemoryError as err:
        out.update(_failed(err), reason=OUT_OF_MEMORY, detail=str(err).splitlines()[0])
        # The traceback's frames hold the model, the optimizer and the activations: drop their locals.
        traceback.clear_frames(err.__traceback__)
    except Exception as err:  # noqa: BLE001 - any candidate fault ends that trial, not the search
        out.update(
            _failed(err),
            reason=f"error: {type(err).__name__}: {err}".splitlines()[0][:300],
            traceback=_traceback_tail(8000),
        )
    if out["status"] == "failed" or torch.cuda.is_initialized():
        release_memory()  # so the next trial on this process (and those sharing its GPU) has it
    out["seconds"] = time.perf_counter() - started
    return out


def _failed(err: BaseException) -> dict[str, Any]:
    """``status: failed``, with what the run spent before ``err`` when it came from training."""
    spent = Spent.of(err)  # None: it failed outside the training loop (loading, building)
    return {"status": "failed"} if spent is None else {"status": "failed", "spent": spent.to_dict()}


def _traceback_tail(limit: int) -> str:
    """The current exception's traceback, its innermost frames kept when it is over ``limit`` characters."""
    text = traceback.format_exc()
    if len(text) <= limit:
        return text
    head = "Traceback (most recent call last):\n  ...\n"
    return head + text[len(text) - (limit - len(head)) :]
