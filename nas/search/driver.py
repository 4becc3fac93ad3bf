"""The search driver: Optuna ask-and-tell on one side, a pool of workers on the other.

Only the driver writes the study.  It asks a trial, turns it into an
ArchConfig through the search space, refuses candidates over the caps, reuses
the result of an identical architecture already measured, sends the plain
payload to a worker, and tells the outcome: COMPLETE with the objective
values, PRUNED when a hurdle stopped it, FAIL with a reason otherwise.  A
worker that dies costs its trial a retry, not the search; what is guaranteed
after worker, node and driver failures is in docs/reliability.md.

Order of a run: every flag and file is checked (by the CLI), then an existing
study's settings, then the worker pool is started (a bad ``--address`` fails
here), and only then is a new study created on disk, so a mistake leaves
nothing behind.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import optuna
from optuna.trial import Trial, TrialState

from evaluators import METRICS, RUN_FIELDS, Budget, TrainRecipe
from nas.compute import compute
from nas.errors import ConfigError, UserError
from nas.execution.pool import NoWorkersLeft
from nas.search.hurdles import INTERMEDIATE, Hurdles
from nas.search.samplers import make_sampler
from nas.search.space import SearchSpace
from nas.search.study import (
    OBJECTIVES,
    check_settings,
    check_storage_url,
    count_done,
    open_storage,
    recover_stale,
    requeue,
    storage_exists,
    study_exists,
)

#: metrics copied onto each trial's user attributes
METRIC_KEYS = (*METRICS, *RUN_FIELDS)


@dataclasses.dataclass
class SearchSettings:
    """Everything a search run needs; the CLI fills it from flags and the space file."""

    study: str
    storage: str
    space: SearchSpace
    trials: int
    budget: Budget
    recipe: TrainRecipe
    objective: str = "loss+flops"
    sampler: str = "nsga2"
    population: int | None = None
    seed: int = 0
    hurdles: Hurdles = dataclasses.field(default_factory=Hurdles)
    workers: int = 1
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    address: str | None = None
    device: str = "auto"
    data: str | None = None
    tb_dir: str | None = None
    retries: int = 2
    #: seconds a Ray worker may take to start or restart before the search goes on without it
    worker_timeout: float = 300.0
    trial_timeout: float | None = None  # seconds a trial may run before its worker is killed
    #: run trials one at a time in the driver's process, without Ray (``--local``)
    local: bool = False
    dashboard: bool = False
    #: "lm" trains; "proxy:params" etc. scores without training; "sleep:S" is for overhead benchmarks
    evaluator: str = "lm"
    #: train through torch.compile; not in the fingerprint: it changes speed, not what is measured
    compile: bool = False

    def fingerprint(self) -> dict[str, Any]:
        """What must match for a study to be continued."""
        return {
            "space_fingerprint": self.space.fingerprint,
            "space_file": self.space.source,
            "objective": self.objective,
            "budget": self.budget.to_dict(),
            "recipe": self.recipe.to_dict(),
            "data": self.data or "shakespeare",
            "seed": self.seed,
            "evaluator": self.evaluator,
        }


@dataclasses.dataclass
class _Running:
    trial: Trial
    payload: dict[str, Any]
    arch_id: str
    started: float
    attempts: int = 1
    errors: list[str] = dataclasses.field(default_factory=list)  # why earlier attempts had no result


class Reporter:
    """One line per finished trial and a closing summary; quiet enough for logs, clear for people."""

    def __init__(self, total: int, out: TextIO | None = None) -> None:
        self.total = total
        self.out = out or sys.stdout
        self.started = time.monotonic()
        self.durations: list[float] = []
        self.counts = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0}
        self.best: float | None = None

    def line(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def finished(self, done: int, running: int, number: int, state: str, text: str, seconds: float,
                 workers: int, loss: float | None = None) -> None:
        self.counts[state] = self.counts.get(state, 0) + 1
        self.durations.append(seconds)
        if loss is not None and math.isfinite(loss) and (self.best is None or loss < self.best):
            self.best = loss
        left = max(0, self.total - done)
        eta = ""
        if left and self.durations:
            per = sum(self.durations) / len(self.durations)
            eta = f", ~{_fmt_time(per * left / max(1, workers))} left"
        best = f"best {self.best:.4f}" if self.best is not None else "best -"
        self.line(
            f"[{done:>3}/{self.total}] trial {number:<4} {state:<8} {text}  | {best}, "
            f"{self.counts['COMPLETE']} done {self.counts['PRUNED']} pruned {self.counts['FAIL']} failed, "
            f"{running} running, {_fmt_time(time.monotonic() - self.started)} elapsed{eta}"
        )


def _fmt_time(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def load_existing_study(settings: SearchSettings) -> optuna.Study | None:
    """The study ``settings`` names if it exists (None otherwise), after checking it may be continued.

    Reads only: a missing SQLite file is not created, and a study run under other
    settings is refused before anything is written to it.
    """
    if settings.objective not in OBJECTIVES:
        raise UserError(f"--objective {settings.objective!r}; valid: {', '.join(OBJECTIVES)}")
    check_storage_url(settings.storage)
    if not storage_exists(settings.storage):
        return None
    storage = open_storage(settings.storage, create_dirs=False)
    if not study_exists(storage, settings.study):
        return None
    sampler = make_sampler(settings.sampler, settings.population, settings.seed, settings.trials)
    study = optuna.load_study(study_name=settings.study, storage=storage, sampler=sampler)
    if len(study.directions) != len(OBJECTIVES[settings.objective]):
        raise UserError(
            f"--study {settings.study!r} has {len(study.directions)} objective(s); "
            f"--objective {settings.objective} needs {len(OBJECTIVES[settings.objective])}"
        )
    check_settings(study, settings.fingerprint())
    return study


def create_new_study(settings: SearchSettings) -> optuna.Study:
    """Create the study (and its SQLite file and directory) and record the settings it must keep."""
    storage = open_storage(settings.storage)
    sampler = make_sampler(settings.sampler, settings.population, settings.seed, settings.trials)
    study = optuna.create_study(
        study_name=settings.study,
        storage=storage,
        directions=list(OBJECTIVES[settings.objective]),
        sampler=sampler,
    )
    study.set_user_attr("settings", settings.fingerprint())
    return study


def create_or_load_study(settings: SearchSettings) -> tuple[optuna.Study, bool]:
    """The study for ``settings`` and whether it was created now; refuses one created under other settings."""
    study = load_existing_study(settings)
    if study is not None:
        return study, False
    return create_new_study(settings), True


def enqueue_seed_archs(study: optuna.Study, space: SearchSpace) -> list[str]:
    """Put the known architectures the space contains at the front of the queue."""
    queued = []
    for name in space.seed_archs:
        params = space.seed_params(name)
        if params is not None:
            study.enqueue_trial(params, user_attrs={"seed_arch": name})
            queued.append(name)
    return queued


class Driver:
    """Runs one search to ``settings.trials`` finished trials on a worker pool."""

    def __init__(
        self,
        settings: SearchSettings,
        pool_factory: Callable[[SearchSettings], Any] | None = None,
        out: TextIO | None = None,
    ) -> None:
        self.s = settings
        self.pool_factory = pool_factory or _ray_pool
        self.out = out or sys.stdout

    def run(self) -> optuna.Study:
        s = self.s
        report = Reporter(s.trials, self.out)
        study = load_existing_study(s)
        if study is not None:
            requeued = recover_stale(study)
            if requeued:
                report.line(f"re-queued trial(s) {requeued} left running by a stopped driver")
            done = count_done(study)
            if done >= s.trials:
                report.line(f"study {s.study!r} already has {done} finished trials "
                            f"(--trials {s.trials}); nothing to do")
                return study
        pool = self.pool_factory(s)  # starts Ray; a bad --address is refused before a study is created
        try:
            if study is None:
                study = create_new_study(s)
                seeds = enqueue_seed_archs(study, s.space)
                if seeds:
                    report.line(f"seeded the first generation with: {', '.join(seeds)}")
            self.study = study
            self._search(study, pool, report)
        finally:
            pool.shutdown()
        return study

    def _search(self, study: optuna.Study, pool: Any, report: Reporter) -> None:
        s = self.s
        fast_sqlite_commits(study)
        done = count_done(study)
        self.known = self._known_archs(study)
        where = "in this process (--local)" if s.local else f"on {s.workers} worker(s)"
        report.line(
            f"study {s.study!r}: {done} finished, running {s.trials - done} more {where}; "
            f"budget {s.budget} per trial, objective {s.objective}, sampler {s.sampler}"
        )
        running: dict[int, _Running] = {}
        retry: list[int] = []  # trials whose worker died, waiting for a worker to run them again
        try:
            while True:
                while retry and pool.has_idle():
                    number = retry.pop(0)
                    pool.submit(number, running[number].payload)
                while not retry and pool.has_idle() and done + len(running) < s.trials:
                    launched = self._launch(study, pool, running)
                    if launched is not None:  # finished at once (refused, duplicate, invalid)
                        done += 1
                        state, text = launched
                        number = study.trials[-1].number
                        report.finished(done, len(running), number, state, text, 0.0, s.workers)
                if not running and done >= s.trials:
                    break
                try:
                    finished = pool.wait(timeout=1.0)
                except NoWorkersLeft as err:
                    n = len(running)
                    self._requeue_all(study, running, "no worker left to run it")
                    raise UserError(
                        f"{err}; {n} unfinished trial(s) re-queued, finished ones are kept: "
                        "run the same command again to continue"
                    ) from None
                for fin in finished:
                    r = running[fin.tag]
                    if fin.result is None:
                        r.errors.append(str(fin.error))
                        r.trial.set_user_attr("worker_errors", r.errors[-10:])
                        if fin.retry and r.attempts <= s.retries:
                            r.attempts += 1
                            r.trial.set_user_attr("attempts", r.attempts)
                            report.line(f"trial {fin.tag}: {fin.error}; retrying (attempt {r.attempts})")
                            retry.append(fin.tag)
                            continue
                        why = f"{fin.error} ({r.attempts} attempts)" if fin.retry else str(fin.error)
                        state, text, loss = self._fail(study, r, why)
                    else:
                        state, text, loss = self._tell(study, r, fin.result)
                    del running[fin.tag]
                    done += 1
                    report.finished(done, len(running), fin.tag, state, text,
                                    time.monotonic() - r.started, s.workers, loss)
        except BaseException as err:
            # Ctrl-C, SIGTERM, an error: leave nothing RUNNING; the unfinished trials' parameters
            # are queued and run first when the search is continued.
            self._requeue_all(study, running, f"driver stopped ({type(err).__name__})")
            raise

    @staticmethod
    def _requeue_all(study: optuna.Study, running: dict[int, _Running], reason: str) -> None:
        for number in list(running):
            try:
                requeue(study, running.pop(number).trial, reason)
            except Exception:  # noqa: BLE001 - the storage may be what failed; the next start recovers them
                return

    # -- launching ------------------------------------------------------------------------
    def _launch(self, study: optuna.Study, pool: Any, running: dict[int, _Running]) -> tuple[str, str] | None:
        trial = study.ask()
        try:
            return self._prepare(study, trial, pool, running)
        except BaseException:
            # Stopped between ask and submit: the trial is neither running nor told; re-queue it.
            if trial.number not in running:
                try:
                    if study._storage.get_trial(trial._trial_id).state == TrialState.RUNNING:
                        requeue(study, trial, "driver stopped while it was being launched")
                except Exception:  # noqa: BLE001 - the next start recovers it
                    pass
            raise

    def _prepare(self, study: optuna.Study, trial: Trial, pool: Any, running: dict[int, _Running]
                 ) -> tuple[str, str] | None:
        s = self.s
        try:
            arch = s.space.suggest(trial)
        except ConfigError as err:  # the space's own checks should make this rare
            return self._finish_now(study, trial, TrialState.FAIL, f"invalid architecture: {err}")
        c = compute(arch, s.recipe.seq_len)
        trial.set_user_attr("arch", arch.to_dict())
        trial.set_user_attr("arch_id", arch.arch_id)
        trial.set_user_attr("summary", arch.summary())
        trial.set_user_attr("params", c.params)
        trial.set_user_attr("flops_per_token", c.fwd_flops_per_token)
        over = []
        if c.params > s.space.constraints.get("max_params", math.inf):
            over.append(f"params {c.params:,} > max_params {s.space.constraints['max_params']:,.0f}")
        if c.fwd_flops_per_token > s.space.constraints.get("max_flops_per_token", math.inf):
            over.append(
                f"FLOPs/token {c.fwd_flops_per_token:,.0f} > max_flops_per_token "
                f"{s.space.constraints['max_flops_per_token']:,.0f}"
            )
        if over:
            return self._finish_now(study, trial, TrialState.FAIL, "over cap: " + "; ".join(over))
        twin = self.known.get(arch.arch_id)
        if twin is not None:
            return self._reuse(study, trial, twin)
        payload = {
            "arch": arch.to_dict(),
            "recipe": s.recipe.to_dict(),
            "budget": s.budget.to_dict(),
            "data": s.data,
            "device": s.device if s.device != "auto" else ("cuda" if s.gpus_per_trial > 0 else "cpu"),
            "hurdles": list(s.hurdles.fractions),
            "thresholds": s.hurdles.thresholds(study.get_trials(deepcopy=False)) if s.hurdles.fractions else {},
            "logdir": str(Path(s.tb_dir) / f"trial_{trial.number:05d}") if s.tb_dir else None,
            "hparams": _hparams(trial.params, arch.arch_id, trial.number),
            "evaluator": s.evaluator,
            "compile": s.compile,
        }
        pool.submit(trial.number, payload)
        running[trial.number] = _Running(trial, payload, arch.arch_id, time.monotonic())
        return None

    def _finish_now(self, study: optuna.Study, trial: Trial, state: TrialState, reason: str) -> tuple[str, str]:
        trial.set_user_attr("fail_reason", reason)
        study.tell(trial, state=state)
        return state.name, reason

    def _reuse(self, study: optuna.Study, trial: Trial, twin: optuna.trial.FrozenTrial) -> tuple[str, str]:
        for key in (*METRIC_KEYS, INTERMEDIATE):
            if key in twin.user_attrs:
                trial.set_user_attr(key, twin.user_attrs[key])
        trial.set_user_attr("duplicate_of", twin.number)
        study.tell(trial, twin.values)
        return "COMPLETE", f"same architecture as trial {twin.number}: loss {twin.values[0]:.4f} reused"

    def _known_archs(self, study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
        known = {}
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if "arch_id" in t.user_attrs:
                known.setdefault(t.user_attrs["arch_id"], t)
        return known

    # -- results --------------------------------------------------------------------------
    def _fail(
        self, study: optuna.Study, r: _Running, reason: str, tb: str | None = None, detail: str | None = None
    ) -> tuple[str, str, None]:
        r.trial.set_user_attr("fail_reason", reason)
        if tb:
            r.trial.set_user_attr("traceback", tb)
        if detail:
            r.trial.set_user_attr("fail_detail", str(detail)[:1000])
        study.tell(r.trial, state=TrialState.FAIL)
        return "FAIL", reason, None

    def _tell(self, study: optuna.Study, r: _Running, result: dict[str, Any]) -> tuple[str, str, float | None]:
        trial = r.trial
        inter = result.get("intermediate") or {}
        if inter:
            trial.set_user_attr(INTERMEDIATE, inter)
            if len(study.directions) == 1:
                for key, value in inter.items():
                    trial.report(value, step=int(round(float(key) * 1000)))
        for key in ("pid", "node"):
            if result.get(key) is not None:
                trial.set_user_attr(f"worker_{key}", result[key])
        if result.get("status") == "failed":
            reason = result.get("reason", "failed")
            return self._fail(study, r, reason, result.get("traceback"), result.get("detail"))
        metrics = result.get("metrics") or {}
        for key in METRIC_KEYS:
            if metrics.get(key) is not None:
                trial.set_user_attr(key, metrics[key])
        loss = metrics.get("val_loss")
        if loss is None or not math.isfinite(loss):  # the sampler must never see a NaN
            return self._fail(study, r, "diverged", detail=f"validation loss {loss}")
        flops = metrics.get("flops_per_token")
        if self.s.objective != "loss" and (flops is None or not math.isfinite(flops)):
            return self._fail(study, r, f"no finite FLOPs per token ({flops})")
        if result.get("status") == "pruned":
            # The hurdle it missed (the trainer's own stopped_at is the exact step fraction).
            at = float(max(inter, key=float)) if inter else metrics.get("stopped_at")
            trial.set_user_attr("pruned_at", at)
            study.tell(trial, state=TrialState.PRUNED)
            return "PRUNED", f"stopped at hurdle {at:g}: loss {_last(inter):.4f}", None
        values = [loss] if self.s.objective == "loss" else [loss, float(metrics["flops_per_token"])]
        frozen = study.tell(trial, values)
        self.known.setdefault(r.arch_id, frozen)
        summary = trial.user_attrs.get("summary", "")
        return "COMPLETE", f"loss {loss:.4f} ppl {math.exp(loss):.2f} {summary}", loss


def _last(inter: dict[str, float]) -> float:
    return inter[max(inter, key=float)] if inter else float("nan")


def _hparams(params: dict[str, Any], arch_id: str, number: int) -> dict[str, Any]:
    out: dict[str, Any] = {"trial": number, "arch_id": arch_id}
    for k, v in params.items():
        out[k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out


def fast_sqlite_commits(study: optuna.Study) -> None:
    """Put an SQLite study in WAL mode with ``synchronous=NORMAL``: commits stop waiting for the disk.

    Speed: the driver commits about 40 times per trial (one per sampled parameter and
    per user attribute: Optuna's storage API has no batch write), and with SQLite's
    default rollback journal every commit waits for an fsync: 0.7 ms on an idle disk
    here, 5 to 13 ms when other jobs use it, which made the driver's per-trial overhead
    0.09 to 0.2 s (benchmarks/orchestration.py).  In WAL mode with synchronous=NORMAL a
    commit is an append to the -wal file (0.02 ms) and the disk is synced at checkpoints.
    Batching the user attributes in one transaction (through Optuna's private RDB
    helpers) saved only 2 ms per trial more under WAL, so it is not done.

    Durability: a driver that crashes or is killed loses nothing (the data is in the
    operating system's cache); only a power loss or OS crash may roll back the last
    commits, never corrupting the file: a trial lost that way was never seen finished
    and is sampled again.  WAL also lets readers (dashboard, ``best``) read while the
    driver writes.  The mode stays with the file; other databases are left alone.
    """
    backend = getattr(study._storage, "_backend", study._storage)  # inside Optuna's cache layer
    engine = getattr(backend, "engine", None)
    if engine is None or engine.dialect.name != "sqlite" or engine.url.database in (None, "", ":memory:"):
        return
    from sqlalchemy import event

    def pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    if not event.contains(engine, "connect", pragmas):
        event.listen(engine, "connect", pragmas)
        engine.dispose()  # pooled connections were opened before; new ones get the pragmas


def _ray_pool(settings: SearchSettings) -> Any:
    if settings.local:
        from nas.execution.local_pool import LocalPool

        return LocalPool(threads=max(1, int(settings.cpus_per_trial)))
    from nas.execution.ray_pool import RayPool

    return RayPool(
        settings.workers,
        cpus_per_trial=settings.cpus_per_trial,
        gpus_per_trial=settings.gpus_per_trial,
        address=settings.address,
        dashboard=settings.dashboard,
        start_timeout=settings.worker_timeout,
        trial_timeout=settings.trial_timeout,
    )
