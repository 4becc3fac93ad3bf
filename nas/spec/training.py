"""What one training run follows: its :class:`Budget` and its :class:`TrainRecipe`.

Plain data, no torch: the experiment spec (:mod:`nas.spec`), the read-only
commands and the evaluators share them.  Ranges are checked on creation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nas.errors import ConfigError
from nas.plural import plural
from nas.spec.fields import bounded, choice, field, fractions
from nas.validate import FP32_MAX, MAX_DIM, MAX_SEED, check_number, yaml_number

BUDGET_KINDS = ("steps", "tokens", "flops", "seconds")
#: Which parameters AdamW decays (evaluators/step.py, docs/training.md).
DECAY_RULES = ("matrices", "weights_only")
#: Learning-rate schedules (evaluators/budget.py, docs/training.md).
SCHEDULES = ("cosine", "wsd")
#: Shapes of the wsd cooldown (Hägele et al. 2024): linear 1-t, 1-sqrt 1-sqrt(t).
COOLDOWN_SHAPES = ("linear", "1-sqrt")
#: How initialisation, learning rates and multipliers follow the model's shape (nas.models.parametrization,
#: docs/parametrization.md): standard (none do), completep (muP in width, CompleteP in depth).
PARAMETRIZATIONS = ("standard", "completep")
#: Fields that may be None (decided by the architecture); the others' checks always run.
_OPTIONAL = ("seq_len", "base_width", "base_depth")


@dataclasses.dataclass(frozen=True)
class Budget:
    """How much training a candidate gets: one of steps, tokens, FLOPs or seconds.

    ``rungs`` (fractions of it, with ``recipe.schedule: wsd``): the run also
    evaluates a cooldown branched from its constant phase at each (docs/training.md).
    """

    kind: str
    value: float
    rungs: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in BUDGET_KINDS:
            valid = ", ".join(BUDGET_KINDS)
            raise ConfigError(f"unknown budget kind {self.kind!r}; valid: {valid}", "budget")
        # a step is whole: 2.5 steps would be cut to 2 without a word
        check_number(self.value, f"budget.{self.kind}", integer=self.kind == "steps", low=0, low_open=True)
        if isinstance(self.rungs, list):  # YAML lists: frozen as tuples
            object.__setattr__(self, "rungs", tuple(self.rungs))
        fractions(self.rungs, "budget.rungs")
        if self.rungs and self.kind == "seconds":
            raise ConfigError(
                "a seconds budget has no fixed step count to place rungs at; use steps, tokens or flops",
                "budget.rungs",
            )

    @classmethod
    def from_dict(cls, raw: Any) -> Budget:
        """``{steps: 200}`` (exactly one kind), optionally with ``rungs: [0.25, 0.5]``."""
        kinds = {k: v for k, v in raw.items() if k != "rungs"} if isinstance(raw, Mapping) else None
        if kinds is None or len(kinds) != 1:
            raise ConfigError(
                f"must have exactly one of {', '.join(BUDGET_KINDS)} (and optionally rungs), got {raw!r}",
                "budget",
            )
        ((kind, value),) = kinds.items()
        value = yaml_number(value)
        if kind == "steps" and isinstance(value, float) and value.is_integer():  # steps: 1e3
            value = int(value)
        rungs = raw.get("rungs", ())
        rungs = tuple(yaml_number(r) for r in rungs) if isinstance(rungs, (list, tuple)) else rungs
        return cls(str(kind), value, rungs)

    def to_dict(self) -> dict[str, Any]:
        """``{steps: 200}``; ``rungs`` only when there are some (a budget without is stored as before)."""
        value = int(self.value) if self.kind == "steps" else self.value
        out: dict[str, Any] = {self.kind: value}
        if self.rungs:
            out["rungs"] = list(self.rungs)
        return out

    def __str__(self) -> str:
        if self.kind == "flops":
            text = f"{self.value:g} flops"
        else:  # 1 step, 1 token, 1 second
            text = plural(int(self.value) if self.kind == "steps" else self.value, self.kind[:-1], fmt="g")
        if self.rungs:
            text += f" (rungs {', '.join(f'{r:g}' for r in self.rungs)})"
        return text


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
    min_lr_ratio: float = field(
        0.1, "the schedule (cosine, or wsd's cooldown) decays to lr * min_lr_ratio", check=bounded(0, 1)
    )
    warmup_frac: float = field(
        0.05, "share of the budget spent warming the learning rate up", check=bounded(0, 1)
    )
    schedule: str = field(
        "cosine",
        f"learning-rate schedule: {', '.join(SCHEDULES)} (warmup, constant, cooldown; docs/training.md)",
        check=choice(SCHEDULES),
    )
    cooldown_frac: float = field(
        0.2, "wsd: share of the run (and of each rung) cooling down", check=bounded(0, 1, high_open=True)
    )
    cooldown_shape: str = field(
        "linear", f"wsd: the cooldown's shape: {', '.join(COOLDOWN_SHAPES)}", check=choice(COOLDOWN_SHAPES)
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
        "seed of the training: the weights' initialisation and the batch order (in a search, every trial's, "
        "and the sampler's unless search.seed is set)",
        alias="--seed",
        check=bounded(0, MAX_SEED, integer=True),
    )
    decay: str = field(
        "matrices",
        f"which parameters weight_decay applies to: {', '.join(DECAY_RULES)}",
        check=choice(DECAY_RULES),
    )
    parametrization: str = field(
        "standard",
        f"how init, per-parameter learning rates and multipliers follow the shape: "
        f"{', '.join(PARAMETRIZATIONS)} "
        "(muP in width, CompleteP in depth, relative to base_width x base_depth; docs/parametrization.md)",
        check=choice(PARAMETRIZATIONS),
    )
    base_width: int | None = field(
        None,
        "completep: the d_model every multiplier is relative to (default: the architecture's own at size 1)",
        check=bounded(1, MAX_DIM, integer=True),
    )
    base_depth: int | None = field(
        None,
        "completep: the layer count every multiplier is relative to (default: the architecture's own at "
        "size 1)",
        check=bounded(1, MAX_DIM, integer=True),
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None or f.name not in _OPTIONAL:  # None: the architecture's (max_len, shape)
                f.metadata["check"](value, f"recipe.{f.name}")
        if self.schedule == "wsd" and self.warmup_frac + self.cooldown_frac > 1:
            raise ConfigError(
                f"recipe.warmup_frac {self.warmup_frac:g} + recipe.cooldown_frac {self.cooldown_frac:g} "
                "exceed 1: the wsd cooldown would begin inside the warmup",
                "recipe.cooldown_frac",
            )

        for name in ("base_width", "base_depth"):
            if getattr(self, name) is not None and self.parametrization == "standard":
                raise ConfigError(
                    "a base shape only applies under recipe.parametrization completep (standard has no "
                    "multipliers); set --recipe.parametrization completep or leave it out",
                    f"recipe.{name}",
                )

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
        # defaults of the later fields are left out, so studies from before them still match
        for name in ("decay", "schedule", "cooldown_frac", "cooldown_shape", *_LATER):
            if out[name] == _DEFAULTS[name]:
                del out[name]
        return out


def rungs_need_wsd(schedule: str) -> str:
    """Why ``budget.rungs`` is refused with another schedule (the spec and the trainer both say it)."""
    return (
        f"needs recipe.schedule: wsd, but it is {schedule}: rungs branch cooldowns from wsd's constant "
        "phase; set --recipe.schedule wsd or leave budget.rungs out"
    )


#: fields added with the parametrizations: left out at their defaults, as the ones above
_LATER = ("parametrization", "base_width", "base_depth")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainRecipe)}
