"""The probes evaluator: trains the candidate once per task and scores the mean (``ProbeEvaluator``)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from evaluators.base import Diverged, Progress, ProgressCallback, Spent, check_eval_at
from evaluators.device import device_name, setup_device
from evaluators.probes.base import IGNORE
from evaluators.probes.plateau import above_plateau
from evaluators.probes.tasks import TASKS, Task, input_len, make_dataset, parse_tasks, probe_arch
from evaluators.result import Result
from evaluators.step import TrainStep, autocast_for, compute_dtype
from nas.errors import ConfigError
from nas.interrupts import raise_lost_stop
from nas.models import ArchConfig
from nas.models.cost import compute
from nas.plural import plural
from nas.spec.training import Budget, TrainRecipe

#: optimizer steps per task at most: 250 take about a minute per task on one CPU thread, so this is days
MAX_STEPS = 10**6
#: optimizer steps per task by default (about a minute per task for vanilla.yaml on one CPU thread)
DEFAULT_STEPS = 250
DEFAULT_BATCH = 32
DEFAULT_LR = 1e-3


def lr_at(step: int, steps: int, lr: float) -> float:
    """Linear warmup over the first 5% of the steps, then constant."""
    warm = max(1, steps // 20)
    return lr * min(1.0, (step + 1) / warm)


@torch.no_grad()
def accuracy(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device, batch: int = 128
) -> float:
    """Correct scored positions / scored positions (targets != IGNORE), argmax over the whole vocabulary."""
    was_training = model.training
    model.eval()
    correct = total = 0
    for i in range(0, x.size(0), batch):
        xb, yb = x[i : i + batch].to(device), y[i : i + batch].to(device)
        with autocast_for(device):
            pred = model(xb).argmax(-1)
        mask = yb != IGNORE
        correct += int((pred[mask] == yb[mask]).sum())
        total += int(mask.sum())
    model.train(was_training)
    return correct / max(total, 1)


@dataclasses.dataclass
class TaskRun:
    """What training one probe model did."""

    accuracy: float
    steps: int
    tokens: int
    train_flops: float
    train_seconds: float
    score: float = 0.0  # what the task adds to the probe score: the accuracy, or how far above its plateau
    plateau: float | None = None  # the task's no-capability rule's accuracy on the same test set


class ProbeEvaluator:
    """Trains the candidate once per probe task; scores the mean test accuracy (val_loss = 1 - score)."""

    def __init__(
        self,
        tasks: str | Sequence[str] | None = None,
        *,
        steps: int = DEFAULT_STEPS,
        batch_size: int = DEFAULT_BATCH,
        lr: float = DEFAULT_LR,
        seed: int = 0,
        device: str = "auto",
        threads: int | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.tasks = parse_tasks(tasks)
        for name, value in (("steps", steps), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"must be a positive integer, got {value!r}", name)
        if steps > MAX_STEPS:
            raise ConfigError(f"must be at most {MAX_STEPS:,} (days per task on a CPU), got {steps}", "steps")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"must be an integer >= 0, got {seed!r}", "seed")
        self.steps, self.batch_size, self.lr, self.seed = steps, batch_size, float(lr), seed
        self.device, self.threads, self.log = device, threads, log
        self.recipe = TrainRecipe(batch_size=batch_size, lr=self.lr, weight_decay=0.0, seed=seed)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ProbeEvaluator:
        """``tasks`` (the registry name's argument), ``probe_steps``, ``probe_seed``, ``device``, ``threads``.

        The search's ``recipe`` and budget are not used: the probes' protocol is fixed so that
        scores compare across trials and studies.
        """
        return cls(
            settings.get("tasks"),
            steps=settings.get("probe_steps") or DEFAULT_STEPS,
            seed=settings.get("probe_seed") or 0,
            device=settings.get("device") or "auto",
            threads=settings.get("threads"),
        )

    def planned_flops(self, arch: ArchConfig) -> float:
        """The training FLOPs this protocol spends on ``arch`` (all tasks, every step), known before it
        runs: what a search reserves for it under ``--max-flops``."""
        total = 0.0
        for name in self.tasks:
            task = TASKS[name]
            length = input_len(name, self.seed)
            per_token = task.train_flops_per_token(probe_arch(arch, task), length)
            total += self.steps * self.batch_size * length * per_token
        return total

    def evaluate(
        self,
        arch: ArchConfig,
        budget: Budget | None = None,
        callback: ProgressCallback | None = None,
        *,
        eval_at: Sequence[float] = (),
        logdir: str | None = None,
        log_hparams: Mapping[str, Any] | None = None,
    ) -> Result:
        """``budget``, ``logdir`` and ``log_hparams`` are ignored.

        The tasks train one after the other; the budget fraction is the share of all their steps.
        At each ``eval_at`` fraction the callback gets ``val_loss = 1 - (sum of the accuracies of
        the finished tasks and of the current one as it stands) / number of tasks``: tasks not yet
        started count 0 (so it falls as the run goes on), and every trial reports it at the same
        point.  Returning True stops there (``stopped_early``, and that
        value is the result's val_loss).
        """
        t0 = time.perf_counter()
        probes = [(TASKS[n], probe_arch(arch, TASKS[n])) for n in self.tasks]  # refused before any training
        dev = setup_device(self.device, self.threads)
        total = self.steps * len(probes)
        marks = {f: max(1, round(f * total)) for f in check_eval_at(eval_at)}  # fraction -> global step
        runs: dict[str, TaskRun] = {}
        intermediate: dict[float, float] = {}
        stopped_at: float | None = None
        loss = 1.0
        for task, parch in probes:
            run, stopped_at, loss = self._train(task, parch, dev, total, marks, runs, intermediate, callback)
            runs[task.name] = run
            if self.log is not None:
                above = (
                    ""
                    if run.plateau is None
                    else (
                        f", no-recall rule {run.plateau:.3f}: "
                        + ("not above it, scored 0" if run.score == 0 else f"scored {run.score:.3f} above it")
                    )
                )
                self.log(
                    f"{task.name}: accuracy {run.accuracy:.3f}{above} ({plural(run.steps, 'step')}, "
                    f"{run.train_seconds:.1f} s)"
                )
            if stopped_at is not None:
                break
        score = sum(r.score for r in runs.values()) / len(probes)
        if stopped_at is None:
            loss = 1.0 - score
        steps = sum(r.steps for r in runs.values())
        tokens = sum(r.tokens for r in runs.values())
        train_seconds = sum(r.train_seconds for r in runs.values())
        extra: dict[str, Any] = {
            "probe_score": score,
            "probe_steps": self.steps,
            "probe_tasks": ",".join(self.tasks),
        }
        for name, run in runs.items():
            extra[f"probe_{name}"] = run.score
            if run.plateau is not None:
                extra.update({f"probe_{name}_accuracy": run.accuracy, f"probe_{name}_plateau": run.plateau})
        return Result.measured(
            arch,
            compute(arch),
            loss,
            bytes_per_token=None,
            train_flops=sum(r.train_flops for r in runs.values()),
            tokens=tokens,
            steps=steps,
            tokens_per_s=tokens / train_seconds if train_seconds > 0 else 0.0,
            seconds=time.perf_counter() - t0,
            device=dev.type,
            threads=torch.get_num_threads(),
            device_name=device_name(dev),
            dtype=compute_dtype(dev),
            train_seconds=train_seconds,
            seed=self.seed,
            intermediate=intermediate,
            stopped_early=stopped_at is not None,
            stopped_at=stopped_at,
            extra=extra,
        )

    def _train(
        self,
        task: Task,
        parch: ArchConfig,
        dev: torch.device,
        total: int,
        marks: Mapping[float, int],
        runs: Mapping[str, TaskRun],
        intermediate: dict[float, float],
        callback: ProgressCallback | None,
    ) -> tuple[TaskRun, float | None, float]:
        """Train one probe model: its run, the fraction where the callback stopped it, the val_loss."""
        x, y = make_dataset(task, task.n_train, True, self.seed)
        x_test, y_test = make_dataset(task, task.n_test, False, self.seed)
        torch.manual_seed(self.seed)
        model = task.model(parch).to(dev)
        model.train()
        step_fn = TrainStep(model, self.recipe, dev)
        order = torch.Generator().manual_seed(self.seed)
        perm, at = torch.randperm(x.size(0), generator=order), 0
        tokens_per_step = self.batch_size * x.size(1)
        per_token = task.train_flops_per_token(parch, x.size(1))
        done = sum(r.steps for r in runs.values())
        n_tasks = total // self.steps
        seconds, loss = 0.0, 1.0
        plateau = (
            None
            if task.plateau is None
            else task.plateau(x_test, y_test, vocab=task.vocab_size, **task.options)
        )
        n_scored = int((y_test != IGNORE).sum())

        def score(acc: float) -> float:
            return acc if plateau is None else above_plateau(acc, plateau, n_scored)

        def run(steps: int, acc: float) -> TaskRun:
            tokens = steps * tokens_per_step
            return TaskRun(acc, steps, tokens, tokens * per_token, seconds, score(acc), plateau)

        for step in range(1, self.steps + 1):
            raise_lost_stop()  # a Ctrl-C or SIGTERM the garbage collector swallowed (nas.interrupts)
            if at + self.batch_size > perm.numel():  # a new epoch, reshuffled
                perm, at = torch.randperm(x.size(0), generator=order), 0
            idx = perm[at : at + self.batch_size]
            at += self.batch_size
            t = time.perf_counter()
            lr = lr_at(step - 1, self.steps, self.lr)
            step_fn.set_lr(lr)
            train_loss = step_fn(x[idx].to(dev), y[idx].to(dev))
            seconds += time.perf_counter() - t
            due = sorted(f for f, g in marks.items() if g == done + step and f not in intermediate)
            if step == self.steps or due:
                value = float(train_loss)
                if not math.isfinite(value):
                    err = Diverged(f"{task.name}: training loss {value} at step {step}")
                    before = run(step, 0.0)  # this task's steps so far, plus the finished tasks'
                    Spent(
                        done + step,
                        sum(r.tokens for r in runs.values()) + before.tokens,
                        sum(r.train_flops for r in runs.values()) + before.train_flops,
                    ).attach_to(err)
                    raise err
            if not due:
                continue
            acc = accuracy(model, x_test, y_test, dev)
            loss = 1.0 - (sum(r.score for r in runs.values()) + score(acc)) / n_tasks
            for f in due:
                intermediate[f] = loss
                progress = Progress(
                    step=done + step,
                    fraction=f,
                    tokens=(done + step) * tokens_per_step,
                    flops=0.0,
                    seconds=seconds,
                    train_loss=value,
                    lr=lr,
                    val_loss=loss,
                )
                if callback is not None and callback(progress) and f < 1.0:
                    return run(step, acc), f, loss
        return run(self.steps, accuracy(model, x_test, y_test, dev)), None, loss
