"""Running lists of runs (a confirmation, a ladder): a study beside the search's, driven by its driver.

:func:`run_lists` is the one runner: ``confirm`` and ``ladder`` hand it their
plan's runs in batches (:func:`confirm_batches`, a ladder's one list) and read
their report from the study it leaves.  The confirm study (``S-confirm`` in the
search's storage; a ladder's is ``S-ladder``) holds one trial per run,
enqueued with fixed parameters ``arch`` (an index into the study's
``confirm_archs`` record), ``scale``, ``seed`` and ``lr``.  :class:`ConfirmDriver`
is the search's :class:`~nas.search.driver.loop.Driver` with one step replaced:
instead of sampling an architecture it reads the run from the trial's
parameters and scales the budget and sets the seed and learning rate.  So the
pool, retries, GPU packing, the re-queueing of a stopped driver's trials and
the progress lines are the search's own, and a stopped confirmation continues
where it stopped: runs already finished are never enqueued again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from nas.confirm.plan import LR_RANGE, SCALE_RANGE, Entry, Run, run_label
from nas.errors import UserError
from nas.execution.pool import Pool
from nas.execution.worker import DIVERGED
from nas.models.cost import compute
from nas.redact import mask_url
from nas.search.driver.context import RunContext
from nas.search.driver.inflight import Running, default_pool
from nas.search.driver.loop import Driver
from nas.search.driver.payload import trial_payload
from nas.search.storage.lease import refuse_if_held
from nas.search.storage.records import CONFIRM_OF, REQUEUED, SETTINGS, load_study, study_exists
from nas.search.storage.study import check_settings, check_spec, count_done, create_under_lease
from nas.search.storage.urls import fast_sqlite_commits, open_storage
from nas.spec.training import Budget
from nas.validate import MAX_SEED

ARCHS = "confirm_archs"  # confirm study user attr: [Entry.to_dict()], the ``arch`` param indexes it
PLAN = "confirm_plan"  # confirm study user attr: what the last `confirm` asked for (see ``Plan``)
#: confirm study user attr: the flags of the last `confirm` that chose its runs (``--top 3 --seeds 3 ...``),
#: so that what finishes an unfinished confirmation can be named (``export --confirmed``)
FLAGS = "confirm_flags"


def confirm_study_name(study: str) -> str:
    """The name of the study that confirms the search study ``study``."""
    return f"{study}-confirm"


def scaled_budget(budget: Budget, scale: float) -> Budget:
    """``budget`` times ``scale`` (a steps budget stays a whole number of steps, at least one); its
    rungs stay the same fractions of it."""
    if budget.kind == "steps":
        return Budget("steps", max(1, round(budget.value * scale)), budget.rungs)
    return Budget(budget.kind, budget.value * scale, budget.rungs)


class ConfirmDriver(Driver):
    """The search driver, taking each trial's run from its fixed parameters instead of the space."""

    CONFIRMATION = True

    def __init__(
        self,
        settings: RunContext,
        entries: Sequence[Entry],
        pool_factory: Callable[[RunContext], Pool] | None = None,
        out: TextIO | None = None,
        trials: int | None = None,
    ) -> None:
        super().__init__(settings, pool_factory, out, trials=trials)
        self.entries = {e.index: e for e in entries}
        self.flops: dict[int, float] = {}  # forward FLOPs per token, by entry index

    def _prepare(self, study: optuna.Study, trial: Trial, pool: Pool) -> tuple[str, str] | None:
        run = Run(
            trial.suggest_int("arch", 0, 10**6),
            trial.suggest_float("scale", *SCALE_RANGE),
            trial.suggest_int("seed", 0, MAX_SEED),
            trial.suggest_float("lr", *LR_RANGE),
        )
        entry = self.entries.get(run.arch)
        if entry is None:  # only a trial asked beyond the queue gets here: the targets make that impossible
            return self._finish_now(
                study, trial, TrialState.FAIL, f"no confirm run for arch index {run.arch}"
            )
        s, arch = self.s, entry.arch
        c = compute(arch, s.spec.recipe.seq_len)
        for key, value in (
            ("arch", arch.to_dict()),
            ("arch_id", arch.arch_id),
            ("params", c.params),
            ("flops_per_token", c.fwd_flops_per_token),
            ("name", entry.name),
            ("role", entry.role),
            ("scale", run.scale),
            ("seed", run.seed),
            ("lr", run.lr),
            ("summary", f"[{run_label(entry.name, run, s.spec.recipe.lr)}] {arch.summary()}"),
        ):
            trial.set_user_attr(key, value)
        recipe = dataclasses.replace(s.spec.recipe, seed=run.seed, lr=run.lr)
        if recipe.parametrization == "completep" and entry.base is not None:  # a ladder member: its size 1
            width, depth = entry.base
            recipe = dataclasses.replace(
                recipe,
                base_width=width if recipe.base_width is None else recipe.base_width,
                base_depth=depth if recipe.base_depth is None else recipe.base_depth,
            )
        payload = dataclasses.replace(
            trial_payload(s, study, trial, arch),
            recipe=recipe.to_dict(),
            budget=scaled_budget(s.spec.budget, run.scale).to_dict(),
        )
        pool.submit(trial.number, payload.to_dict())
        self.running[trial.number] = Running(
            trial, payload, arch.arch_id, time.monotonic(), work=self._work(run)
        )
        return None

    def _work(self, run: Run) -> float:
        """A run's cost relative to the others: its scale, times its FLOPs per token under a steps or
        tokens budget (a FLOPs or seconds budget costs the same at every width)."""
        entry = self.entries.get(run.arch)
        if self.s.spec.budget.kind in ("flops", "seconds") or entry is None:
            return run.scale
        if run.arch not in self.flops:
            self.flops[run.arch] = compute(entry.arch, self.s.spec.recipe.seq_len).fwd_flops_per_token
        return run.scale * self.flops[run.arch]

    def _pending(self) -> tuple[list[float], list[tuple[float, float]]]:
        """The queued runs' work (the long runs at the larger scales come last) and the running ones'."""
        _, running = super()._pending()
        study = self.study
        waiting = () if study is None else study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        queued = [_run_of(t) for t in waiting]
        return [self._work(run) for run in queued if run is not None], running


class KeptPool:
    """One pool for every batch of a list of runs (:func:`run_lists`): the driver's ``shutdown`` leaves it
    running."""

    def __init__(self, factory: Callable[[RunContext], Pool]) -> None:
        self.factory = factory
        self.pool: Pool | None = None

    def __call__(self, settings: RunContext) -> Any:
        if self.pool is None:
            self.pool = self.factory(settings)
        return _NoShutdown(self.pool)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


class _NoShutdown:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def shutdown(self) -> None:
        pass


def _run_of(t: FrozenTrial) -> Run | None:
    return Run.from_params(t.params or t.system_attrs.get("fixed_params") or {})


def existing_runs(study: optuna.Study) -> dict[Run, FrozenTrial]:
    """Every run the study holds (finished, running or queued), but not the records of re-queued ones."""
    out: dict[Run, FrozenTrial] = {}
    for t in study.get_trials(deepcopy=False):
        run = _run_of(t)
        if run is not None and not (t.state == TrialState.FAIL and t.user_attrs.get(REQUEUED)):
            out[run] = t
    return out


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one ``confirm`` asks for: entries (by index), baselines, scales, seeds and the lr sweep."""

    wanted: tuple[int, ...]
    baselines: tuple[int, ...]
    scales: tuple[float, ...]
    seeds: tuple[int, ...]
    lrs: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        return cls(*(tuple(d.get(f.name) or ()) for f in dataclasses.fields(cls)))


def open_confirm_study(settings: RunContext, source: str, entries: Sequence[Entry]) -> optuna.Study:
    """The confirm study, created if new (settings record first, so the driver never replaces it)."""
    storage = open_storage(settings.storage)
    name = settings.study
    if not study_exists(storage, name) or SETTINGS not in load_study(storage, name).user_attrs:

        def record(study: optuna.Study) -> None:
            study.set_user_attr(CONFIRM_OF, source)
            study.set_user_attr(SETTINGS, settings.fingerprint())  # the commit point: written last

        # a half-made confirmation of a killed run is replaced; any other study of the name is refused
        study, lease = create_under_lease(storage, name, settings.storage, ["minimize"], None, record)
        lease.release()  # the confirm driver takes its own when it runs the study
    else:
        # Another confirm (or ladder) running this study now would be refused by the driver's lease, but
        # only after this one had rewritten the plan and queued its runs, which the running one then took
        # up: refused here, before anything is written.
        refuse_if_held(storage, name)
        study = optuna.load_study(study_name=settings.study, storage=storage)
        if study.user_attrs.get(CONFIRM_OF) != source:
            raise UserError(
                f"--storage {mask_url(settings.storage)!r}: study {settings.study!r} exists and is not "
                f"a confirmation of {source!r}"
            )
        # The driver checks these again; here they come before anything is queued, so a refused
        # confirmation leaves the study as it was (no WAITING runs for the next confirm to pick up).
        check_spec(study, settings.spec)
        check_settings(study, settings.fingerprint())
        fast_sqlite_commits(storage)
    study.set_user_attr(ARCHS, [e.to_dict() for e in entries])
    return study


def enqueue_missing(
    study: optuna.Study, runs: Iterable[Run], entries: dict[int, Entry], rerun_before: int = 0
) -> int:
    """Queue the runs the study does not hold yet; returns how many.

    A run whose latest trial (numbered below ``rerun_before``: one of an earlier ``confirm``)
    failed for any reason but divergence is queued again: the machine, the flags or the
    corpus that made it fail may have been fixed since.  Its failed trial stays as a record.
    """

    def rerun(t: FrozenTrial) -> bool:
        failed = t.state == TrialState.FAIL and t.number < rerun_before
        return failed and t.user_attrs.get("fail_reason") != DIVERGED

    have = {run for run, t in existing_runs(study).items() if not rerun(t)}
    n = 0
    for run in runs:
        if run not in have:
            e = entries[run.arch]
            study.enqueue_trial(
                run.params(),
                user_attrs={
                    "arch_id": e.arch_id,
                    "name": e.name,
                    "role": e.role,
                    "scale": run.scale,
                    "seed": run.seed,
                    "lr": run.lr,
                },
            )
            have.add(run)
            n += 1
    return n


def best_lrs(
    study: optuna.Study, entries: Sequence[Entry], scales: Sequence[float], seed: int, lrs: Sequence[float]
) -> dict[tuple[int, float], float]:
    """(arch index, scale) -> the lr whose ``seed`` run had the lowest loss (absent: none finished)."""
    have = existing_runs(study)
    out = {}
    for e in entries:
        for scale in scales:
            done = [
                (have[r].values[0], r.lr)
                for lr in lrs
                if (r := Run(e.index, scale, seed, lr)) in have and have[r].state == TrialState.COMPLETE
            ]
            if done:
                out[(e.index, scale)] = min(done)[1]
    return out


def sweep_runs(plan: Plan, wanted: Sequence[Entry]) -> list[Run]:
    """The lr sweep's runs (``plan.lrs``): each architecture at each scale and lr, with the first seed."""
    return [Run(e.index, sc, plan.seeds[0], lr) for sc in plan.scales for e in wanted for lr in plan.lrs]


def planned_runs(study: optuna.Study, plan: Plan, wanted: Sequence[Entry], recipe_lr: float) -> list[Run]:
    """The runs ``plan`` compares: every architecture at every scale and seed, at the recipe's lr or,
    after an lr sweep, at the lr its first seed did best with (none for one whose sweep has no result)."""
    if not plan.lrs:
        return [
            Run(e.index, sc, seed, recipe_lr) for sc in plan.scales for seed in plan.seeds for e in wanted
        ]
    chosen = best_lrs(study, wanted, plan.scales, plan.seeds[0], plan.lrs)
    return [
        Run(e.index, sc, seed, chosen[(e.index, sc)])
        for sc in plan.scales
        for seed in plan.seeds
        for e in wanted
        if (e.index, sc) in chosen
    ]


def drive_queue(
    settings: RunContext,
    study: optuna.Study,
    entries: Sequence[Entry],
    pools: KeptPool,
    out: TextIO | None,
) -> None:
    """Run every queued run of ``study`` to its end through the search's driver."""
    trials = study.get_trials(deepcopy=False)
    pending = sum(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in trials)
    if pending == 0:
        return
    target = count_done(study) + pending
    ConfirmDriver(settings, entries, pools, out, trials=target).run()


#: one batch of runs to queue, read from the study as the batches before it left it (an lr sweep's results
#: choose the runs after it)
Batch = Callable[[optuna.Study], Iterable[Run]]


def confirm_batches(plan: Plan, every: Sequence[Entry], recipe_lr: float) -> list[Batch]:
    """A confirmation's runs in the order they train: the lr sweep first (``plan.lrs``), then every wanted
    architecture at every scale and seed, at the lr the sweep chose (``recipe_lr`` without a sweep)."""
    by_index = {e.index: e for e in every}
    wanted = [by_index[i] for i in plan.wanted]
    sweep: list[Batch] = [lambda _study: sweep_runs(plan, wanted)] if plan.lrs else []
    return [*sweep, lambda study: planned_runs(study, plan, wanted, recipe_lr)]


def run_lists(
    settings: RunContext,
    source: str,
    every: Sequence[Entry],
    record: Mapping[str, Any],
    batches: Sequence[Batch],
    flags: str = "",
    pool_factory: Callable[[RunContext], Pool] | None = None,
    out: TextIO | None = None,
) -> optuna.Study:
    """The one runner of lists of runs (``confirm``'s, ``ladder``'s): train the runs of each batch that
    the study beside ``source`` does not hold yet, batch after batch, through the search's driver.

    The study (``settings.study``) is created or continued, or refused, before anything is queued
    (:func:`open_confirm_study`); ``record`` (the plan, by user attribute, which the report reads) and
    ``flags`` (the command's flags that chose the runs) are recorded beside ``every``, the architectures
    the runs index.  The driver leases the study, retries, packs one pool for every batch and prints the
    progress lines; a stopped one re-queues its running trials, so the same command continues where it
    stopped, and a run an earlier command failed (but for divergence) is queued again.
    """
    settings.check_environment()  # before the study is created: a missing corpus leaves nothing behind
    study = open_confirm_study(settings, source, every)
    rerun_before = len(study.get_trials(deepcopy=False))  # failed runs of earlier commands run again
    for key, value in record.items():
        study.set_user_attr(key, value)
    study.set_user_attr(FLAGS, flags)
    by_index = {e.index: e for e in every}
    pools = KeptPool(pool_factory or default_pool)
    try:
        for batch in batches:
            enqueue_missing(study, batch(study), by_index, rerun_before)
            drive_queue(settings, study, every, pools, out)
    finally:
        pools.close()
    return study
