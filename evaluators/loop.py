"""The training loop: steps until the budget is spent or the callback says stop.

It syncs with the device only at report points (every ``recipe.log_every``
steps, the ``eval_at`` fractions and the end); a non-finite loss is caught
there (it cannot recover in between: NaN weights stay NaN) and raises
:class:`~evaluators.base.Diverged`.  Any exception that ends the loop carries
what was trained until then (:class:`~evaluators.base.Spent`): a failed
candidate's compute counts too.  With a compiled model the first step
compiles the graph: its time is set aside as compile time, and an exception in
it (other than running out of memory) raises :class:`CompileFailed`.

A wsd run with rungs (:class:`~evaluators.budget.Rung`) branches each rung's
cooldown off at its start step: everything the loop's steps depend on (weights,
buffers, optimizer state, the batch generator, torch's RNG) is snapshotted (in host
memory, pinned on CUDA: the GPU holds no second copy of the weights and moments), the
cooldown steps are trained on the batches the run would draw next, the branch is
evaluated, and the snapshot is restored in place, so the run goes on exactly as
without the rung.  The branch is off the training clock; its steps count as spent.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from typing import Any

import torch
from torch import Tensor

from evaluators.base import Diverged, Progress, ProgressCallback, Spent
from evaluators.budget import BudgetClock, ReportPoint, Rung, TrainingPlan, cooldown_lr, lr_at, lr_for_step
from evaluators.device import sync
from evaluators.evaluation import Validation
from evaluators.model import CompileFailed, Prepared, describe_compile_error
from evaluators.step import TrainStep
from evaluators.trainlog import TrainLog
from nas.data import train_batch
from nas.interrupts import raise_lost_stop
from nas.plural import plural
from nas.spec.training import TrainRecipe


@dataclasses.dataclass
class Outcome:
    """How a training run ended."""

    steps: int
    train_loss: float
    val_loss: float
    intermediate: dict[float, float]
    stopped_at: float | None  # fraction of the budget where the callback stopped it
    train_seconds: float
    tokens_per_s: float  # over the steps on the training clock (not the compiling one)
    compile_seconds: float | None  # None: not compiled
    rungs: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # one per rung, in order
    rung_steps: int = 0  # cooldown steps trained in the rungs' branches (spent beyond ``steps``)


def run_loop(
    prep: Prepared,
    plan: TrainingPlan,
    recipe: TrainRecipe,
    corpus: Any,
    validation: Validation,
    log: TrainLog,
    callback: ProgressCallback | None,
) -> Outcome:
    """Train ``prep`` for ``plan`` on the corpus's training batches (see the module docstring)."""
    return _Loop(prep, plan, recipe, corpus, validation, log, callback).run()


class _Loop:
    def __init__(
        self,
        prep: Prepared,
        plan: TrainingPlan,
        recipe: TrainRecipe,
        corpus: Any,
        validation: Validation,
        log: TrainLog,
        callback: ProgressCallback | None,
    ) -> None:
        self.prep, self.plan, self.recipe, self.corpus = prep, plan, recipe, corpus
        self.validation, self.log, self.callback = validation, log, callback
        self.device = prep.step.device
        self.clock = BudgetClock(plan, recipe.log_every, lambda: sync(self.device))
        self.loss_sum = torch.zeros((), device=self.device)
        self.n_window, self.window_t0, self.window_steps = 0, 0.0, 0
        self.steps_aside = 0  # the compiling first step: off the training clock and the throughput
        self.compile_seconds = prep.compile_seconds if prep.compiled else None
        self.intermediate: dict[float, float] = {}
        self.steps = 0  # optimizer steps finished
        self.branch_at: dict[int, list[Rung]] = {}
        for rung in plan.rungs:
            self.branch_at.setdefault(rung.start, []).append(rung)
        self.rungs: list[dict[str, Any]] = []
        self.rung_loss: dict[int, float] = {}  # a rung's step -> its cooled-down validation loss
        self.rung_steps = 0

    def run(self) -> Outcome:
        try:
            return self._train()
        except Exception as err:  # re-raised as it is (its type says why); it only gains what was spent
            tokens = (self.steps + self.rung_steps) * self.plan.tokens_per_step
            Spent(self.steps, tokens, tokens * self.plan.cost.train_flops_per_token).attach_to(err)
            raise

    def _train(self) -> Outcome:
        stepper, B, T = self.prep.step, self.plan.batch_size, self.plan.seq_len
        batches = torch.Generator().manual_seed(self.recipe.seed)
        step = 0
        total = self.plan.total_steps
        while True:
            raise_lost_stop()  # a Ctrl-C or SIGTERM the garbage collector swallowed (nas.interrupts)
            for rung in self.branch_at.get(step, ()):
                self._branch(rung, batches)
            lr = (
                lr_at(self.recipe, self.clock.next_fraction(step))
                if total is None
                else lr_for_step(self.recipe, step, total)
            )
            stepper.set_lr(lr)
            x, y = train_batch(self.corpus, B, T, batches)
            self.loss_sum += self._step(
                x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            )
            self.n_window += 1
            step = self.steps = step + 1
            point = self.clock.after(step)
            if point is None:
                continue
            self.clock.pause()  # a report point: the clock stops, the loss is read back
            train_loss, val_loss, stop = self._report(point, step, lr)
            if point.last or stop:
                break
            self.clock.resume()
        if val_loss is None:  # stopped between evaluation points
            val_loss = self.validation.loss(self.prep.model, step)
        seconds = self.clock.train_seconds
        tokens = (step - self.steps_aside) * B * T
        return Outcome(
            step,
            train_loss,
            val_loss,
            self.intermediate,
            None if point.last else point.fraction,
            seconds,
            tokens / seconds if seconds > 0 else 0.0,
            self.compile_seconds,
            self.rungs,
            self.rung_steps,
        )

    def _branch(self, rung: Rung, batches: torch.Generator) -> None:
        """Train ``rung``'s cooldown from here, evaluate it, and put everything back as it was."""
        self.clock.pause()
        t0 = time.perf_counter()
        stepper, B, T = self.prep.step, self.plan.batch_size, self.plan.seq_len
        snapshot = _Snapshot(stepper, batches)
        for k in range(1, rung.cooldown + 1):  # the steps an independent rung.steps-step run ends with
            stepper.set_lr(cooldown_lr(self.recipe, k / rung.cooldown))
            x, y = train_batch(self.corpus, B, T, batches)
            stepper(x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True))
            self.rung_steps += 1
        val_loss = self.validation.loss(self.prep.model, rung.steps)
        snapshot.restore()
        tokens = rung.steps * self.plan.tokens_per_step
        per_token = self.plan.cost.train_flops_per_token
        self.rung_loss[rung.steps] = val_loss
        self.rungs.append(
            {
                "fraction": rung.fraction,
                "steps": rung.steps,
                "tokens": tokens,
                "flops": tokens * per_token,  # what an independent run to this rung costs
                "val_loss": val_loss,
                "cooldown_steps": rung.cooldown,
                "cooldown_flops": rung.cooldown * self.plan.tokens_per_step * per_token,  # spent here
                "seconds": time.perf_counter() - t0,
            }
        )
        self.log.say(
            f"rung {rung.fraction:g}: {plural(rung.steps, 'step')} (cooldown of {rung.cooldown} from step "
            f"{rung.start}), val_loss {val_loss:.4f}"
        )
        self.clock.resume()

    def _step(self, x: Tensor, y: Tensor) -> Tensor:
        if not self.prep.compiled or self.steps_aside:
            return self.prep.step(x, y)
        try:
            loss = self.prep.step(x, y)
        except torch.OutOfMemoryError:
            raise  # too big to train, compiled or not
        except Exception as err:  # noqa: BLE001 - whatever the compiler raises, training goes on eager
            raise CompileFailed(describe_compile_error(err)) from err
        self.compile_seconds = (self.compile_seconds or 0.0) + self.clock.set_aside()
        self.steps_aside = self.window_steps = 1
        return loss

    def _report(self, point: ReportPoint, step: int, lr: float) -> tuple[float, float | None, bool]:
        """Read the window's loss back, evaluate if due, log, and ask the callback; True: stop."""
        train_seconds = self.clock.train_seconds
        train_loss = float((self.loss_sum / self.n_window).item())
        if not math.isfinite(train_loss):
            raise Diverged(f"training loss is {train_loss} at step {step} (lr {lr:.3g})")
        tokens_per_step = self.plan.tokens_per_step
        window_tps = (step - self.window_steps) * tokens_per_step / max(train_seconds - self.window_t0, 1e-9)
        self.loss_sum.zero_()
        self.n_window, self.window_t0, self.window_steps = 0, train_seconds, step
        val_loss: float | None = None
        if point.due or point.last:
            if point.due and step in self.rung_loss:  # a hurdle at a rung compares the cooled-down loss
                val_loss = self.rung_loss[step]
            else:
                val_loss = self.validation.loss(self.prep.model, step)
            for f in point.due:
                self.intermediate[f] = val_loss
        tokens = step * tokens_per_step
        progress = Progress(
            step=step,
            fraction=point.fraction,
            tokens=tokens,
            flops=tokens * self.plan.cost.train_flops_per_token,
            seconds=train_seconds,
            train_loss=train_loss,
            lr=lr,
            val_loss=val_loss,
            due=point.due,
        )
        self.log.progress(progress, self.plan.total_steps, window_tps)
        stop = bool(self.callback(progress)) if self.callback is not None else False
        return train_loss, val_loss, stop


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in host memory: a GPU tensor's in pinned memory (a fast copy each way), so a
    rung's snapshot adds nothing to the GPU's memory (about 3x the parameters' with AdamW's moments)."""
    if not t.is_cuda:
        return t.detach().clone()
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t.detach())  # synchronous: the copy is complete before training changes ``t``
    return host


@dataclasses.dataclass(frozen=True)
class _Saved:
    """An optimizer-state tensor's host copy and the device it belongs on."""

    host: torch.Tensor
    device: torch.device


class _Snapshot:
    """What a training step reads and changes, copied to host memory, to be put back in place
    (:meth:`restore`)."""

    def __init__(self, stepper: TrainStep, batches: torch.Generator) -> None:
        model, opt = stepper.model, stepper.optimizer
        self.optimizer, self.batches = opt, batches
        self.tensors = [(t, _to_host(t)) for t in itertools.chain(model.parameters(), model.buffers())]
        self.state = {
            p: {k: _Saved(_to_host(v), v.device) if torch.is_tensor(v) else v for k, v in st.items()}
            for p, st in opt.state.items()
        }
        self.groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
        self.batch_state = batches.get_state()
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def restore(self) -> None:
        with torch.no_grad():
            for t, saved in self.tensors:
                t.copy_(saved)
        state = self.optimizer.state
        for p in [p for p in state if p not in self.state]:  # state the branch created
            del state[p]
        for p, saved in self.state.items():
            now = state[p]
            for k, v in saved.items():
                if not isinstance(v, _Saved):
                    now[k] = v
                elif torch.is_tensor(now.get(k)):
                    now[k].copy_(v.host)
                else:
                    now[k] = v.host.to(v.device, copy=True)  # back on the device it was on
        for group, saved in zip(self.optimizer.param_groups, self.groups, strict=True):
            group.update(saved)
        self.batches.set_state(self.batch_state)
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
