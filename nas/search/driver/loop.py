"""The search driver: Optuna ask-and-tell on one side, a pool of workers on the other.

Only the driver writes the study.  It asks a trial, turns it into an
ArchConfig through the search space, refuses candidates over the caps, reuses
the result of an identical architecture already measured or stopped
(:mod:`nas.search.driver.twins`), sends the plain payload to a worker, and tells the
outcome: COMPLETE with the objective values, PRUNED when a hurdle stopped it,
FAIL with a reason otherwise.  A
worker that dies costs its trial a retry, not the search; what is guaranteed
after worker, node and driver failures is in docs/reliability.md.

Order of a run: the spec and the run context check their values when made; ``run``
checks what they point at (corpus, directories, storage, Ray address), then an
existing study's settings, then starts the worker pool (a bad ``--address``
fails here), and only then creates a new study on disk, so a mistake leaves
nothing behind.  The run context is in :mod:`nas.search.driver.context`, studies in
:mod:`nas.search.storage.study`, the progress lines in :mod:`nas.search.driver.console`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import optuna
from optuna.trial import Trial, TrialState

from evaluators.prescreen import planned_flops as screen_flops
from evaluators.result import METRICS, RUN_FIELDS, measure_of
from nas.data import vocab_size_of
from nas.errors import ConfigError, UserError
from nas.execution.pool import Finished, NoWorkersLeft, Pool
from nas.execution.worker import OUT_OF_MEMORY
from nas.interrupts import raise_lost_stop
from nas.models import ArchConfig
from nas.models.cost import Compute, compute
from nas.search.driver.allowance import Allowance, planned_flops, screen_bound, spent_flops
from nas.search.driver.console import Reporter
from nas.search.driver.context import RunContext, check_no_stale_runs
from nas.search.driver.inflight import Running, Waiting, default_pool
from nas.search.driver.outcome import fail, finish_now, objective_values, tell_result
from nas.search.driver.payload import trial_payload
from nas.search.driver.twins import Twins
from nas.search.driver.weights import Admission, KeptWeights
from nas.search.space.candidate import constraint_values, over_caps, tell_infeasible
from nas.search.storage.lease import DriverLease, LeaseLost
from nas.search.storage.records import state_name
from nas.search.storage.study import (
    count_done,
    create_new_study,
    drop_if_empty,
    load_existing_study,
    record_sampler,
    record_spec,
    recover_stale,
    requeue,
    take_lease,
)

#: metrics copied onto each trial's user attributes
METRIC_KEYS = (*METRICS, *RUN_FIELDS)


class Resumable(UserError):
    """The search stopped with its unfinished trials re-queued: the same command continues it."""


#: how many times one run of a search starts its local Ray again after it died
MAX_RAY_RESTARTS = 3


class Driver:
    """Runs one search to ``run.trials`` finished trials or ``search.max_flops`` on a worker pool.

    ``trials`` (a confirmation's: its queued runs) replaces the trials the spec wants.
    """

    CONFIRMATION = False  # runs a confirm study's queued runs (nas.confirm.runner.ConfirmDriver)

    def __init__(
        self,
        run: RunContext,
        pool_factory: Callable[[RunContext], Pool] | None = None,
        out: TextIO | None = None,
        lease_heartbeat: float | None = None,
        *,
        trials: int | None = None,
    ) -> None:
        self.s = run
        self.trials = run.trials if trials is None else trials  # finished trials wanted; None: no limit
        self.lease_heartbeat = lease_heartbeat  # None: $NAS_LEASE_HEARTBEAT or 5 s (nas.search.storage.lease)
        self.lease: DriverLease | None = None
        self.pool_factory = pool_factory or default_pool
        self.out = out or sys.stdout
        self.study: optuna.Study | None = None  # set by run() once the study is open
        self.running: dict[int, Running] = {}  # trial number -> the trial a worker has
        self.retry: list[int] = []  # trials whose worker died, waiting for a worker to run them again
        # trials whose architecture a worker is training right now: they wait for its result (its twin)
        self.waiting: dict[int, Waiting] = {}
        self.done = 0  # trials that count toward --trials
        self.ray_restarts = 0  # local Rays started again after the one this search started died
        self.twins = Twins(METRIC_KEYS)  # the architectures measured so far (read from the study in _search)
        self.sampler = run.spec.search.sampler  # the sampler the study runs with, ``auto`` resolved (by run)
        self.allowance = Allowance.of(run.spec, self.trials)  # a continued study's spent FLOPs: read in run()
        if run.spec.search.max_flops is not None and run.spec.search.prescreen:
            # until a candidate is sampled its screen's cost is unknown: reserve the most any can cost
            self.allowance.screen = screen_bound(run.space, run.spec.search.prescreen)
        # the best trials' weights (resources.keep_weights); a confirmation keeps none (commands refuse it)
        keep = 0 if self.CONFIRMATION else run.spec.resources.keep_weights
        self.kept = KeptWeights(keep, run.weights_dir)
        self.stop: UserError | None = None  # a failure that ends the search once the trial it hit is told

    def run(self) -> optuna.Study:
        """Search until ``self.trials`` finished trials or ``search.max_flops``; returns the study.

        The study's lease (:mod:`nas.search.storage.lease`) is held from before the first write
        to the study until the end, and released on every way out.
        """
        s = self.s
        corpus = s.check_environment()
        report = Reporter(self.trials, self.out, self.allowance.progress, self._pending)
        for left_out in getattr(corpus, "left_out", ()):  # never silently
            report.line(f"note: {s.data or 'the corpus'}: left out {left_out}")
        study = load_existing_study(s, self.CONFIRMATION)  # refused here when another driver runs it
        try:
            if study is not None:
                self.lease, replaced = take_lease(study, self.lease_heartbeat)
                if replaced is not None:
                    report.line(f"took over the study from a driver that is gone ({replaced.describe()})")
                requeued = recover_stale(study)  # only under the lease: RUNNING trials are a dead driver's
                if requeued:
                    report.line(f"re-queued trial(s) {requeued} left running by a stopped driver")
                done = count_done(study)
                self.allowance.spent = spent_flops(study.get_trials(deepcopy=False))
                if not self.allowance.may_launch(done, 0):
                    report.line(
                        f"study {s.study!r} already has {done} finished trials "
                        f"({self.allowance.limits()}); nothing to do: raise --search.trials (or "
                        "--search.max_flops) to continue it, or give a new --study name to start afresh"
                    )
                    return study
            self.kept.check_files(study)  # before the pool and the study: a refusal leaves nothing behind
            if study is None:
                check_no_stale_runs(s.tb_dir)
            pool = self.pool_factory(s)  # starts Ray; a bad --address is refused before a study is created
            try:
                for note in pool.notes:
                    report.line(note)
                created = study is None
                if study is None:
                    study, seeds, self.lease = create_new_study(s, self.lease_heartbeat)
                    if seeds:
                        report.line(f"seeded the first generation with: {', '.join(seeds)}")
                self.study = study
                try:
                    self.sampler = record_sampler(study, s)  # what ran, ``auto`` resolved
                    record_spec(study, s.spec)  # the spec of the latest run (only MUTABLE fields can differ)
                    self._search(study, pool, report)
                except KeyboardInterrupt:
                    # Ctrl-C or SIGTERM before this new study's first result: its running trial was
                    # re-queued, but a study holding only that and its seeds is nothing to continue;
                    # dropped, so the same command (or another) starts afresh
                    if created and not self.CONFIRMATION:
                        drop_if_empty(study)
                    raise
                except Exception as err:
                    # this run made it, nothing finished, and it failed (not a stop the user asked for, nor
                    # "no worker left", which re-queues for the same command): leave nothing behind
                    if created and not self.CONFIRMATION and not isinstance(err, (Resumable, LeaseLost)):
                        drop_if_empty(study)
                    raise
            finally:
                pool.shutdown()
        finally:
            if self.lease is not None:
                self.lease.release()
        return study

    def _search(self, study: optuna.Study, pool: Pool, report: Reporter) -> None:
        s = self.s
        self.done = count_done(study)
        self.twins = Twins.of(study.get_trials(deepcopy=False), METRIC_KEYS)
        self.kept.load(study, report.line)
        for t in study.get_trials(deepcopy=False):  # the progress line's counts and best are the study's
            report.earlier(state_name(t))
            if t.state == TrialState.COMPLETE:
                report.seen(t.values[0] if t.values else None)
        workers = pool.size or s.workers
        where = "in this process (resources.local)" if s.spec.resources.local else f"on {workers} worker(s)"
        if self.CONFIRMATION:  # queued runs, each at its own scale (the [..., budget 4x, seed 0] of its line)
            what = f"each run on its scale times the budget {s.spec.budget}"
        else:
            evaluator = s.spec.search.evaluator
            report.measure = measure_of(
                evaluator
            )  # its best: the highest probe score, not the lowest 1 - score
            # the probes train by their own protocol and a proxy not at all: the budget would be a claim
            scored = f"budget {s.spec.budget} per trial" if evaluator == "lm" else (
                f"evaluator {evaluator} (the budget is not used)")  # fmt: skip
            what = (
                f"{scored}, objective {s.spec.search.objective}, "
                f"sampler {self.sampler}{' (auto)' if s.spec.search.sampler == 'auto' else ''}"
            )
        report.line(
            f"study {s.study!r}: {self.done} finished, running up to {self.allowance.describe(self.done)} "
            f"{where}; {what}"
        )
        try:
            while True:
                raise_lost_stop()  # a Ctrl-C or SIGTERM the garbage collector swallowed stops here
                self._confirm_lease()
                self._fill(study, pool, report)
                if not self.running and not self.allowance.may_launch(self.done, 0):
                    if self.allowance.stalled():
                        report.line(
                            f"stopped: the last {self.allowance.idle} candidates were measured "
                            "already or over the caps; the space looks exhausted"
                        )
                    break
                try:
                    finished = pool.wait(timeout=1.0)
                except NoWorkersLeft as err:
                    if self._restart_ray(pool, report):
                        continue
                    n = len(self.running)
                    self._requeue_all(study, "no worker left to run it")
                    raise Resumable(
                        f"{err}; {n} unfinished trial(s) re-queued, finished ones are kept: "
                        "run the same command again to continue"
                    ) from None
                for fin in finished:
                    self._collect(study, fin, report, pool)
                if self.stop is not None:  # every finished trial is told; the running ones are re-queued
                    raise self.stop
        except LeaseLost:
            raise  # the trials are the new driver's now
        except BaseException as err:
            # Ctrl-C, SIGTERM, an error: leave nothing RUNNING; the unfinished trials' parameters
            # are queued and run first when the search is continued.
            self._requeue_all(study, f"driver stopped ({type(err).__name__})")
            raise

    def _restart_ray(self, pool: Pool, report: Reporter) -> bool:
        """The local Ray this search started died (its raylet killed, say): start a new one and
        run again what was running.  At most ``MAX_RAY_RESTARTS`` times per run; a joined cluster
        (``--address``) is not this driver's to restart, so it keeps waiting, then stopping."""
        if not pool.can_restart or self.ray_restarts >= MAX_RAY_RESTARTS:
            return False
        self.ray_restarts += 1
        report.line(
            f"the local Ray this search started lost every worker (its node died?); starting a new one "
            f"(restart {self.ray_restarts} of {MAX_RAY_RESTARTS})"
        )
        started = time.monotonic()
        for note in pool.restart():
            report.line(note)
        again = list(self.running)
        self.retry = again  # the new workers run every trial that was running, first
        report.line(
            f"a new local Ray is up after {time.monotonic() - started:.0f} s; running again trial(s) "
            f"{', '.join(map(str, again)) or '(none)'}"
        )
        return True

    def _confirm_lease(self) -> None:
        if self.lease is not None:  # None only for a Driver used without run() (tests)
            self.lease.confirm()

    def _requeue_all(self, study: optuna.Study, reason: str) -> None:
        trials = [r.trial for r in self.running.values()] + [w.trial for w in self.waiting.values()]
        self.running.clear()
        self.waiting.clear()
        try:
            for trial in trials:
                requeue(study, trial, reason)
            # Under the lease every RUNNING trial is this driver's: one asked a moment before a signal
            # came (study.ask() returned, or was returning, outside _launch's handler) is re-queued too.
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                requeue(study, t, reason)
        except Exception:  # noqa: BLE001 - the storage may be what failed; the next start recovers them
            return

    # -- launching ------------------------------------------------------------------------
    def _fill(self, study: optuna.Study, pool: Pool, report: Reporter) -> None:
        """Give every idle worker a trial: retries first, then new trials up to ``--trials``."""
        while self.retry and pool.has_idle():
            number = self.retry.pop(0)
            r = self.running[number]
            if r.alone:
                pool.submit(number, r.payload.to_dict(), exclusive=True)
            else:
                pool.submit(number, r.payload.to_dict())
        while not self.retry and pool.has_idle() and self.allowance.may_launch(self.done, self._in_flight()):
            launched = self._launch(study, pool)
            if launched is not None:  # finished at once (refused, duplicate, invalid)
                self.done += 1
                self.allowance.settle_untrained()
                number, state, text = launched
                report.finished(self.done, len(self.running), number, state, text, 0.0, self.s.workers)

    def _launch(self, study: optuna.Study, pool: Pool) -> tuple[int, str, str] | None:
        trial = study.ask()
        try:
            ended = self._prepare(study, trial, pool)
        except BaseException:
            # Stopped between ask and submit: the trial is neither running nor told; re-queue it.
            if trial.number not in self.running and trial.number not in self.waiting:
                try:
                    now = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
                    if now.state == TrialState.RUNNING:
                        requeue(study, trial, "driver stopped while it was being launched")
                except Exception:  # noqa: BLE001 - the next start recovers it
                    pass
            raise
        return None if ended is None else (trial.number, *ended)

    def _prepare(self, study: optuna.Study, trial: Trial, pool: Pool) -> tuple[str, str] | None:
        """Sample, check and submit ``trial``; (state, text) when it ended without a worker."""
        s = self.s
        try:
            arch = s.space.suggest(trial).with_vocab(vocab_size_of(s.data))  # the vocabulary is the data's
        except ConfigError as err:  # the space's own checks should make this rare
            return self._finish_now(study, trial, TrialState.FAIL, f"invalid architecture: {err}")
        c = compute(arch, s.spec.recipe.seq_len)
        trial.set_user_attr("arch", arch.to_dict())
        trial.set_user_attr("arch_id", arch.arch_id)
        trial.set_user_attr("summary", arch.summary())
        trial.set_user_attr("params", c.params)
        trial.set_user_attr("flops_per_token", c.fwd_flops_per_token)
        trial.set_user_attr("state_bytes", c.state_bytes)
        for key, value in constraint_values(s.space.constraints, c.params, c.fwd_flops_per_token).items():
            trial.set_constraint(key, value)  # the samplers learn the caps from these
        over = over_caps(s.space.constraints, c.params, c.fwd_flops_per_token)
        if over:  # never trained; told so that the sampler learns (nas.search.space.candidate)
            why = "over cap: " + "; ".join(over)
            objective = s.spec.search.objective
            return tell_infeasible(study, trial, why, c.fwd_flops_per_token, objective, c.state_bytes)
        reused = self.twins.reuse(study, trial, arch.arch_id, s.hurdles)  # measured (or stopped) before
        if reused is not None:
            return reused
        if any(r.arch_id == arch.arch_id for r in self.running.values()):
            # Being trained right now: its result will very likely serve this trial too (the same seed
            # and data give the same losses), so wait for it instead of training it twice at once.
            self.waiting[trial.number] = Waiting(trial, arch, c)
            return None
        self._submit(study, trial, arch, c, pool)
        return None

    def _submit(self, study: optuna.Study, trial: Trial, arch: ArchConfig, c: Compute, pool: Pool) -> None:
        s = self.s
        payload = trial_payload(s, study, trial, arch)
        pool.submit(trial.number, payload.to_dict())
        self.running[trial.number] = Running(trial, payload, arch.arch_id, time.monotonic())
        screen = screen_flops(s.spec.search.prescreen, arch) if s.spec.search.prescreen else 0.0
        planned = planned_flops(s.spec.budget, c, s.spec.recipe.batch_size * c.seq_len, s.spec.recipe)
        self.allowance.reserve(trial.number, planned + screen, screen=screen)

    def _pending(self) -> tuple[list[float], list[tuple[float, float]]]:
        """What is left (for the time left): every trial of a search is one unit of work."""
        now = time.monotonic()
        running = [(r.work, now - r.started) for r in self.running.values()]
        left = 0 if self.trials is None else max(0, self.trials - self.done - len(running))
        return [1.0] * left, running

    def _in_flight(self) -> int:
        return len(self.running) + len(self.waiting)

    def _release_waiting(self, study: optuna.Study, pool: Pool, arch_id: str, report: Reporter) -> None:
        """The trials waiting for ``arch_id``'s result, now that it is in: reused, or the first one trains."""
        for number in [n for n, w in self.waiting.items() if w.arch.arch_id == arch_id]:
            w = self.waiting.pop(number)
            ended = self.twins.reuse(study, w.trial, arch_id, self.s.hurdles)
            if ended is None and any(r.arch_id == arch_id for r in self.running.values()):
                self.waiting[number] = w  # another waiting twin of it was just sent to train: wait for that
            elif ended is None:  # no result to reuse (it failed, or its stop no longer holds): train it
                self._submit(study, w.trial, w.arch, w.cost, pool)  # on the worker the twin just freed
            else:
                self.done += 1
                self.allowance.settle_untrained()
                report.finished(self.done, self._in_flight(), number, *ended, 0.0, self.s.workers)

    def _finish_now(
        self, study: optuna.Study, trial: Trial, state: TrialState, reason: str
    ) -> tuple[str, str]:
        return finish_now(study, trial, state, reason)

    # -- results --------------------------------------------------------------------------
    def _collect(self, study: optuna.Study, fin: Finished, report: Reporter, pool: Pool) -> None:
        """Record what the pool says of one trial: a result to tell, or a lost worker to retry or fail."""
        self._confirm_lease()  # a driver whose lease was taken over must not tell
        r = self.running[fin.tag]
        if fin.result is None:
            r.errors.append(str(fin.error))
            r.trial.set_user_attr("worker_errors", r.errors[-10:])
            if fin.retry and r.attempts <= self.s.spec.resources.retries:
                r.attempts += 1
                r.trial.set_user_attr("attempts", r.attempts)
                report.line(f"trial {fin.tag}: {fin.error}; retrying (attempt {r.attempts})")
                self.retry.append(fin.tag)
                return
            why = f"{fin.error} ({r.attempts} attempts)" if fin.retry else str(fin.error)
            state, text, loss = self._fail(study, r, why)
        elif self._out_of_memory_while_sharing(r, fin.result):
            r.alone = True
            r.trial.set_user_attr("retried_alone", True)
            report.line(f"trial {fin.tag}: out of memory on a shared GPU; retrying it alone on a whole GPU")
            self.retry.append(fin.tag)
            return
        else:
            admitted = self._keep_weights(study, r, fin, report)  # before the tell: recorded on the trial
            state, text, loss = self._tell(study, r, fin.result)
            if admitted is not None:
                self.kept.settle(admitted, state == "COMPLETE", report.line)
        del self.running[fin.tag]
        # one read of the trial's attributes, only when the compute is counted
        self.allowance.settle(fin.tag, r.trial.user_attrs if self.s.spec.search.max_flops is not None else {})
        self.done += 1
        report.finished(
            self.done,
            self._in_flight(),
            fin.tag,
            state,
            text,
            time.monotonic() - r.started,
            self.s.workers,
            loss,
            r.work,
        )
        self._release_waiting(study, pool, r.arch_id, report)

    def _keep_weights(
        self, study: optuna.Study, r: Running, fin: Finished, report: Reporter
    ) -> Admission | None:
        """Keep the trial's weights when it is among the best K (nas.search.driver.weights); a file that
        cannot be written stops the search once the trial is told (``self.stop``)."""
        if not self.kept.active or fin.weights is None or fin.result is None or self.stop is not None:
            return None
        values = objective_values(fin.result, self.s.spec.search.objective)
        if values is None:
            return None
        try:
            return self.kept.offer(study, r.trial, values, fin.weights, report.line)
        except UserError as err:
            self.stop = UserError(
                f"{err}; trial {r.trial.number} is recorded without its weights; free some space (or "
                "fix the directory) and run the same command again to continue"
            )
            return None

    def _out_of_memory_while_sharing(self, r: Running, result: dict[str, Any]) -> bool:
        """A trial that ran out of GPU memory beside others gets one more try with its GPU alone."""
        shared = 0 < self.s.spec.resources.gpus_per_trial < 1
        oom = result.get("status") == "failed" and result.get("reason") == OUT_OF_MEMORY
        return shared and oom and not r.alone

    def _fail(self, study: optuna.Study, r: Running, reason: str) -> tuple[str, str, None]:
        return fail(study, r.trial, reason)

    def _tell(self, study: optuna.Study, r: Running, result: dict[str, Any]) -> tuple[str, str, float | None]:
        objective = self.s.spec.search.objective
        measure = measure_of("lm" if self.CONFIRMATION else self.s.spec.search.evaluator)
        state, text, loss, frozen = tell_result(study, r.trial, result, objective, METRIC_KEYS, measure)
        if frozen is not None:
            self.twins.add_complete(r.arch_id, frozen)
        elif state == "PRUNED":
            self.twins.add_stopped(r.arch_id, r.trial.number, r.trial.user_attrs)
        return state, text, loss
