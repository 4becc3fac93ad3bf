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
