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
from nas.validate import FP32_MAX, MAX_DIM, MAX_SEED, check_number

BUDGET_KINDS = ("steps", "tokens", "flops", "seconds")
#: Which parameters AdamW decays (evaluators/step.py, docs/training.md).
DECAY_RULES = ("matrices", "weights_only")


@dataclasses.dataclass(frozen=True)
class Budget:
    """How much training a candidate gets: one of steps, tokens, FLOPs or seconds."""

    kind: str
    value: float

    def __post_init__(self) -> None:
        if self.kind not in BUDGET_KINDS:
            valid = ", ".join(BUDGET_KINDS)
            raise ConfigError(f"unknown budget kind {self.kind!r}; valid: {valid}", "budget")
        # a step is whole: 2.5 steps would be cut to 2 without a word
        check_number(self.value, f"budget.{self.kind}", integer=self.kind == "steps", low=0, low_open=True)

    @classmethod
    def from_dict(cls, raw: Any) -> Budget:
        """``{steps: 200}`` (exactly one key)."""
        if not isinstance(raw, Mapping) or len(raw) != 1:
            raise ConfigError(f"must have exactly one of {', '.join(BUDGET_KINDS)}, got {raw!r}", "budget")
        ((kind, value),) = raw.items()
        if isinstance(value, str):  # YAML reads 1e12 (no dot, no exponent sign) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if kind == "steps" and isinstance(value, float) and value.is_integer():  # steps: 1e3
            value = int(value)
        return cls(str(kind), value)

    def to_dict(self) -> dict[str, float]:
        value = int(self.value) if self.kind == "steps" else self.value
        return {self.kind: value}

    def __str__(self) -> str:
        if self.kind == "steps":
            return f"{int(self.value)} steps"
        return f"{self.value:g} {self.kind}"


#: each recipe field's range: (low, high), inclusive unless named in ``_RECIPE_OPEN`` (low) or a beta (high)
_RECIPE_RANGES: dict[str, tuple[float | None, float | None]] = {
    "batch_size": (1, MAX_DIM),
    "seq_len": (2, MAX_DIM),
    # the optimizer computes in the weights' dtype: a factor fp32 cannot hold is infinity there
    "lr": (0, FP32_MAX),
    "min_lr_ratio": (0, 1),  # the schedule decays from lr to lr * min_lr_ratio
    "warmup_frac": (0, 1),  # a share of the budget
    "weight_decay": (0, FP32_MAX),
    "beta1": (0, 1),  # torch's AdamW takes betas in [0, 1)
    "beta2": (0, 1),
    "grad_clip": (0, FP32_MAX),
    "eval_batches": (1, MAX_DIM),
    "log_every": (1, MAX_DIM),
    "seed": (0, MAX_SEED),
}
_RECIPE_INTS = ("batch_size", "seq_len", "eval_batches", "log_every", "seed")
_RECIPE_OPEN = ("lr", "grad_clip")


@dataclasses.dataclass(frozen=True)
class TrainRecipe:
    """Optimizer and data settings shared by every candidate of a search."""

    batch_size: int = 16
    seq_len: int | None = None  # None: the architecture's max_len
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_frac: float = 0.05  # of the budget
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_batches: int = 8  # fixed validation slice: eval_batches * batch_size windows
    log_every: int = 10  # steps between progress callbacks / TensorBoard scalars
    seed: int = 0
    decay: str = "matrices"  # which parameters weight_decay applies to: one of DECAY_RULES

    def __post_init__(self) -> None:
        for key, (low, high) in _RECIPE_RANGES.items():
            value = getattr(self, key)
            if value is not None or key != "seq_len":
                check_number(value, f"recipe.{key}", integer=key in _RECIPE_INTS, low=low, high=high,
                             low_open=key in _RECIPE_OPEN, high_open=key in ("beta1", "beta2"))
        if self.decay not in DECAY_RULES:
            raise ConfigError(f"must be one of {', '.join(DECAY_RULES)}, got {self.decay!r}", "recipe.decay")

    @classmethod
    def from_dict(cls, raw: Any) -> TrainRecipe:
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ConfigError(f"must be a mapping, got {raw!r}", "recipe")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(raw) - set(names))
        if unknown:
            raise ConfigError(f"unknown key; valid keys: {', '.join(names)}", f"recipe.{unknown[0]}")
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["decay"] == "matrices":  # the default is left out, so studies from before it still match
            del out["decay"]
        return out


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
        """The metric names a finished run records them under (``steps``, ``tokens``, ``train_flops``)."""
        return dataclasses.asdict(self)


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
