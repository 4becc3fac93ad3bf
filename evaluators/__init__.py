"""How a candidate is scored.  No optuna, no ray here.

* :func:`train_lm` / :class:`LMEvaluator`: train on the corpus for a budget,
  report validation loss and compute.
* :mod:`evaluators.proxies`: parameter count and FLOPs, no training.
"""

from evaluators.base import (
    BUDGET_KINDS,
    RESULT_KEYS,
    Budget,
    Diverged,
    Evaluator,
    Progress,
    ProgressCallback,
    TrainRecipe,
    metrics_from_loss,
)
from evaluators.lm import LMEvaluator, TrainStep, lr_at, plan_steps, resolve_device, train_lm
from evaluators.proxies import PROXIES, ProxyEvaluator, proxy_metrics

__all__ = [
    "BUDGET_KINDS",
    "PROXIES",
    "RESULT_KEYS",
    "Budget",
    "Diverged",
    "Evaluator",
    "LMEvaluator",
    "Progress",
    "ProgressCallback",
    "ProxyEvaluator",
    "TrainRecipe",
    "TrainStep",
    "lr_at",
    "metrics_from_loss",
    "plan_steps",
    "proxy_metrics",
    "resolve_device",
    "train_lm",
]
