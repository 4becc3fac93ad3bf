"""How a candidate is scored.  No optuna, no ray here.

Every evaluator implements :class:`Evaluator` (built from plain settings,
``evaluate(arch, budget, callback, ...) -> Result``) and is resolved by name
through :mod:`evaluators.registry` (``lm``, ``proxy:NAME``, ``sleep:SECONDS``):

* :class:`LMEvaluator` / :func:`train_lm`: train on the corpus for a budget,
  report validation loss and compute (the trainer's parts: :mod:`evaluators.budget`,
  :mod:`~evaluators.device`, :mod:`~evaluators.model`, :mod:`~evaluators.step`,
  :mod:`~evaluators.loop`, :mod:`~evaluators.evaluation`, :mod:`~evaluators.trainlog`).
* :class:`ProxyEvaluator`, :class:`SleepEvaluator` (:mod:`evaluators.proxies`):
  parameter count and FLOPs, no training.
"""

from evaluators.base import Diverged, Evaluator, Progress, ProgressCallback, Spent
from evaluators.budget import lr_at, plan_steps
from evaluators.device import release_memory, resolve_device
from evaluators.lm import LMEvaluator, train_lm
from evaluators.proxies import PROXIES, ProxyEvaluator, SleepEvaluator
from evaluators.registry import EVALUATORS, build, check
from evaluators.result import METRICS, RUN_FIELDS, Result
from evaluators.step import TrainStep
from nas.spec.training import BUDGET_KINDS, Budget, TrainRecipe

__all__ = [
    "BUDGET_KINDS",
    "EVALUATORS",
    "METRICS",
    "PROXIES",
    "RUN_FIELDS",
    "Budget",
    "Diverged",
    "Evaluator",
    "LMEvaluator",
    "Progress",
    "ProgressCallback",
    "ProxyEvaluator",
    "Result",
    "SleepEvaluator",
    "Spent",
    "TrainRecipe",
    "TrainStep",
    "build",
    "check",
    "lr_at",
    "plan_steps",
    "release_memory",
    "resolve_device",
    "train_lm",
]
