"""The language-model evaluator: train a candidate for a compute budget, report its validation loss.

``train_lm`` builds ``nas.build_model(arch)``, trains it on the corpus with
AdamW (weight decay on matrices only), linear warmup and cosine decay to
``lr * min_lr_ratio`` (or ``recipe.schedule: wsd``: constant, then a cooldown, with
``budget.rungs`` evaluated on branched cooldowns), gradient clipping and fixed seeds, and returns a
:class:`~evaluators.result.Result`.  Two CPU runs with the same seed, budget,
recipe and thread count give bit-identical losses.  It composes small parts:

* :mod:`evaluators.budget`: what the budget buys (``steps``, ``tokens``,
  ``flops``: a bigger model sees fewer tokens; ``seconds``: training
  wall-clock time, evaluation excluded, not reproducible), the schedule, the clock;
* :mod:`evaluators.device` and :mod:`evaluators.model`: the device (bf16
  autocast on CUDA, where ``F.scaled_dot_product_attention`` picks flash
  kernels), the seeded model, optionally ``torch.compile``-d;
* :mod:`evaluators.step`: one optimizer step (``TrainStep``);
* :mod:`evaluators.loop` and :mod:`evaluators.evaluation`: the loop and the validation loss;
* :mod:`evaluators.trainlog`: progress lines and TensorBoard;
* :func:`nas.files.checkpoint.save_checkpoint`: the weights, when asked.

This module knows nothing of Optuna or Ray.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from evaluators.base import ProgressCallback
from evaluators.budget import TrainingPlan, check_arch_fits, lr_at, plan_steps, plan_training
from evaluators.device import (
    device_name,
    peak_memory_bytes,
    release_memory,
    reset_peak_memory,
    resolve_device,
    setup_device,
)
from evaluators.evaluation import Validation, greedy_samples
from evaluators.loop import Outcome, run_loop
from evaluators.model import CompileFailed, Prepared, prepare_model
from evaluators.result import Result
from evaluators.step import TrainStep, compute_dtype
from evaluators.trainlog import TrainLog, stderr_log
from nas.data import load_corpus
from nas.files.outputs import Planned
from nas.models import ArchConfig
from nas.models.parametrization import parametrization_record, with_base
from nas.plural import plural
from nas.spec import DEFAULT_BUDGET
from nas.spec.training import Budget, TrainRecipe

__all__ = ["LMEvaluator", "TrainStep", "lr_at", "plan_steps", "resolve_device", "stderr_log", "train_lm"]


def train_lm(
    arch: ArchConfig,
    recipe: TrainRecipe | None = None,
    budget: Budget | None = None,
    corpus: Any = None,
    *,
    device: str = "auto",
    logdir: str | os.PathLike[str] | None = None,
    callback: ProgressCallback | None = None,
    eval_at: Sequence[float] = (),
    log_hparams: Mapping[str, Any] | None = None,
    threads: int | None = None,
    save_to: str | os.PathLike[str] | Planned | None = None,
    log: Callable[[str], None] | None = None,
    compile: bool = False,
    checkpoint_to: Callable[[bytes], None] | None = None,
) -> Result:
    """Train ``arch`` on ``corpus`` (loaded, or a spec for :func:`nas.data.load_corpus`) for ``budget``.

    ``callback(progress)`` is called every ``recipe.log_every`` steps, at each
    ``eval_at`` fraction (with ``progress.val_loss`` set) and once at the end
    (with the final validation loss); returning True stops training (the
    result then has ``stopped_early`` and ``stopped_at``, and ``val_loss`` is
    measured where it stopped).  ``threads`` sets torch's CPU threads;
    ``save_to`` writes a checkpoint that ``nas.load_model`` reads; ``log``
    receives human-readable progress lines; ``compile`` trains through
    ``torch.compile`` (a model that fails to compile trains eager, and the
    result says why in ``compile_error``); ``checkpoint_to(data)`` receives the checkpoint as the bytes
    ``save_to`` would write to a ``.safetensors`` name (a search worker sends them to its driver).
    """
    t_start = time.perf_counter()
    recipe = recipe if recipe is not None else TrainRecipe()
    recipe = with_base(recipe, arch)  # completep's base, when unstated: this architecture (recorded below)
    budget = budget if budget is not None else DEFAULT_BUDGET
    corpus = load_corpus(corpus) if corpus is None or isinstance(corpus, (str, os.PathLike)) else corpus
    seq_len = check_arch_fits(arch, recipe, corpus)
    dev = setup_device(device, threads)
    plan = plan_training(budget, recipe, seq_len, corpus, arch, eval_at)
    validation = Validation(corpus, recipe.eval_batches * plan.batch_size, seq_len, plan.batch_size, dev)
    tlog = TrainLog(log, logdir)
    try:
        tlog.start(arch, plan, corpus.name, dev.type)
        asked = recipe.eval_batches * plan.batch_size
        if len(validation.x) < asked:  # never capped silently: the loss is over fewer windows than asked
            tlog.say(
                f"note: validation over {plural(len(validation.x), 'window')} of {seq_len} tokens, all the "
                f"validation data holds (recipe.eval_batches {recipe.eval_batches} x batch {plan.batch_size} "
                f"asked for {asked})"
            )
        compile_error = None
        prep: Prepared | None = None
        try:
            prep = prepare_model(arch, recipe, dev, compile)
            run = run_loop(prep, plan, recipe, corpus, validation, tlog, callback)
        except CompileFailed as err:
            compile_error = str(err)
        if compile_error is not None:  # outside the handler: its traceback no longer holds the failed model
            tlog.say(f"torch.compile failed, training eager instead: {compile_error}")
            prep = None  # the failed model's memory goes back before the eager one is built
            release_memory()
            reset_peak_memory(dev)  # peak_memory_bytes: the eager run alone, not the compile attempt
            prep = prepare_model(arch, recipe, dev, compile=False)  # from the same seed: as if never compiled
            run = run_loop(prep, plan, recipe, corpus, validation, tlog, callback)
        samples = greedy_samples(prep.model, corpus, seq_len, dev) if arch.is_seq2seq else None
        elapsed = time.perf_counter() - t_start
        result = _result(
            arch,
            recipe,
            plan,
            corpus,
            run,
            dev,
            bytes_per_token=validation.bytes_per_token,
            compile_error=compile_error,
            seconds=elapsed,
            samples=samples,
            parametrization=parametrization_record(arch, recipe),
        )
        tlog.finish(arch, recipe, budget, result, log_hparams)
    finally:
        tlog.close()
    if save_to is not None or checkpoint_to is not None:
        from nas.files.checkpoint import checkpoint_bytes, save_checkpoint

        record = getattr(corpus, "record", None)  # the data (and tokenizer) the weights were trained on
        extra = {
            "recipe": recipe.to_dict(),
            "budget": budget.to_dict(),
            "metrics": result.to_dict(),
            "data": record() if callable(record) else None,
        }
        if save_to is not None:
            save_checkpoint(save_to, prep.model, **extra)
        if checkpoint_to is not None:
            checkpoint_to(checkpoint_bytes(prep.model, **extra))
    return result


def _result(
    arch: ArchConfig,
    recipe: TrainRecipe,
    plan: TrainingPlan,
    corpus: Any,
    run: Outcome,
    dev: torch.device,
    **fields: Any,
) -> Result:
    tokens, cost = run.steps * plan.tokens_per_step, plan.cost
    rung_flops = run.rung_steps * plan.tokens_per_step * cost.train_flops_per_token
    return Result.measured(
        arch,
        cost,
        run.val_loss,
        train_flops=tokens * cost.train_flops_per_token + rung_flops,
        rungs=run.rungs,
        rung_flops=rung_flops,
        tokens=tokens,
        steps=run.steps,
        tokens_per_s=run.tokens_per_s,
        device=dev.type,
        threads=torch.get_num_threads(),
        device_name=device_name(dev),
        dtype=compute_dtype(dev),
        peak_memory_bytes=peak_memory_bytes(dev),
        compile_seconds=run.compile_seconds,
        train_seconds=run.train_seconds,
        train_loss=run.train_loss,
        seed=recipe.seed,
        budget=plan.budget.to_dict(),
        corpus=corpus.name,
        intermediate=run.intermediate,
        stopped_early=run.stopped_at is not None,
        stopped_at=run.stopped_at,
        **fields,
    )


_CORPORA: dict[str, Any] = {}


def cached_corpus(spec: str | None) -> Any:
    """The corpus named by ``spec``, loaded once per process (a worker keeps it between trials)."""
    key = spec or ""
    if key not in _CORPORA:
        _CORPORA[key] = load_corpus(spec)
    return _CORPORA[key]


class LMEvaluator:
    """:func:`train_lm` with its recipe, corpus and device bound: the evaluator named ``lm``."""

    def __init__(
        self,
        recipe: TrainRecipe | None = None,
        data: Any = None,
        *,
        device: str = "auto",
        threads: int | None = None,
        compile: bool = False,
        keep_checkpoint: bool = False,
    ) -> None:
        self.recipe = recipe if recipe is not None else TrainRecipe()
        self.data = data  # a loaded corpus or a spec, loaded (once per process) on first use
        self.device = device
        self.threads = threads
        self.compile = compile
        self.keep_checkpoint = keep_checkpoint
        #: with ``keep_checkpoint``: the last evaluated model as safetensors checkpoint bytes
        #: (nas.files.checkpoint.checkpoint_bytes), None before or without it
        self.checkpoint: bytes | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> LMEvaluator:
        """From plain data: ``recipe`` (dict), ``data`` (corpus), ``device``, ``threads``, ``compile``,
        ``keep_checkpoint`` (the worker's: the search keeps weights)."""
        return cls(
            TrainRecipe.from_dict(settings.get("recipe")),
            settings.get("data"),
            device=settings.get("device") or "auto",
            threads=settings.get("threads"),
            compile=bool(settings.get("compile", False)),
            keep_checkpoint=bool(settings.get("keep_checkpoint", False)),
        )

    def evaluate(
        self,
        arch: ArchConfig,
        budget: Budget,
        callback: ProgressCallback | None = None,
        *,
        eval_at: Sequence[float] = (),
        logdir: str | None = None,
        log_hparams: Mapping[str, Any] | None = None,
    ) -> Result:
        corpus = cached_corpus(self.data) if self.data is None or isinstance(self.data, str) else self.data
        self.checkpoint = None
        return train_lm(
            arch,
            self.recipe,
            budget,
            corpus,
            device=self.device,
            logdir=logdir,
            callback=callback,
            eval_at=eval_at,
            log_hparams=log_hparams,
            threads=self.threads,
            compile=self.compile,
            checkpoint_to=self._keep if self.keep_checkpoint else None,
        )

    def _keep(self, data: bytes) -> None:
        self.checkpoint = data
