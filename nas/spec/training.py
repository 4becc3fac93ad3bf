"""What one training run follows: its :class:`Budget` and its :class:`TrainRecipe`.

Plain data, no torch: the experiment spec (:mod:`nas.spec`), the read-only
commands and the evaluators share them.  Ranges are checked on creation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nas.errors import ConfigError
from nas.spec.fields import bounded, choice, field
from nas.validate import FP32_MAX, MAX_DIM, MAX_SEED, check_number, yaml_number

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
        value = yaml_number(value)
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


@dataclasses.dataclass(frozen=True)
class TrainRecipe:
    """Optimizer and data settings shared by every candidate of a search.

    Each field declares its help, its short flag and its range in its metadata
    (:func:`nas.spec.fields.field`), as the other sections' fields do.
    """

    batch_size: int = field(16, "sequences per optimizer step", check=bounded(1, MAX_DIM, integer=True))
    seq_len: int | None = field(
        None,
        "training context (default: the architecture's max_len)",
        check=bounded(2, MAX_DIM, integer=True),
    )
    # the optimizer computes in the weights' dtype: a factor fp32 cannot hold is infinity there
    lr: float = field(3e-3, "peak learning rate (AdamW)", check=bounded(0, FP32_MAX, low_open=True))
    min_lr_ratio: float = field(0.1, "the cosine schedule decays to lr * min_lr_ratio", check=bounded(0, 1))
    warmup_frac: float = field(
        0.05, "share of the budget spent warming the learning rate up", check=bounded(0, 1)
    )
    weight_decay: float = field(0.1, "AdamW weight decay", check=bounded(0, FP32_MAX))
    # torch's AdamW takes betas in [0, 1)
    beta1: float = field(0.9, "AdamW beta1", check=bounded(0, 1, high_open=True))
    beta2: float = field(0.95, "AdamW beta2", check=bounded(0, 1, high_open=True))
    grad_clip: float = field(1.0, "gradient-norm clip", check=bounded(0, FP32_MAX, low_open=True))
    eval_batches: int = field(
        8, "validation batches per evaluation (a fixed slice)", check=bounded(1, MAX_DIM, integer=True)
    )
    log_every: int = field(10, "steps between progress reports", check=bounded(1, MAX_DIM, integer=True))
    seed: int = field(
        0,
        "seed of every trial's training (and of the sampler unless search.seed is set)",
        alias="--seed",
        check=bounded(0, MAX_SEED, integer=True),
    )
    decay: str = field(
        "matrices",
        f"which parameters weight_decay applies to: {', '.join(DECAY_RULES)}",
        check=choice(DECAY_RULES),
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None or f.name != "seq_len":  # seq_len None: the architecture's max_len
                f.metadata["check"](value, f"recipe.{f.name}")

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
