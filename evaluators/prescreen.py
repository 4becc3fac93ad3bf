"""A pre-screen: a cheap evaluator runs first, and a candidate it scores badly never trains.

``--prescreen probes:selective_copying,memorization`` (any evaluator name of
:mod:`evaluators.registry`) wraps the search's evaluator in :class:`Prescreened`.
The screen runs whole; its value (``val_loss``: ``1 - score`` for the probes,
``log`` of the quantity for a proxy) is reported to the progress callback at
budget fraction 0, where the search puts a hurdle (:mod:`nas.search.samplers.hurdles`:
the same percentile and minimum of earlier architectures as the other hurdles).  A
candidate above that threshold ends PRUNED at 0 without any training by the main
evaluator; one below trains as it would without the screen.

The screen's cost is recorded apart (``prescreen_flops``, ``prescreen_seconds``), so
``train_flops`` stays the main evaluator's, comparable with a search without a
screen, while the search's compute count (``--max-flops``,
:func:`nas.search.driver.allowance.trained_flops`) adds both.  The screen's own
numbers are kept as ``prescreen_value`` and ``prescreen_<key>`` (e.g.
``prescreen_probe_score``).

Optuna's pruners would stop a trial from its reported values, but they refuse
multi-objective studies (the default here), so this is a hurdle of the
search's own, like the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from evaluators.base import Evaluator, Progress, ProgressCallback, Spent
from evaluators.result import Result
from nas.models import ArchConfig
from nas.spec.training import Budget

#: the budget fraction at which the screen's value is reported (the hurdle the search puts there)
SCREEN_AT = 0.0


class Prescreened:
    """``main`` behind ``screen``: see the module docstring."""

    def __init__(self, screen: Evaluator, main: Evaluator) -> None:
        self.screen = screen
        self.main = main

    @property
    def checkpoint(self) -> bytes | None:
        """The main evaluator's checkpoint of the model it trained (None: screened out, or none kept)."""
        return getattr(self.main, "checkpoint", None)

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
        try:
            first = self.screen.evaluate(arch, budget)
        except BaseException as err:
            # The screen's training is the screen's cost, not the candidate's: recorded as prescreen_*
            # so that --max-flops counts it and train_flops stays 0.
            spent = Spent.of(err)
            if spent is not None:
                err.spent = Spent(0, 0, 0.0, {"prescreen_flops": spent.train_flops})  # type: ignore[attr-defined]
            raise
        value = float(first.val_loss)
        own = {
            "prescreen_value": value,
            "prescreen_flops": float(first.train_flops),
            "prescreen_seconds": float(first.seconds),
        }
        own.update({f"prescreen_{k}": v for k, v in first.extra.items() if isinstance(v, (int, float, str))})
        report = Progress(
            step=0,
            fraction=SCREEN_AT,
            tokens=0,
            flops=0.0,
            seconds=first.seconds,
            train_loss=value,
            lr=0.0,
            val_loss=value,
        )
        if callback is not None and callback(report):
            # Screened out: nothing trained.  The result is the screen's, with the training numbers at zero.
            return dataclasses.replace(
                first,
                train_flops=0.0,
                tokens=0,
                steps=0,
                tokens_per_s=0.0,
                train_seconds=0.0,
                intermediate={SCREEN_AT: value},
                stopped_early=True,
                stopped_at=SCREEN_AT,
                extra=own,
            )
        try:
            result = self.main.evaluate(
                arch,
                budget,
                callback,
                eval_at=[f for f in eval_at if f > SCREEN_AT],
                logdir=logdir,
                log_hparams=log_hparams,
            )
        except BaseException as err:
            # A candidate that passed the screen and then failed still paid for the screen.
            spent = Spent.of(err) or Spent(0, 0, 0.0)
            err.spent = dataclasses.replace(spent, extra={**spent.extra, **own})  # type: ignore[attr-defined]
            raise
        return dataclasses.replace(
            result, seconds=result.seconds + first.seconds, extra={**result.extra, **own}
        )


def planned_flops(screen: str, arch: ArchConfig) -> float:
    """What the screen ``screen`` (an evaluator name) will spend on ``arch``, before it runs (0 when its
    cost is not known ahead: it is then counted once spent)."""
    from evaluators import registry  # the registry imports every evaluator (this module included)

    plan = getattr(registry.build(screen, {}), "planned_flops", None)
    return float(plan(arch)) if plan is not None else 0.0
