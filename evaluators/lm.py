"""The language-model evaluator: train a candidate for a compute budget, report its validation loss.

``train_lm`` builds ``nas.build_model(arch)``, trains it on the byte-level
corpus with AdamW (weight decay on matrices only), linear warmup and cosine
decay to ``lr * min_lr_ratio``, gradient clipping and fixed seeds, and returns
the metrics of :data:`evaluators.base.RESULT_KEYS`.  Two CPU runs with the
same seed, budget, recipe and thread count give bit-identical losses.

Budgets (``Budget.kind``):

* ``steps``: that many optimizer steps.
* ``tokens``: ``floor(tokens / (batch_size * seq_len))`` steps.
* ``flops``: ``floor(flops / (train_flops_per_token * batch_size * seq_len))``
  steps, with the analytic FLOPs of ``nas.compute``: a bigger model sees fewer
  tokens.  A budget that buys less than one step is refused.
* ``seconds``: training wall-clock time (evaluation excluded); the schedule
  follows the elapsed fraction, so such runs are not reproducible.

Speed: the loop syncs with the device only at report points (every
``recipe.log_every`` steps, the ``eval_at`` fractions and the end); a
non-finite loss is caught there (it cannot recover in between: NaN weights
stay NaN) and raises :class:`Diverged`.  On CUDA it trains under bf16 autocast,
where ``F.scaled_dot_product_attention`` picks flash kernels.

This module knows nothing of Optuna or Ray.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from evaluators.base import (
    Budget,
    Diverged,
    Progress,
    ProgressCallback,
    TrainRecipe,
    check_eval_at,
    metrics_from_loss,
)
from nas.compute import Compute, compute
from nas.data import Corpus, get_batch, load_corpus, validation_windows
from nas.errors import ConfigError, UserError
from nas.models import ArchConfig, build_model

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str) -> torch.device:
    """``auto``: CUDA when available, else CPU."""
    if device not in DEVICES and not str(device).startswith("cuda:"):
        raise UserError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {device!r} requested but CUDA is not available; use --device cpu or auto")
    return torch.device(device)


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


def lr_at(recipe: TrainRecipe, fraction: float) -> float:
    """Learning rate after ``fraction`` of the budget: linear warmup, then cosine to lr * min_lr_ratio."""
    peak, wf = recipe.lr, recipe.warmup_frac
    fraction = min(max(fraction, 0.0), 1.0)
    if wf > 0 and fraction < wf:
        return peak * fraction / wf
    progress = (fraction - wf) / (1.0 - wf) if wf < 1 else 1.0
    low = peak * recipe.min_lr_ratio
    return low + (peak - low) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, recipe: TrainRecipe, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (every parameter of 2+ dimensions) only."""
    params = list(model.parameters())  # shared (tied) parameters appear once
    decay = [p for p in params if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in params if p.requires_grad and p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        [g for g in groups if g["params"]],
        lr=recipe.lr,
        betas=(recipe.beta1, recipe.beta2),
        fused=True,  # one kernel for all parameters, on CPU as on CUDA
    )


def autocast_for(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


class TrainStep:
    """One optimizer step: forward, cross-entropy, backward, clip, AdamW; returns the loss tensor.

    It never reads a value back from the device (no ``.item()``), so steps
    queue without syncs.  The throughput benchmark times exactly this.
    """

    def __init__(self, model: nn.Module, recipe: TrainRecipe, device: torch.device) -> None:
        self.model = model
        self.optimizer = make_optimizer(model, recipe, device)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.grad_clip = recipe.grad_clip
        self.device = device

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        with autocast_for(self.device):
            logits = self.model(x)  # (B, T, vocab)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip, foreach=True)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


@torch.no_grad()
def evaluate_loss(model: nn.Module, x: Tensor, y: Tensor, batch_size: int, device: torch.device) -> float:
    """Mean cross-entropy (nats per token) over the fixed validation windows."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    for i in range(0, len(x), batch_size):
        with autocast_for(device):
            logits = model(x[i : i + batch_size])
        total += F.cross_entropy(
            logits.float().view(-1, logits.size(-1)), y[i : i + batch_size].reshape(-1), reduction="sum"
        ).double()
    model.train(was_training)
    return float(total.item()) / y.numel()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_lm(
    arch: ArchConfig,
    recipe: TrainRecipe | None = None,
    budget: Budget | None = None,
    corpus: Corpus | str | os.PathLike[str] | None = None,
    *,
    device: str = "auto",
    logdir: str | os.PathLike[str] | None = None,
    callback: ProgressCallback | None = None,
    eval_at: Sequence[float] = (),
    log_hparams: Mapping[str, Any] | None = None,
    threads: int | None = None,
    save_to: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train ``arch`` on ``corpus`` for ``budget`` and return its metrics (see the module docstring).

    ``callback(progress)`` is called every ``recipe.log_every`` steps, at each
    ``eval_at`` fraction (with ``progress.val_loss`` set) and once at the end
    (with the final validation loss); returning True stops training (the
    result then has ``stopped_early`` and ``stopped_at``, and ``val_loss`` is
    measured where it stopped).  ``threads`` sets torch's CPU threads;
    ``save_to`` writes a checkpoint that ``nas.load_model`` reads; ``log``
    receives human-readable progress lines.
    """
    t_start = time.perf_counter()
    recipe = recipe if recipe is not None else TrainRecipe()
    budget = budget if budget is not None else Budget("steps", 200)
    corpus = corpus if isinstance(corpus, Corpus) else load_corpus(corpus)
    seq_len = recipe.seq_len if recipe.seq_len is not None else arch.max_len
    if seq_len > arch.max_len:
        raise ConfigError(f"{seq_len} exceeds the architecture's max_len {arch.max_len}", "recipe.seq_len")
    fractions = check_eval_at(eval_at)
    dev = resolve_device(device)
    if threads is not None:
        torch.set_num_threads(threads)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    B, T = recipe.batch_size, seq_len
    cost = compute(arch, T)
    total_steps = plan_steps(budget, cost, B, T)
    for part, data in (("training", corpus.train), ("validation", corpus.val)):
        if len(data) <= T:
            raise UserError(
                f"{corpus.name}: the {part} text ({len(data)} bytes) is shorter than one window of "
                f"seq_len + 1 = {T + 1} bytes; use a larger corpus or a smaller recipe.seq_len"
            )
    val_x, val_y = (t.to(dev) for t in validation_windows(corpus.val, recipe.eval_batches * B, T))

    torch.manual_seed(recipe.seed)
    model = build_model(arch).to(dev)
    model.train()
    batches = torch.Generator().manual_seed(recipe.seed)
    stepper = TrainStep(model, recipe, dev)
    writer = _open_writer(logdir)
    say = log or (lambda _line: None)

    eval_steps: dict[int, list[float]] = {}
    if total_steps is not None:
        for f in fractions:
            eval_steps.setdefault(min(total_steps, max(1, round(f * total_steps))), []).append(f)
    pending = list(fractions)  # seconds budgets: fractions not yet reached

    intermediate: dict[float, float] = {}
    step = 0
    train_seconds = 0.0
    loss_sum = torch.zeros((), device=dev)
    n_window, window_t0, window_steps = 0, 0.0, 0
    train_loss = float("nan")
    lr = 0.0
    stopped_at: float | None = None
    final_val: float | None = None
    t_loop = time.perf_counter()  # training clock: paused while evaluating and reporting

    say(
        f"training {arch.arch_id} ({cost.params:,} params, "
        f"{cost.train_flops_per_token:.3g} train FLOPs/token) on {corpus.name} for {budget}"
        + (f" = {total_steps} steps" if total_steps is not None and budget.kind != "steps" else "")
        + f", batch {B} x {T}, {dev.type}"
    )
    while True:
        if total_steps is not None:
            fraction_next = (step + 1) / total_steps
        else:
            # Estimate where this step will end, so warmup does not begin at lr 0 for long.
            per_step = train_seconds / step if step else 0.0
            fraction_next = min(
                1.0, (train_seconds + (time.perf_counter() - t_loop) + per_step) / budget.value
            )
        lr = lr_at(recipe, fraction_next)
        stepper.set_lr(lr)
        x, y = get_batch(corpus.train, B, T, batches)
        loss = stepper(x.to(dev, non_blocking=True), y.to(dev, non_blocking=True))
        loss_sum += loss
        n_window += 1
        step += 1

        if total_steps is not None:
            fraction = step / total_steps
            last = step >= total_steps
            due = eval_steps.get(step, [])
        else:
            elapsed = train_seconds + (time.perf_counter() - t_loop)
            if step % recipe.log_every == 0 or elapsed >= budget.value:
                _sync(dev)
                elapsed = train_seconds + (time.perf_counter() - t_loop)
            fraction = min(1.0, elapsed / budget.value)
            last = fraction >= 1.0
            due = [f for f in pending if f <= fraction]
            pending = [f for f in pending if f > fraction]
        if not (last or due or step % recipe.log_every == 0):
            continue

        # -- a report point: the clock stops, the loss is read back ----------------------------
        _sync(dev)
        now = time.perf_counter()
        train_seconds += now - t_loop
        train_loss = float((loss_sum / n_window).item())
        if not math.isfinite(train_loss):
            raise Diverged(f"training loss is {train_loss} at step {step} (lr {lr:.3g})")
        window_tps = (step - window_steps) * B * T / max(train_seconds - window_t0, 1e-9)
        loss_sum.zero_()
        n_window, window_t0, window_steps = 0, train_seconds, step

        val_loss: float | None = None
        if due or last:
            val_loss = evaluate_loss(model, val_x, val_y, B, dev)
            if not math.isfinite(val_loss):
                raise Diverged(f"validation loss is {val_loss} at step {step}")
            for f in due:
                intermediate[f] = val_loss
        tokens = step * B * T
        progress = Progress(
            step=step,
            fraction=fraction,
            tokens=tokens,
            flops=tokens * cost.train_flops_per_token,
            seconds=train_seconds,
            train_loss=train_loss,
            lr=lr,
            val_loss=val_loss,
        )
        say(
            f"step {step}"
            + (f"/{total_steps}" if total_steps is not None else "")
            + f" ({fraction:.0%}) loss {train_loss:.4f} lr {lr:.2e} {window_tps / 1000:.1f}k tok/s"
            + (f" | val {val_loss:.4f}" if val_loss is not None else "")
        )
        if writer is not None:
            writer.add_scalar("train/loss", train_loss, step)
            writer.add_scalar("train/lr", lr, step)
            writer.add_scalar("throughput/tokens_per_s", window_tps, step)
            if val_loss is not None:
                writer.add_scalar("val/loss", val_loss, step)
        stop = bool(callback(progress)) if callback is not None else False
        if last:
            final_val = val_loss
            break
        if stop:
            stopped_at = fraction
            final_val = val_loss
            break
        t_loop = time.perf_counter()

    if final_val is None:  # stopped between evaluation points
        final_val = evaluate_loss(model, val_x, val_y, B, dev)
        if not math.isfinite(final_val):
            raise Diverged(f"validation loss is {final_val} at step {step}")
    tokens = step * B * T
    result: dict[str, Any] = {
        **metrics_from_loss(final_val),
        "params": cost.params,
        "non_embedding_params": cost.non_embedding_params,
        "flops_per_token": cost.fwd_flops_per_token,
        "train_flops_per_token": cost.train_flops_per_token,
        "train_flops": tokens * cost.train_flops_per_token,
        "tokens": tokens,
        "steps": step,
        "tokens_per_s": tokens / train_seconds if train_seconds > 0 else 0.0,
        "train_seconds": train_seconds,
        "seconds": time.perf_counter() - t_start,
        "arch_id": arch.arch_id,
        "intermediate": intermediate,
        "stopped_early": stopped_at is not None,
        "stopped_at": stopped_at,
        "device": dev.type,
        "threads": torch.get_num_threads(),
        "train_loss": train_loss,
        "seed": recipe.seed,
        "budget": budget.to_dict(),
        "corpus": corpus.name,
    }
    say(
        f"done: val_loss {final_val:.4f} ({result['val_bpb']:.3f} bits/byte) after {step} steps, "
        f"{tokens:,} tokens, {result['tokens_per_s'] / 1000:.1f}k tok/s, {result['seconds']:.1f} s"
        + (f" (stopped at {stopped_at:.0%})" if stopped_at is not None else "")
    )
    if writer is not None:
        _write_hparams(writer, arch, recipe, budget, result, log_hparams)
        writer.close()
    if save_to is not None:
        from nas.checkpoint import save_checkpoint

        save_checkpoint(save_to, model, recipe=recipe.to_dict(), budget=budget.to_dict(), metrics=result)
    return result


def _open_writer(logdir: str | os.PathLike[str] | None) -> Any:
    if logdir is None:
        return None
    from torch.utils.tensorboard import SummaryWriter  # slow import, only when asked

    Path(logdir).mkdir(parents=True, exist_ok=True)
    return SummaryWriter(log_dir=str(logdir))


def _write_hparams(
    writer: Any,
    arch: ArchConfig,
    recipe: TrainRecipe,
    budget: Budget,
    result: Mapping[str, Any],
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
        "hparam/val_loss": result["val_loss"],
        "hparam/val_bpb": result["val_bpb"],
        "hparam/train_flops_per_token": result["train_flops_per_token"],
        "hparam/params": float(result["params"]),
        "hparam/tokens_per_s": result["tokens_per_s"],
    }
    for summary in hparams(hp, metrics):
        writer.file_writer.add_summary(summary)
    for key, value in metrics.items():
        writer.add_scalar(key, value, result["steps"])


class LMEvaluator:
    """``train_lm`` with its recipe, budget and corpus bound: the :class:`evaluators.base.Evaluator`
    a search calls once per candidate.  The corpus is loaded on first use (once per process)."""

    def __init__(
        self,
        recipe: TrainRecipe | None = None,
        budget: Budget | None = None,
        corpus: Corpus | str | None = None,
        *,
        device: str = "auto",
        threads: int | None = None,
    ) -> None:
        self.recipe = recipe if recipe is not None else TrainRecipe()
        self.budget = budget if budget is not None else Budget("steps", 200)
        self._corpus = corpus
        self.device = device
        self.threads = threads

    @property
    def corpus(self) -> Corpus:
        if not isinstance(self._corpus, Corpus):
            self._corpus = load_corpus(self._corpus)
        return self._corpus

    def __call__(
        self,
        arch: ArchConfig,
        *,
        callback: ProgressCallback | None = None,
        eval_at: Sequence[float] = (),
        logdir: str | None = None,
        log_hparams: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        return train_lm(
            arch,
            self.recipe,
            self.budget,
            self.corpus,
            device=self.device,
            logdir=logdir,
            callback=callback,
            eval_at=eval_at,
            log_hparams=log_hparams,
            threads=self.threads,
        )


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
