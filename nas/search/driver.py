"""The search driver: Optuna ask-and-tell on one side, a pool of workers on the other.

Only the driver writes the study.  It asks a trial, turns it into an
ArchConfig through the search space, refuses candidates over the caps, reuses
the result of an identical architecture already measured, sends the plain
payload to a worker, and tells the outcome: COMPLETE with the objective
values, PRUNED when a hurdle stopped it, FAIL with a reason otherwise.  A
worker that dies costs its trial a retry, not the search.
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

from evaluators import Budget, TrainRecipe
from nas.compute import compute
from nas.errors import ConfigError, UserError
from nas.search.hurdles import INTERMEDIATE, Hurdles
from nas.search.samplers import make_sampler
from nas.search.space import SearchSpace
from nas.search.study import (
    OBJECTIVES,
    check_settings,
    count_done,
    open_storage,
    recover_stale,
    study_exists,
)

#: metrics copied onto each trial's user attributes
METRIC_KEYS = (
    "val_loss", "val_ppl", "val_bpb", "params", "non_embedding_params", "flops_per_token",
    "train_flops_per_token", "train_flops", "tokens", "steps", "tokens_per_s", "seconds", "arch_id",
    "device", "threads",
)


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
    dashboard: bool = False
    #: "lm" trains; "proxy:params" etc. scores without training; "sleep:S" is for overhead benchmarks
    evaluator: str = "lm"

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


def create_or_load_study(settings: SearchSettings) -> tuple[optuna.Study, bool]:
    """The study for ``settings``; refuses to continue one created under other settings."""
    if settings.objective not in OBJECTIVES:
        raise UserError(f"--objective {settings.objective!r}; valid: {', '.join(OBJECTIVES)}")
    storage = open_storage(settings.storage)
    exists = study_exists(storage, settings.study)
    sampler = make_sampler(settings.sampler, settings.population, settings.seed, settings.trials)
    study = optuna.create_study(
        study_name=settings.study,
        storage=storage,
        directions=list(OBJECTIVES[settings.objective]),
        sampler=sampler,
        load_if_exists=True,
    )
    fp = settings.fingerprint()
    if exists:
        if len(study.directions) != len(OBJECTIVES[settings.objective]):
            raise UserError(
                f"--study {settings.study!r} has {len(study.directions)} objective(s); "
                f"--objective {settings.objective} needs {len(OBJECTIVES[settings.objective])}"
            )
        check_settings(study, fp)
    else:
        study.set_user_attr("settings", fp)
    return study, not exists


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
        study, created = create_or_load_study(s)
        self.study = study
        requeued = recover_stale(study)
        report = Reporter(s.trials, self.out)
        if requeued:
            report.line(f"re-queued trial(s) {requeued} left running by a stopped driver")
        if created:
            seeds = enqueue_seed_archs(study, s.space)
            if seeds:
                report.line(f"seeded the first generation with: {', '.join(seeds)}")
        done = count_done(study)
        if done >= s.trials:
            report.line(f"study {s.study!r} already has {done} finished trials (--trials {s.trials}); nothing to do")
            return study
        self.known = self._known_archs(study)
        report.line(
            f"study {s.study!r}: {done} finished, running {s.trials - done} more on {s.workers} worker(s); "
            f"budget {s.budget} per trial, objective {s.objective}, sampler {s.sampler}"
        )
        pool = self.pool_factory(s)
        running: dict[int, _Running] = {}
        try:
            while True:
                while pool.has_idle() and done + len(running) < s.trials:
                    launched = self._launch(study, pool, running)
                    if launched is not None:  # finished at once (refused, duplicate, invalid)
                        done += 1
                        state, text = launched
                        report.finished(done, len(running), study.trials[-1].number, state, text, 0.0, s.workers)
                if not running:
                    break
                for fin in pool.wait(timeout=1.0):
                    r = running[fin.tag]
                    if fin.result is None:
                        if r.attempts <= s.retries:
                            r.attempts += 1
                            report.line(f"trial {fin.tag}: {fin.error}; retrying (attempt {r.attempts})")
                            pool.submit(fin.tag, r.payload)
                            continue
                        state, text, loss = self._fail(study, r, f"{fin.error} ({r.attempts} attempts)")
                    else:
                        state, text, loss = self._tell(study, r, fin.result)
                    del running[fin.tag]
                    done += 1
                    report.finished(done, len(running), fin.tag, state, text,
                                    time.monotonic() - r.started, s.workers, loss)
        finally:
            pool.shutdown()
        return study

    # -- launching ------------------------------------------------------------------------
    def _launch(self, study: optuna.Study, pool: Any, running: dict[int, _Running]) -> tuple[str, str] | None:
        s = self.s
        trial = study.ask()
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
    def _fail(self, study: optuna.Study, r: _Running, reason: str, tb: str | None = None) -> tuple[str, str, None]:
        r.trial.set_user_attr("fail_reason", reason)
        if tb:
            r.trial.set_user_attr("traceback", tb)
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
            return self._fail(study, r, result.get("reason", "failed"), result.get("traceback"))
        metrics = result.get("metrics") or {}
        for key in METRIC_KEYS:
            if key in metrics:
                trial.set_user_attr(key, metrics[key])
        loss = metrics.get("val_loss")
        if loss is None or not math.isfinite(loss):
            return self._fail(study, r, "diverged")
        if result.get("status") == "pruned":
            at = metrics.get("stopped_at")
            trial.set_user_attr("pruned_at", at)
            study.tell(trial, state=TrialState.PRUNED)
            return "PRUNED", f"stopped at hurdle {at}: loss {_last(inter):.4f}", None
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


def _ray_pool(settings: SearchSettings) -> Any:
    from nas.execution.ray_pool import RayPool

    return RayPool(
        settings.workers,
        cpus_per_trial=settings.cpus_per_trial,
        gpus_per_trial=settings.gpus_per_trial,
        address=settings.address,
        dashboard=settings.dashboard,
    )
