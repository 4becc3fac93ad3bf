"""Budget planning: what a budget buys, the learning-rate schedule, and the training clock.

* :func:`plan_training` checks an architecture, recipe and corpus against each
  other and turns the budget into optimizer steps (:func:`plan_steps`).
* :class:`BudgetClock` says, after each step, which share of the budget is
  spent and whether this step is a report point (logging, evaluation, the
  callback).  It counts training time only: it is paused while the trainer
  evaluates and reports, and the first compiled step can be set aside.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

from evaluators.base import check_eval_at
from nas.errors import ConfigError, UserError
from nas.models import ArchConfig
from nas.models.cost import Compute, compute
from nas.plural import plural
from nas.spec.training import Budget, TrainRecipe, rungs_need_wsd


def plan_steps(budget: Budget, cost: Compute, batch_size: int, seq_len: int) -> int | None:
    """Optimizer steps the budget buys (None for a seconds budget, which runs until time is up)."""
    tokens_per_step = batch_size * seq_len
    if budget.kind == "seconds":
        return None
    if budget.kind == "steps":
        steps = int(budget.value)
        minimum = "1 step"
    elif budget.kind == "tokens":
        steps = int(budget.value // tokens_per_step)
        minimum = f"{tokens_per_step} tokens (batch_size {batch_size} x seq_len {seq_len})"
    else:
        per_step = cost.train_flops_per_token * tokens_per_step
        steps = int(budget.value // per_step)
        minimum = f"{per_step:.4g} FLOPs (one step of {tokens_per_step} tokens for this architecture)"
    if steps < 1:
        raise ConfigError(f"{budget} buys less than one training step; the minimum is {minimum}", "budget")
    return steps


def eval_step(fraction: float, total_steps: int) -> int:
    """The step after which a hurdle at ``fraction`` of a ``total_steps`` run is measured: the nearest
    whole step, at least the first; two hurdles can share one (0.25 and 0.5 of 2 steps: step 1)."""
    return min(total_steps, max(1, round(fraction * total_steps)))


def lr_at(recipe: TrainRecipe, fraction: float) -> float:
    """Learning rate after ``fraction`` of the budget: linear warmup, then the schedule.

    ``cosine``: cosine from lr to lr * min_lr_ratio.  ``wsd``: constant at lr, then over
    the last ``cooldown_frac`` of the run down to lr * min_lr_ratio (:func:`cooldown_lr`).
    A steps budget uses :func:`lr_for_step`, which places the wsd cooldown on whole steps.
    """
    peak, wf = recipe.lr, recipe.warmup_frac
    fraction = min(max(fraction, 0.0), 1.0)
    if wf > 0 and fraction < wf:
        return peak * fraction / wf
    if recipe.schedule == "wsd":
        cd = recipe.cooldown_frac
        if cd > 0 and fraction > 1.0 - cd:
            return cooldown_lr(recipe, min(1.0, (fraction - (1.0 - cd)) / cd))
        return peak
    progress = (fraction - wf) / (1.0 - wf) if wf < 1 else 1.0
    low = peak * recipe.min_lr_ratio
    return low + (peak - low) * 0.5 * (1.0 + math.cos(math.pi * progress))


def cooldown_lr(recipe: TrainRecipe, t: float) -> float:
    """The wsd learning rate at ``t`` in (0, 1] of the cooldown: lr * min_lr_ratio + (lr - that) * shape(t),
    shape ``linear`` 1 - t or ``1-sqrt`` 1 - sqrt(t) (Hägele et al. 2024)."""
    peak = recipe.lr
    low = peak * recipe.min_lr_ratio
    shape = 1.0 - t if recipe.cooldown_shape == "linear" else 1.0 - math.sqrt(t)
    return low + (peak - low) * shape


def cooldown_steps(recipe: TrainRecipe, steps: int) -> int:
    """Steps of the wsd cooldown of a run of ``steps`` steps: round(cooldown_frac * steps) (Python's
    round: halves to even, as the eval_at steps are placed)."""
    return round(recipe.cooldown_frac * steps)


def warmup_steps(recipe: TrainRecipe, steps: int) -> int:
    """Steps of a ``steps``-step run that warm the learning rate up (their fraction < warmup_frac)."""
    k = 0
    while k < steps and (k + 1) / steps < recipe.warmup_frac:
        k += 1
    return k


def lr_for_step(recipe: TrainRecipe, step: int, total: int) -> float:
    """The learning rate of step ``step`` (0-based) of a ``total``-step run.

    It is :func:`lr_at` at the fraction where the step ends, ``(step + 1) / total``,
    except that the wsd cooldown takes exactly the last :func:`cooldown_steps` steps
    (step k of C at ``t = k / C``), so that a rung's cooldown is whole steps.
    """
    fraction = (step + 1) / total
    if recipe.schedule != "wsd" or (recipe.warmup_frac > 0 and fraction < recipe.warmup_frac):
        return lr_at(recipe, fraction)
    c = cooldown_steps(recipe, total)
    k = step + 1 - (total - c)
    return cooldown_lr(recipe, k / c) if k > 0 else recipe.lr


@dataclasses.dataclass(frozen=True)
class Rung:
    """A wsd rung: a cooldown of ``cooldown`` steps branched off the run at step ``steps - cooldown``;
    it ends where an independent ``steps``-step wsd run ends (docs/training.md)."""

    fraction: float
    steps: int
    cooldown: int

    @property
    def start(self) -> int:
        """The main run's step count when the branch leaves it (its constant phase)."""
        return self.steps - self.cooldown


def plan_rungs(budget: Budget, recipe: TrainRecipe, total_steps: int | None) -> tuple[Rung, ...]:
    """The rungs of ``budget`` for a run of ``total_steps``; refuses one that cannot be a wsd run of its own.

    A rung at fraction f has S = round(f * total_steps) steps (Python's round, as the
    eval_at steps) and a cooldown of C = :func:`cooldown_steps` (S) steps; it is
    refused when S is under 1 or the whole run, when two rungs share S, and when its
    cooldown would start inside the warmup or after the run's own cooldown began.
    """
    if not budget.rungs:
        return ()
    if recipe.schedule != "wsd":
        raise ConfigError(rungs_need_wsd(recipe.schedule), "budget.rungs")
    if total_steps is None:
        raise ConfigError("a seconds budget has no fixed step count to place rungs at", "budget.rungs")
    n = total_steps
    warm, main_start = warmup_steps(recipe, n), n - cooldown_steps(recipe, n)
    if main_start < warm:
        raise ConfigError(
            f"the wsd cooldown of {plural(n, 'step')} ({n - main_start}) would start inside the warmup "
            f"({plural(warm, 'step')})",
            "recipe.cooldown_frac",
        )
    rungs: list[Rung] = []
    for f in budget.rungs:
        s = round(f * n)
        where = f"rung {f:g} of {plural(n, 'step')}"
        if s < 1:
            raise ConfigError(f"{where} buys {plural(s, 'step')}; a rung needs at least 1", "budget.rungs")
        if s >= n:
            raise ConfigError(
                f"{where} is {plural(s, 'step')}, the whole run; a rung ends before it", "budget.rungs"
            )
        if rungs and rungs[-1].steps == s:
            raise ConfigError(
                f"{where} is {plural(s, 'step')}, as rung {rungs[-1].fraction:g} is", "budget.rungs"
            )
        rung = Rung(f, s, cooldown_steps(recipe, s))
        if rung.start < warm:
            raise ConfigError(
                f"{where}: its cooldown ({rung.cooldown} of {plural(s, 'step')}) would start at step "
                f"{rung.start}, inside the warmup ({plural(warm, 'step')}); use a later rung or a shorter "
                "recipe.warmup_frac",
                "budget.rungs",
            )
        if rung.start > main_start:  # rounding only: the branch must leave the run's constant phase
            raise ConfigError(
                f"{where}: its cooldown would start at step {rung.start}, after the run's own cooldown "
                f"began (step {main_start})",
                "budget.rungs",
            )
        rungs.append(rung)
    return tuple(rungs)


def rung_cooldowns(budget: Budget, recipe: TrainRecipe, total_steps: int) -> int:
    """The cooldown steps the rungs of ``budget`` add to a run of ``total_steps`` (0 where they cannot
    be placed: such a run is refused before it trains)."""
    try:
        return sum(r.cooldown for r in plan_rungs(budget, recipe, total_steps))
    except ConfigError:
        return 0


#: run lengths :func:`most_rung_share` checks one by one; above it, a bound from the rounding
_SHARE_CHECKED = 1000


def most_rung_share(budget: Budget, recipe: TrainRecipe) -> float:
    """The most the rungs' cooldowns add to a run of any length, as a share of its steps: a run of N
    steps spends at most ``N * (1 + this)`` steps (what a FLOPs budget per candidate may cost, before
    the candidate's steps are known).

    Each cooldown is ``round(cooldown_frac * round(f * N))`` steps, at most ``cooldown_frac * f * N``
    plus ``(cooldown_frac + 1) / 2`` for the roundings: short runs are checked one by one, longer
    ones bounded by that.
    """
    if not budget.rungs:
        return 0.0
    checked = max(rung_cooldowns(budget, recipe, n) / n for n in range(1, _SHARE_CHECKED + 1))
    cd = recipe.cooldown_frac
    tail = sum(cd * f for f in budget.rungs) + len(budget.rungs) * (cd + 1) / 2 / _SHARE_CHECKED
    return max(checked, tail)


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    """The shape of one training run, fixed before the model is built."""

    budget: Budget
    batch_size: int
    seq_len: int
    cost: Compute  # at seq_len
    total_steps: int | None  # None: a seconds budget
    fractions: tuple[float, ...]  # where to evaluate (sorted, in (0, 1])
    rungs: tuple[Rung, ...] = ()  # wsd cooldowns branched off the run (plan_rungs)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len


def check_arch_fits(arch: ArchConfig, recipe: TrainRecipe, corpus: Any) -> int:
    """The training sequence length, after checking ``arch`` against the recipe and the corpus vocabulary."""
    seq_len = recipe.seq_len if recipe.seq_len is not None else arch.max_len
    task = getattr(corpus, "task", "lm")
    if task != arch.task:
        wanted = (
            "a parallel corpus (a directory with train.src, train.tgt, val.src, val.tgt, or "
            "'shakespeare-reversed')"
            if arch.is_seq2seq
            else "a text or token corpus"
        )
        holds = "source-target pairs (seq2seq)" if task == "seq2seq" else "language-model text"
        raise ConfigError(
            f"is {arch.task}, but the corpus {getattr(corpus, 'name', '?')!r} holds {holds}; "
            f"a task: {arch.task} architecture trains on {wanted}",
            "task",
        )
    if seq_len > arch.max_len:
        raise ConfigError(f"{seq_len} exceeds the architecture's max_len {arch.max_len}", "recipe.seq_len")
    vocab = getattr(corpus, "vocab_size", 256)
    if arch.vocab_size != vocab:
        raise ConfigError(
            f"{arch.vocab_size} differs from the corpus {getattr(corpus, 'name', '?')!r}, whose vocabulary "
            f"has {vocab} tokens; set vocab_size: {vocab}",
            "arch.vocab_size",
        )
    return seq_len


def plan_training(
    budget: Budget,
    recipe: TrainRecipe,
    seq_len: int,
    corpus: Any,
    arch: ArchConfig,
    eval_at: tuple[float, ...],
) -> TrainingPlan:
    """Steps the budget buys for ``arch`` at ``seq_len``; refuses a corpus shorter than one window."""
    cost = compute(arch, seq_len)
    total_steps = plan_steps(budget, cost, recipe.batch_size, seq_len)
    check_windows(corpus, seq_len)
    rungs = plan_rungs(budget, recipe, total_steps)
    return TrainingPlan(budget, recipe.batch_size, seq_len, cost, total_steps, check_eval_at(eval_at), rungs)


def check_windows(corpus: Any, seq_len: int) -> None:
    """Refuse a corpus whose training or validation part is shorter than one window of ``seq_len + 1``.

    A parallel corpus has no windows (its examples are padded or cut to ``seq_len``);
    it refuses an empty split itself.
    """
    if getattr(corpus, "task", "lm") != "lm":
        return
    unit = "bytes" if getattr(corpus, "is_bytes", True) else "tokens"  # a token corpus counts tokens
    for part, data in (("training", corpus.train), ("validation", corpus.val)):
        if len(data) <= seq_len:
            raise UserError(
                f"{corpus.name}: the {part} {'text' if unit == 'bytes' else 'data'} ({len(data)} {unit}) is "
                f"shorter than one window of seq_len + 1 = {seq_len + 1} {unit}; use a larger corpus or a "
                "smaller recipe.seq_len"
            )


@dataclasses.dataclass(frozen=True)
class ReportPoint:
    """A step where the trainer reads the loss back, logs, maybe evaluates, and calls the callback."""

    fraction: float
    last: bool
    due: tuple[float, ...]  # eval_at fractions reached at this step


class BudgetClock:
    """Training time and the share of the budget spent.

    A steps budget (``plan.total_steps`` set) is exact: the fraction is
    step / total and the evaluation steps are fixed in advance.  A seconds
    budget follows the clock, which is synced with the device (``sync``) at
    report points so queued GPU work is counted.
    """

    def __init__(self, plan: TrainingPlan, log_every: int, sync: Callable[[], None]) -> None:
        self.plan = plan
        self.log_every = log_every
        self.sync = sync
        self.eval_steps: dict[int, list[float]] = {}
        if plan.total_steps is not None:
            for f in plan.fractions:
                self.eval_steps.setdefault(eval_step(f, plan.total_steps), []).append(f)
        self.pending = list(plan.fractions)  # seconds budgets: fractions not yet reached
        self.train_seconds = 0.0
        self._t = time.perf_counter()

    def _elapsed(self) -> float:
        return self.train_seconds + (time.perf_counter() - self._t)

    def next_fraction(self, step: int) -> float:
        """Where the coming step (``step + 1``) will end; the learning rate is set for it."""
        if self.plan.total_steps is not None:
            return (step + 1) / self.plan.total_steps
        # Estimate where this step will end, so warmup does not begin at lr 0 for long.
        per_step = self.train_seconds / step if step else 0.0
        return min(1.0, (self._elapsed() + per_step) / self.plan.budget.value)

    def after(self, step: int) -> ReportPoint | None:
        """The report point that ``step`` (just taken) is, or None to keep training without a sync."""
        if self.plan.total_steps is not None:
            last = step >= self.plan.total_steps
            due = tuple(self.eval_steps.get(step, ()))
            fraction = step / self.plan.total_steps
        else:
            budget = self.plan.budget.value
            if step % self.log_every == 0 or self._elapsed() >= budget:
                self.sync()
            fraction = min(1.0, self._elapsed() / budget)
            last = fraction >= 1.0
            due = tuple(f for f in self.pending if f <= fraction)
            self.pending = [f for f in self.pending if f > fraction]
        if last or due or step % self.log_every == 0:
            return ReportPoint(fraction, last, due)
        return None

    def pause(self) -> None:
        """Stop the clock (after syncing the device) for evaluation and reporting."""
        self.sync()
        self.train_seconds += time.perf_counter() - self._t

    def resume(self) -> None:
        self._t = time.perf_counter()

    def set_aside(self) -> float:
        """Seconds since the clock last started, taken off the training time (the compiling first step)."""
        self.sync()
        now = time.perf_counter()
        seconds, self._t = now - self._t, now
        return seconds
