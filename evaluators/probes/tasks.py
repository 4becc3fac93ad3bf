"""The six probe tasks (``TASKS``): each one's vocabulary, length, data sizes and generator; datasets."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from evaluators.probes.base import Instance
from evaluators.probes.compression import BottleneckAutoencoder, compression_instance
from evaluators.probes.copying import selective_copy_instance
from evaluators.probes.memorization import memorization_instance, memorization_map
from evaluators.probes.plateau import frequent_value_accuracy
from evaluators.probes.recall import fuzzy_recall_instance, recall_instance
from nas.errors import ConfigError
from nas.models import ArchConfig, build_model
from nas.models.cost import compute


@dataclasses.dataclass(frozen=True)
class Task:
    """One probe: its vocabulary, the model's max_len, the data sizes and the instance generator."""

    name: str
    vocab_size: int
    seq_len: int  # the probe model's max_len (inputs are at most this long)
    n_train: int
    n_test: int
    make: Callable[..., Instance]
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    bottleneck: bool = False  # trained as a BottleneckAutoencoder (compression), else as the LM
    #: the accuracy of a rule without the capability on the test set (recall: the frequent-value plateau);
    #: a task with one is scored by how far the accuracy rose above it (``above_plateau``)
    plateau: Callable[..., float] | None = None

    def model(self, parch: ArchConfig) -> torch.nn.Module:
        """The model this task trains for the architecture ``parch`` (from the current torch RNG)."""
        return BottleneckAutoencoder(parch) if self.bottleneck else build_model(parch)

    def train_flops_per_token(self, parch: ArchConfig, length: int) -> float:
        extra = BottleneckAutoencoder.extra_train_flops_per_token(parch) if self.bottleneck else 0.0
        return compute(parch, length).train_flops_per_token + extra

    def instance(self, rng: np.random.Generator, train: bool, seed: int = 0) -> Instance:
        memo = self.make is memorization_instance
        extra = {"facts": memorization_map(self.vocab_size, seed)} if memo else {}
        return self.make(rng, train, vocab=self.vocab_size, seq_len=self.seq_len, **self.options, **extra)


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("in_context_recall", 16, 64, 4096, 256, recall_instance, plateau=frequent_value_accuracy),
        Task(
            "noisy_in_context_recall",
            32,
            64,
            4096,
            256,
            recall_instance,
            {"noise_vocab": 16, "frac_noise": 0.2},
            plateau=frequent_value_accuracy,
        ),
        Task("fuzzy_in_context_recall", 16, 64, 4096, 256, fuzzy_recall_instance, {"k_max": 3, "v_max": 3}),
        Task("selective_copying", 16, 64, 4096, 256, selective_copy_instance, {"n_copy": 8}),
        Task("compression", 16, 32, 4096, 256, compression_instance, bottleneck=True),
        Task("memorization", 128, 32, 256, 256, memorization_instance),
    )
}


def parse_tasks(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """Task names from a comma-separated string or a list (None, a blank string or an empty list: all six,
    in order).  A list of only empty items (``","``) is refused like any empty item: it used to mean all."""
    if (
        value is None
        or (isinstance(value, str) and not value.strip())
        or (not isinstance(value, str) and not value)
    ):
        return tuple(TASKS)
    names = [str(n).strip() for n in (value.split(",") if isinstance(value, str) else value)]
    # an empty or repeated item is a typo (tasks,,x or x,x): refused, never silently dropped or merged
    if "" in names:
        raise ConfigError(f"an empty item in {value!r}; give task names separated by commas", "tasks")
    bad = [n for n in names if n not in TASKS]
    if bad:
        raise ConfigError(f"unknown probe task {bad[0]!r}; valid: {', '.join(TASKS)}", "tasks")
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise ConfigError(f"lists {twice} twice in {value!r}; give each task once", "tasks")
    return tuple(names)


def make_dataset(task: Task, n: int, train: bool, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` instances of ``task`` as (inputs, targets) int64 tensors; the same seed gives the same data."""
    number = list(TASKS).index(task.name) if task.name in TASKS else 99
    rng = np.random.default_rng((seed, number, 0 if train else 1))
    pairs = [task.instance(rng, train, seed) for _ in range(n)]
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


@functools.lru_cache(maxsize=64)
def input_len(name: str, seed: int = 0) -> int:
    """The length of the inputs of task ``name`` (every instance of a task has the same)."""
    return int(make_dataset(TASKS[name], 1, True, seed)[0].size(1))


#: why an encoder-decoder takes no probe: one line for `probe`, and for a search before it starts
ENCODER_DECODER = (
    "is seq2seq: the probes are posed to decoder-only language models (each task is one sequence the model "
    "continues), and an encoder-decoder's batches hold a source and a target; probe an lm architecture, "
    "or search this one with the lm evaluator"
)


def probe_arch(arch: ArchConfig, task: Task) -> ArchConfig:
    """``arch`` with the task's vocabulary and length; a ConfigError when an option cannot hold at it, or
    when ``arch`` is an encoder-decoder (the probes are posed to decoder-only language models)."""
    if arch.is_seq2seq:
        raise ConfigError(ENCODER_DECODER, "task")
    try:
        return dataclasses.replace(arch, vocab_size=task.vocab_size, max_len=task.seq_len)
    except ConfigError as err:
        raise ConfigError(f"cannot run probe {task.name} (max_len {task.seq_len}): {err}") from None
