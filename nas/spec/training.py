"""What one training run follows: its :class:`Budget` and its :class:`TrainRecipe`.

Plain data, no torch: the experiment spec (:mod:`nas.spec`), the read-only
commands and the evaluators share them.  Ranges are checked on creation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nas.errors import ConfigError
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


#: what each recipe field means (its ``--recipe.FIELD`` flag's help)
RECIPE_HELP = {
    "batch_size": "sequences per optimizer step",
    "seq_len": "training context (default: the architecture's max_len)",
    "lr": "peak learning rate (AdamW)",
    "min_lr_ratio": "the cosine schedule decays to lr * min_lr_ratio",
    "warmup_frac": "share of the budget spent warming the learning rate up",
    "weight_decay": "AdamW weight decay",
    "beta1": "AdamW beta1",
    "beta2": "AdamW beta2",
    "grad_clip": "gradient-norm clip",
    "eval_batches": "validation batches per evaluation (a fixed slice)",
    "log_every": "steps between progress reports",
    "seed": "seed of every trial's training (and of the sampler unless search.seed is set)",
    "decay": f"which parameters weight_decay applies to: {', '.join(DECAY_RULES)}",
}
