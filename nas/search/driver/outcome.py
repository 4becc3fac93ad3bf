"""Recording a trial's outcome in the study: what the driver tells Optuna, and what it keeps beside.

Only the driver calls these (it alone writes the study).  A result is the
worker's plain dict (:func:`nas.execution.worker.run_trial`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from evaluators.result import Measure, measure_of, perplexity
from nas.execution.worker import DIVERGED
from nas.search.storage.records import EVALUATOR_PREFIXES, INTERMEDIATE
from nas.spec.sections import OBJECTIVE_METRICS

#: a model's losses: what a trial screened out before training does not have
LOSS_KEYS = ("val_loss", "val_ppl", "val_bpb")


def finish_now(study: optuna.Study, trial: Trial, state: TrialState, reason: str) -> tuple[str, str]:
    """End ``trial`` without a worker (refused before training), with ``reason``."""
    trial.set_user_attr("fail_reason", reason)
    study.tell(trial, state=state)
    return state.name, reason


def reuse(study: optuna.Study, trial: Trial, twin: FrozenTrial, keys: Sequence[str]) -> tuple[str, str]:
    """Tell ``trial`` the measured result of ``twin``, the same architecture trained before."""
    for key in keys:
        if key in twin.user_attrs:
            trial.set_user_attr(key, twin.user_attrs[key])
    trial.set_user_attr("duplicate_of", twin.number)
    study.tell(trial, twin.values)
    return "COMPLETE", f"same architecture as trial {twin.number}: loss {twin.values[0]:.4f} reused"


def fail(
    study: optuna.Study, trial: Trial, reason: str, tb: str | None = None, detail: str | None = None
) -> tuple[str, str, None]:
    """Tell ``trial`` FAIL, keeping why (and the worker's traceback or detail, when there is one)."""
    trial.set_user_attr("fail_reason", reason)
    if tb:
        trial.set_user_attr("traceback", tb)
    if detail:
        trial.set_user_attr("fail_detail", str(detail)[:1000])
    study.tell(trial, state=TrialState.FAIL)
    return "FAIL", reason, None


def objective_values(result: dict[str, Any], objective: str) -> list[float] | None:
    """The values :func:`tell_result` will tell for a worker's result, when it will tell it COMPLETE
    (a finished run with every objective metric finite); else None."""
    metrics = result.get("metrics") or {}
    if result.get("status") != "ok":
        return None
    values = [metrics.get(key) for key in OBJECTIVE_METRICS[objective]]
    if any(not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
        return None
    return [float(v) for v in values]  # type: ignore[arg-type]


def tell_result(
    study: optuna.Study,
    trial: Trial,
    result: dict[str, Any],
    objective: str,
    metric_keys: Sequence[str],
    measure: Measure | None = None,
) -> tuple[str, str, float | None, FrozenTrial | None]:
    """Tell what a worker measured: (state, a line of text, the loss or None, the COMPLETE trial or None).
    ``measure`` (default: a language model's loss) names the value in the line; only a loss gets a
    perplexity, which of a probe score or a proxy's value would be the exp of something that is no
    cross-entropy."""
    measure = measure or measure_of("lm")
    inter = result.get("intermediate") or {}
    if inter:
        trial.set_user_attr(INTERMEDIATE, inter)
        if len(study.directions) == 1:
            for key, value in inter.items():
                trial.report(value, step=int(round(float(key) * 1000)))
    for key in ("pid", "node"):
        if result.get(key) is not None:
            trial.set_user_attr(f"worker_{key}", result[key])
    if result.get("status") == "failed":
        # What it trained before failing (the same keys a finished trial records), so that --max-flops
        # and every sum of train_flops count it; absent when it failed before training.
        spent = result.get("spent")
        if spent:
            for key, value in (*spent.items(), ("seconds", result.get("seconds"))):
                if value is not None:
                    trial.set_user_attr(key, value)
        why = result.get("reason", "failed")
        return (*fail(study, trial, why, result.get("traceback"), result.get("detail")), None)
    metrics = result.get("metrics") or {}
    # Screened out by the prescreen (a hurdle at 0): its val_loss is the screen's value, not a loss of
    # the model; left out, so that nothing (plots, tables) reads it as one.  It stays in "intermediate".
    screened = result.get("status") == "pruned" and list(inter) == ["0"]
    for key in metric_keys:
        if metrics.get(key) is not None and not (screened and key in LOSS_KEYS):
            trial.set_user_attr(key, metrics[key])
    for (
        key,
        value,
    ) in metrics.items():  # the evaluator's own numbers, by the rule twins and `show` read them by
        if key.startswith(EVALUATOR_PREFIXES) and isinstance(value, (int, float, str)):
            trial.set_user_attr(key, value)
    if metrics.get("rungs"):  # wsd rungs: each one's cooled-down loss (docs/training.md)
        trial.set_user_attr("rungs", metrics["rungs"])
        trial.set_user_attr("rung_flops", metrics.get("rung_flops"))
    loss = metrics.get("val_loss")
    if loss is None or not math.isfinite(loss):  # the sampler must never see a NaN
        return (*fail(study, trial, DIVERGED, detail=f"validation loss {loss}"), None)
    for key in OBJECTIVE_METRICS[objective][1:]:
        value = metrics.get(key)
        if value is None or not math.isfinite(value):
            return (*fail(study, trial, f"no finite {key} ({value})"), None)
    if result.get("status") == "pruned":
        # The hurdle it missed: the worker names it (two hurdles on one step are both checked); else the
        # last one recorded (the trainer's own stopped_at is the exact step fraction).
        at = result.get("missed_at")
        if at is None:
            at = float(max(inter, key=float)) if inter else metrics.get("stopped_at")
        trial.set_user_attr("pruned_at", at)
        study.tell(trial, state=TrialState.PRUNED)
        last = inter[max(inter, key=float)] if inter else float("nan")
        if screened:
            return "PRUNED", f"screened out before training: prescreen value {last:.4f}", None, None
        return "PRUNED", f"stopped at hurdle {at:g}: {measure.column} {measure.shown(last):.4f}", None, None
    values = [float(metrics[key]) for key in OBJECTIVE_METRICS[objective]]
    frozen = study.tell(trial, values)
    summary = trial.user_attrs.get("summary", "")
    ppl = perplexity(loss)
    ppl_text = (f"ppl {ppl:.2f} " if ppl < 1e9 else f"ppl {ppl:.3g} ") if measure.lm else ""
    return "COMPLETE", f"{measure.column} {measure.shown(loss):.4f} {ppl_text}{summary}", loss, frozen
