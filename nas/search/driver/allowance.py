"""When a search stops launching trials: ``--trials`` finished trials, ``--max-flops`` of training, or both.

A fixed number of trials makes hurdles save compute but never find more: the
hurdled search explores the same number of candidates.  Primer's hurdles pay
under a fixed search compute, where every candidate stopped early buys part of
another one; ``--max-flops`` is that budget.  The FLOPs spent are the
``train_flops`` the finished trials recorded (a stopped trial counts up to its
hurdle, a failed one up to its failure: a diverged loss, running out of memory,
a fault in a block; a duplicate architecture and a candidate over the caps
train nothing), read back from the study, so a continued search counts what it
already spent.  What a worker process that was killed had trained is not known
(a crash, the OOM killer, ``--trial-timeout``: nothing comes back from it, and
reporting every step to the driver would cost a round trip a step), so it is
not counted; nor is a first attempt that ran out of memory beside other
trials and was run again alone (it fails at its first steps).

With a FLOPs budget per candidate (``--budget-flops``) the limit is never
passed: a trial starts only if its whole budget fits beside what was spent and
what the running trials may still spend (with wsd rungs, the budget and the most
their cooldowns can add: :func:`evaluators.budget.most_rung_share`; a sampled trial
reserves its own exactly).  A pre-screen (``--prescreen``) adds
its own FLOPs, known exactly only once the candidate is sampled: before it is,
a launch reserves the most any candidate of the space can screen for
(:func:`screen_bound`, from the space's largest stand-ins, as the memory checks
bound a candidate), so the limit is never passed; once sampled, a trial
reserves its own screen's.  With a steps or tokens budget a
candidate's FLOPs depend on its architecture, known only once it is sampled:
a trial starts while the spent and reserved FLOPs are below the limit, so the
last one may pass it by up to its own budget (with a seconds budget, whose
FLOPs are known only afterwards, by one trial per worker).

A duplicate or an over-cap candidate costs nothing, so a search bounded by
compute alone could go on forever in a space it has exhausted: it also ends
after ``IDLE_LIMIT`` finished trials in a row that trained nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from optuna.trial import FrozenTrial

from nas.errors import ConfigError
from nas.models.cost import Compute
from nas.spec.training import Budget, TrainRecipe

if TYPE_CHECKING:
    from nas.spec import Spec

#: finished trials in a row that trained nothing, after which a search without --trials ends
IDLE_LIMIT = 100


def trained_flops(user_attrs: Mapping[str, Any]) -> float:
    """The training FLOPs a finished trial spent, its prescreen's included (0 for a duplicate, which
    reused its twin's result)."""
    if "duplicate_of" in user_attrs:
        return 0.0
    total = 0.0
    for key in ("train_flops", "prescreen_flops"):
        value = user_attrs.get(key)
        total += float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0
    return total


def spent_flops(trials: Iterable[FrozenTrial]) -> float:
    """The training FLOPs the trials of a study spent, as the search counts them."""
    return sum(trained_flops(t.user_attrs) for t in trials)


def planned_flops(budget: Budget, cost: Compute, tokens_per_step: int, recipe: TrainRecipe) -> float:
    """What a candidate of ``cost`` will spend under ``budget``: the steps it buys and its wsd rungs'
    cooldowns (0 for a seconds budget: unknown)."""
    from evaluators.budget import plan_steps, rung_cooldowns

    if budget.kind == "seconds":
        return 0.0
    try:
        steps = plan_steps(budget, cost, tokens_per_step, 1)  # tokens per step as one sequence of them
    except ConfigError:  # buys no step: refused before it trains
        return 0.0
    steps = steps or 0
    return (steps + rung_cooldowns(budget, recipe, steps)) * tokens_per_step * cost.train_flops_per_token


def screen_bound(space: Any, prescreen: str | None) -> float:
    """The most training FLOPs the pre-screen ``prescreen`` can spend on any candidate of ``space``:
    the largest screen of the space's largest one-layer stand-ins, each at the space's greatest depth
    (a screen's cost grows with width, depth and every option's size; 0 without a screen)."""
    if not prescreen:
        return 0.0
    import dataclasses

    from evaluators.prescreen import planned_flops as screen_flops
    from nas.search.space.combinations import one_layer_archs

    most = 0.0
    for arch, n_layers, n_encoder in one_layer_archs(space, largest=True):
        deep = dataclasses.replace(
            arch, layers=arch.layers * n_layers, encoder_layers=arch.encoder_layers * n_encoder
        )
        most = max(most, screen_flops(prescreen, deep))
    return most


class Allowance:
    """The search's stopping rule: at most ``trials`` finished trials and ``max_flops`` training FLOPs.

    Either may be None (no such limit), not both.  The driver reserves a
    launched trial's planned FLOPs and settles them with what it spent.
    """

    def __init__(
        self, trials: int | None, max_flops: float | None, spent: float = 0.0, per_trial: float = 0.0
    ) -> None:
        if trials is None and max_flops is None:
            raise ValueError("a search needs --trials, --max-flops or both")
        self.trials, self.max_flops, self.spent = trials, max_flops, spent
        self.per_trial = per_trial  # what any trial may spend, when known before sampling it (else 0)
        self.screen = 0.0  # the costliest pre-screen reserved so far: a trial's screen costs about as much
        self.reserved: dict[int, float] = {}  # trial number -> FLOPs it may still spend
        self.idle = 0  # finished trials in a row that trained nothing

    @classmethod
    def of(cls, spec: Spec, trials: int | None) -> Allowance:
        """The limits of a run of ``spec`` that wants ``trials`` finished trials (a FLOPs budget per
        candidate: the most any trial spends)."""
        from evaluators.budget import most_rung_share

        per_trial = 0.0
        if spec.budget.kind == "flops":  # its steps, and what its rungs' cooldowns may add to them
            per_trial = spec.budget.value * (1.0 + most_rung_share(spec.budget, spec.recipe))
        return cls(trials, spec.search.max_flops, per_trial=per_trial)

    def may_launch(self, done: int, running: int) -> bool:
        """True when another trial may start, with ``done`` finished and ``running`` under way."""
        if self.trials is not None and done + running >= self.trials:
            return False
        if self.trials is None and self.idle >= IDLE_LIMIT:
            return False
        if self.max_flops is None:
            return True
        committed = self.spent + sum(self.reserved.values())
        if self.per_trial > 0:  # the next trial's whole budget (and its screen's, as far as known) must fit
            return committed + self.per_trial + self.screen <= self.max_flops * (1 + 1e-9)
        return committed < self.max_flops

    def reserve(self, number: int, flops: float, screen: float = 0.0) -> None:
        """Trial ``number`` may spend ``flops``, of which ``screen`` on its pre-screen."""
        self.reserved[number] = flops
        self.screen = max(self.screen, screen)

    def settle(self, number: int, user_attrs: Mapping[str, Any]) -> None:
        """Trial ``number`` finished: what it recorded replaces its reservation."""
        self.reserved.pop(number, None)
        flops = trained_flops(user_attrs)
        self.spent += flops
        self.idle = 0 if flops > 0 else self.idle + 1

    def settle_untrained(self) -> None:
        """A trial finished without a worker (a duplicate, over the caps, invalid): it spent nothing."""
        self.idle += 1

    def stalled(self) -> bool:
        """True when a search without --trials ended on ``IDLE_LIMIT`` trials that trained nothing."""
        return self.trials is None and self.idle >= IDLE_LIMIT

    def describe(self, done: int) -> str:
        """What is left, for the driver's first line: ``20 more trials``, ``1.2e12 FLOPs more``."""
        parts = []
        if self.trials is not None:
            parts.append(f"{max(0, self.trials - done)} more trial(s)")
        if self.max_flops is not None:
            left = max(0.0, self.max_flops - self.spent)
            parts.append(f"{left:.3g} more training FLOPs (search.max_flops)")
        return " or ".join(parts)

    def limits(self) -> str:
        """The limits as spec fields, with the FLOPs spent:
        ``search.trials 24, search.max_flops 2.4e+12 (2.5e+12 spent)``."""
        parts = [] if self.trials is None else [f"search.trials {self.trials}"]
        if self.max_flops is not None:
            parts.append(f"search.max_flops {self.max_flops:.3g} ({self.spent:.3g} spent)")
        return ", ".join(parts)

    def progress(self) -> str:
        """``2.1e+12 of 2.4e+12 FLOPs`` for the progress line; empty without --max-flops."""
        if self.max_flops is None:
            return ""
        return f"{self.spent:.3g} of {self.max_flops:.3g} FLOPs"
