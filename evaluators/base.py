"""What an evaluator takes and gives back.  No optuna, no ray here.

An evaluator scores one ArchConfig.  The LM evaluator trains it on a corpus
for a :class:`Budget` following a :class:`TrainRecipe`, and returns a
:class:`~evaluators.result.Result`.  While it trains it calls a progress callback; the callback returns True
to stop training early (that is how the search's hurdles reach a trial).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from evaluators.result import Result
from nas.errors import ConfigError
from nas.models import ArchConfig
from nas.spec.training import Budget


@dataclasses.dataclass(frozen=True)
class Progress:
    """What the trainer reports while it runs.

    ``fraction`` is the share of the budget spent (0..1).  ``val_loss`` is set
    only at evaluation points (the ``eval_at`` fractions and the end).
    """

    step: int
    fraction: float
    tokens: int
    flops: float
    seconds: float
    train_loss: float
    lr: float
    val_loss: float | None = None
    # the eval_at fractions reached at this step: two can share one (0.25 and 0.5 of 2 steps); empty
    # from an evaluator that reports each fraction in its own call, at ``fraction``
    due: tuple[float, ...] = ()


#: Return True to stop training now.
ProgressCallback = Callable[[Progress], bool]


@dataclasses.dataclass(frozen=True)
class Spent:
    """The training a run did before an exception ended it: what a failed candidate still cost.

    The training loop attaches one to any exception that escapes it (as the
    attribute ``spent``, read back by :meth:`of`) rather than wrapping it, so
    that the exception's type still says why the run failed (diverged, out of
    memory, a fault in a block).  ``steps`` counts the optimizer steps that
    finished; ``train_flops`` is ``steps`` times the training FLOPs of one step,
    as a finished run counts them.
    """

    steps: int
    tokens: int
    train_flops: float
    #: other numbers a failed run still records (a pre-screen's ``prescreen_*``, paid before training)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @staticmethod
    def of(err: BaseException) -> Spent | None:
        """What the run that raised ``err`` spent; None when it did not come from the training loop."""
        spent = getattr(err, "spent", None)
        return spent if isinstance(spent, Spent) else None

    def attach_to(self, err: BaseException) -> None:
        """Record this on ``err`` (an exception that already carries a record keeps it)."""
        if Spent.of(err) is None:
            err.spent = self  # type: ignore[attr-defined]  # exceptions take attributes

    def to_dict(self) -> dict[str, float]:
        """The metric names a finished run records them under (``steps``, ``tokens``, ``train_flops``,
        and the ``extra`` ones)."""
        return {"steps": self.steps, "tokens": self.tokens, "train_flops": self.train_flops, **self.extra}


class Diverged(RuntimeError):
    """Training produced a non-finite loss; the candidate is broken, not the search.

    Raised from the training loop, it carries what was spent until then (``Spent.of(err)``).
    """

    reason = "diverged"


class Evaluator(Protocol):
    """Scores one architecture under a budget and returns a :class:`~evaluators.result.Result`.

    Implementations are built from plain settings (``from_settings``, so a Ray
    worker can rebuild one from its payload) and resolved by name through
    :mod:`evaluators.registry`.  ``callback`` gets :class:`Progress` reports
    (with ``val_loss`` at the ``eval_at`` fractions) and returns True to stop;
    ``logdir`` asks for TensorBoard event files; ``log_hparams`` adds columns to
    their HParams table.
    """

    def evaluate(
        self,
        arch: ArchConfig,
        budget: Budget,
        callback: ProgressCallback | None = None,
        *,
        eval_at: Sequence[float] = (),
        logdir: str | None = None,
        log_hparams: Mapping[str, Any] | None = None,
    ) -> Result: ...


def check_eval_at(eval_at: Sequence[float]) -> tuple[float, ...]:
    """The eval_at fractions sorted and de-duplicated; each must be in (0, 1]."""
    out = set()
    for f in eval_at:
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1:
            raise ConfigError(f"fractions of the budget must be in (0, 1], got {f!r}", "eval_at")
        out.add(float(f))
    return tuple(sorted(out))
