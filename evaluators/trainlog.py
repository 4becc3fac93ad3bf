"""What a training run tells people: progress lines and TensorBoard scalars and HParams."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from evaluators.base import Progress
from evaluators.budget import TrainingPlan
from evaluators.result import Result
from nas.models import ArchConfig
from nas.plural import plural
from nas.spec.training import Budget, TrainRecipe


def stderr_log(line: str) -> None:
    """A ``log`` for :func:`evaluators.train_lm` that prints progress on stderr."""
    print(line, file=sys.stderr, flush=True)


class TrainLog:
    """Progress lines for ``say`` (none when None) and, with a ``logdir``, one TensorBoard run."""

    def __init__(self, say: Callable[[str], None] | None, logdir: str | os.PathLike[str] | None) -> None:
        self.say = say or (lambda _line: None)
        self.writer: Any = None
        if logdir is not None:
            from torch.utils.tensorboard import SummaryWriter  # slow import, only when asked

            Path(logdir).mkdir(parents=True, exist_ok=True)
            self.writer = SummaryWriter(log_dir=str(logdir))

    def start(self, arch: ArchConfig, plan: TrainingPlan, corpus_name: str, device: str) -> None:
        cost, steps = plan.cost, plan.total_steps
        self.say(
            f"training {arch.arch_id} ({cost.params:,} params, "
            f"{cost.train_flops_per_token:.3g} train FLOPs/token) on {corpus_name} for {plan.budget}"
            + (f" = {plural(steps, 'step')}" if steps is not None and plan.budget.kind != "steps" else "")
            + f", batch {plan.batch_size} x {plan.seq_len}, {device}"
        )

    def progress(self, p: Progress, total_steps: int | None, window_tokens_per_s: float) -> None:
        """One report point: a line, and the scalars when TensorBoard is on."""
        self.say(
            f"step {p.step}"
            + (f"/{total_steps}" if total_steps is not None else "")
            + f" ({p.fraction:.0%}) loss {p.train_loss:.4f} lr {p.lr:.2e}"
            + f" {window_tokens_per_s / 1000:.1f}k tok/s"
            + (f" | val {p.val_loss:.4f}" if p.val_loss is not None else "")
        )
        if self.writer is not None:
            self.writer.add_scalar("train/loss", p.train_loss, p.step)
            self.writer.add_scalar("train/lr", p.lr, p.step)
            self.writer.add_scalar("throughput/tokens_per_s", window_tokens_per_s, p.step)
            if p.val_loss is not None:
                self.writer.add_scalar("val/loss", p.val_loss, p.step)

    def finish(
        self,
        arch: ArchConfig,
        recipe: TrainRecipe,
        budget: Budget,
        r: Result,
        extra_hparams: Mapping[str, Any] | None,
    ) -> None:
        """The closing line, and the HParams entry of the TensorBoard run."""
        bpb = f" ({r.val_bpb:.3f} bits/byte)" if r.val_bpb is not None else ""
        self.say(
            f"done: val_loss {r.val_loss:.4f}{bpb} after {plural(r.steps, 'step')}, "
            f"{r.tokens:,} tokens, {r.tokens_per_s / 1000:.1f}k tok/s, {r.seconds:.1f} s"
            + (f" (stopped at {r.stopped_at:.0%})" if r.stopped_at is not None else "")
            + (f"; compiled in {r.compile_seconds:.1f} s" if r.compile_seconds is not None else "")
        )
        if self.writer is not None:
            _write_hparams(self.writer, arch, recipe, budget, r, extra_hparams)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _write_hparams(
    writer: Any,
    arch: ArchConfig,
    recipe: TrainRecipe,
    budget: Budget,
    r: Result,
    extra: Mapping[str, Any] | None,
) -> None:
    """HParams for TensorBoard's table, written into this run (not a timestamped sub-run)."""
    from torch.utils.tensorboard.summary import hparams

    hp: dict[str, Any] = {
        "arch_id": arch.arch_id,
        "summary": arch.summary(),
        "d_model": arch.d_model,
        "n_heads": arch.n_heads,
        "n_layers": arch.n_layers,
        "lr": recipe.lr,
        "batch_size": recipe.batch_size,
        "seed": recipe.seed,
        f"budget_{budget.kind}": budget.value,
    }
    hp.update(extra or {})
    hp = {str(k): v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in hp.items()}
    metrics = {
        "hparam/val_loss": r.val_loss,
        "hparam/val_bpb": r.val_bpb,
        "hparam/train_flops_per_token": r.train_flops_per_token,
        "hparam/params": float(r.params),
        "hparam/tokens_per_s": r.tokens_per_s,
    }
    metrics = {k: v for k, v in metrics.items() if v is not None}  # no bits per byte without bytes per token
    for summary in hparams(hp, metrics):
        writer.file_writer.add_summary(summary)
    for key, value in metrics.items():
        writer.add_scalar(key, value, r.steps)
