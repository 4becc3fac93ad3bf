"""Capability probes: MAD's six synthetic tasks, scaled down, as an evaluator (``probes``).

Each candidate is trained from scratch once per task, with its own blocks, width, depth, heads,
norm and positions, but the task's vocabulary and length: the architecture is rebuilt with
``vocab_size`` and ``max_len`` replaced (``dataclasses.replace``, so the ArchConfig's checks run
again).  An option that cannot hold at the task's length is refused, not clamped: a
``synth_factorized_dense`` with ``a * b`` below the task's ``max_len`` (possible only when the
file's own max_len is below 64) raises a ConfigError naming the task.  Every other block reads
``max_len`` only to size its tables.

Protocol (settings of :class:`ProbeEvaluator`, defaults in brackets): AdamW (lr [1e-3],
betas 0.9/0.95, no weight decay, gradient clip 1.0), linear warmup over the first 5% of the steps
then constant (no decay: the recall transition comes late, after about 2,100 steps of batch 64
for a 2-layer width-64 mha, and a decay would lower the lr before it), a fixed number of steps
per task [``DEFAULT_STEPS``], batch [32], one seed [0] for the data and the initial weights.
CAVEAT: the default steps fit a minute per task on one CPU thread, and they are far below that
recall transition: at the defaults the recall tasks sit on their plateau (about 0.31, what
guessing a frequent value in context gives) for attention too.  So ``in_context_recall`` and
``noisy_in_context_recall`` are scored above that plateau (``above_plateau`` of the accuracy and
``frequent_value_accuracy``): 0 says the task separated nothing; raise ``steps`` to separate
mixers on recall (docs/probes.md).  Datasets are generated in memory with
``numpy.random.default_rng((seed, task number, split))``: the same seed gives the same data.
Accuracy is the argmax over the whole vocabulary at the scored positions of a held-out test set,
micro-averaged (correct scored positions / scored positions, pooled over all test sequences;
MAD's torchmetrics call may average per class instead).  The score is the unweighted mean of the
task scores (the accuracy; for the two recall tasks above, how far it rose above the plateau), and
``val_loss`` is ``1 - score``: a search that minimises val_loss maximises
the score (``val_ppl`` is exp of it and means nothing; ``val_bpb`` is None).  The search's
budget is ignored (the probe's steps are fixed, so scores compare across trials); ``params``,
FLOPs and state are the architecture's as given (``nas.compute``), not those of the probe models.

Tasks, as implemented (MAD's baseline in parentheses; ``T`` = model input length):

``in_context_recall``: vocab 16 (keys 0-7, values 8-15), sequence 64 tokens = 31 random
  (key, value) pairs, keys with replacement, each key's value drawn once per sequence, then a
  probe pair (a key already shown, its value); input = tokens[:-1] (T = 63).  Train targets:
  every next token (as MAD).  Scored (test): the position before each value whose key appeared
  earlier in the sequence, target that value; the probe's value is always one.  4096 train,
  256 test sequences (MAD: length 128, 12,800 train, 1,280 test).
``noisy_in_context_recall``: as above with vocab 32 (noise tokens 16-31); each pair slot except
  one chosen at random is, with probability 0.2, two noise tokens instead.  Train targets: every
  next token, noise included (as MAD); noise is never scored.  (MAD: length 128.)
``fuzzy_in_context_recall``: vocab 16 (keys 0-6, values 7-14, pad 15, as MAD's multi-query
  vocabulary), keys are ordered tuples of 1-3 distinct key tokens and values of 1-3
  distinct value tokens; a probe pair is inserted at a random place, pairs follow until the
  sequence is full, the probe pair closes it, and the sequence is left-padded to 65 tokens
  (T = 64).  At test every key has 3 tokens.  Scored (test): every token of the value of a key
  seen before (always the closing probe's).  (MAD: length 128.)
``selective_copying``: vocab 16 (content 0-13, blank 14, copy 15), 8 content tokens at random
  places among blanks (55 tokens), then the copy token and 8 blanks (T = 64).  Scored: the 8 final
  blanks, whose targets are the content tokens in order; other positions are ignored in training
  too (as MAD: no shift).  (MAD: length 256, 16 tokens to copy.)
``compression``: vocab 16 (content 0-14, compression token 15); 31 random tokens then the
  compression token (T = 32); the target is the whole input.  As MAD, through a bottleneck: the
  candidate encodes, its last position's state is pooled and a fixed-shape decoder
  (:class:`BottleneckAutoencoder`) reconstructs every position from it, so nothing can be copied.
  (MAD: the same baseline, length 32, vocab 16.)
``memorization``: vocab 128, a fixed map of 63 facts (keys 0-62, each to a distinct value of
  63-126 drawn from the seed, as MAD's zip leaves one value unused; insert token 127), each
  sequence 16 (key, insert) pairs (T = 32), keys uniform with replacement.  Scored (train and
  test): the insert positions, target the key's value; the map never appears in context.
  256 train sequences (as MAD), 256 test sequences of the same facts.  (MAD: vocab 256, 127 facts.)

MAD scores each task as the best of an lr x weight-decay sweep averaged over a difficulty sweep;
here there is one setting and one optimizer configuration per task, and far fewer steps.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from evaluators.base import Diverged, Progress, ProgressCallback, Spent, check_eval_at
from evaluators.device import device_name, setup_device
from evaluators.result import Result
from evaluators.step import TrainStep, autocast_for, compute_dtype
from nas.cost import compute
from nas.errors import ConfigError
from nas.interrupts import raise_lost_stop
from nas.models import ArchConfig, build_model
from nas.plural import plural
from nas.spec.training import Budget, TrainRecipe

IGNORE = -100  # a target that is neither trained nor scored (cross_entropy's default ignore_index)

#: optimizer steps per task at most: 250 take about a minute per task on one CPU thread, so this is days
MAX_STEPS = 10**6
#: optimizer steps per task by default (about a minute per task for vanilla.yaml on one CPU thread)
DEFAULT_STEPS = 250
DEFAULT_BATCH = 32
DEFAULT_LR = 1e-3

Instance = tuple[np.ndarray, np.ndarray]  # inputs (T,), targets (T,) with IGNORE where not scored


# ---------------------------------------------------------------------------------------- generators


def recall_instance(
    rng: np.random.Generator,
    train: bool,
    *,
    vocab: int = 16,
    seq_len: int = 64,
    noise_vocab: int = 0,
    frac_noise: float = 0.0,
) -> Instance:
    """Multi-query associative recall (MAD's in-context recall; noisy with ``frac_noise > 0``)."""
    real = vocab - noise_vocab
    n_keys = real // 2
    pairs = seq_len // 2
    keep = int(rng.integers(pairs - 1))  # one slot that is never noise
    tokens: list[int] = []
    scored: list[int] = []  # the value that follows each token, or IGNORE
    mapping: dict[int, int] = {}
    for i in range(pairs - 1):
        if frac_noise > 0 and i != keep and rng.random() < frac_noise:
            tokens += [int(t) for t in rng.integers(real, vocab, size=2)]
            scored += [IGNORE, IGNORE]
            continue
        key = int(rng.integers(n_keys))
        seen = key in mapping
        if not seen:
            mapping[key] = int(rng.integers(n_keys, real))
        tokens += [key, mapping[key]]
        scored += [IGNORE, mapping[key] if seen else IGNORE]
    probe = int(rng.choice(sorted(mapping)))
    tokens += [probe, mapping[probe]]
    scored += [IGNORE, mapping[probe]]
    seq = np.array(tokens, dtype=np.int64)
    return seq[:-1], (seq[1:] if train else np.array(scored[1:], dtype=np.int64))


def frequent_value_accuracy(
    x: torch.Tensor, y: torch.Tensor, *, vocab: int = 16, noise_vocab: int = 0, **_: Any
) -> float:
    """The accuracy on a recall test set of a rule that cannot recall: at each scored position, the
    value token seen most often so far in the sequence (ties: the lowest), whatever the key.

    It is the plateau a model sits on before it learns to look a key up (about 0.31 on
    ``in_context_recall``): a recall accuracy not above it did not recall anything.
    """
    real = vocab - noise_vocab
    low = real // 2
    correct = total = 0
    for xs, ys in zip(x.tolist(), y.tolist(), strict=True):
        counts = [0] * (real - low)
        for token, target in zip(xs, ys, strict=True):
            if low <= token < real:
                counts[token - low] += 1
            if target != IGNORE:
                correct += int(low + max(range(len(counts)), key=lambda i: (counts[i], -i)) == target)
                total += 1
    return correct / max(total, 1)


def above_plateau(acc: float, plateau: float, n: int) -> float:
    """How far ``acc`` rose from the no-recall ``plateau`` towards 1, as a share of the way (0 when not
    above it by more than two standard errors of an accuracy over ``n`` scored positions: noise)."""
    margin = 2.0 * math.sqrt(max(plateau * (1.0 - plateau), 1e-12) / max(n, 1))
    if acc <= plateau + margin or plateau >= 1.0:
        return 0.0
    return (acc - plateau) / (1.0 - plateau)


def _tuples(rng: np.random.Generator, low: int, high: int, size: int) -> tuple[int, ...]:
    """An ordered tuple of ``size`` distinct tokens from [low, high)."""
    return tuple(int(t) for t in rng.permutation(np.arange(low, high))[:size])


def fuzzy_recall_instance(
    rng: np.random.Generator,
    train: bool,
    *,
    vocab: int = 16,
    seq_len: int = 64,
    k_max: int = 3,
    v_max: int = 3,
) -> Instance:
    """Fuzzy recall: keys and values are tuples of 1..k_max (1..v_max) tokens; test keys are k_max long."""
    pad = vocab - 1
    n_keys = pad // 2

    def key() -> tuple[int, ...]:
        return _tuples(rng, 0, n_keys, int(rng.integers(1, k_max + 1)) if train else k_max)

    def value() -> tuple[int, ...]:
        return _tuples(rng, n_keys, pad, int(rng.integers(1, v_max + 1)))

    k_probe, v_probe = key(), value()
    widest = k_max + v_max
    limit = seq_len - len(k_probe) - len(v_probe) - widest  # pairs stop here; the closing probe follows
    probe_at = int(rng.integers(limit))
    mapping = {k_probe: v_probe}
    shown: set[tuple[int, ...]] = set()
    tokens: list[int] = []
    scored: list[int] = []
    placed = False
    while len(tokens) < limit:
        # the probe goes in at probe_at, or now if this pair may be the last one
        due = len(tokens) >= probe_at or len(tokens) + widest >= limit
        k = k_probe if not placed and due else key()
        placed = placed or k == k_probe
        v = mapping.setdefault(k, value())
        tokens += [*k, *v]
        scored += [IGNORE] * len(k) + (list(v) if k in shown else [IGNORE] * len(v))
        shown.add(k)
    tokens += [*k_probe, *v_probe]  # the closing probe: its key was shown above
    scored += [IGNORE] * len(k_probe) + list(v_probe)
    n_pad = seq_len + 1 - len(tokens)
    seq = np.array([pad] * n_pad + tokens, dtype=np.int64)
    target = np.array([IGNORE] * n_pad + scored, dtype=np.int64)
    return seq[:-1], (seq[1:] if train else target[1:])


def selective_copy_instance(
    rng: np.random.Generator, train: bool, *, vocab: int = 16, seq_len: int = 64, n_copy: int = 8
) -> Instance:
    """Selective copying: ``n_copy`` tokens among blanks, a copy token, then those tokens in order."""
    blank, copy = vocab - 2, vocab - 1
    content = rng.integers(0, vocab - 2, size=n_copy)
    head = np.full(seq_len - n_copy - 1, blank, dtype=np.int64)
    head[np.sort(rng.choice(head.size, size=n_copy, replace=False))] = content
    inputs = np.concatenate([head, [copy], np.full(n_copy, blank)]).astype(np.int64)
    targets = np.full(seq_len, IGNORE, dtype=np.int64)
    targets[-n_copy:] = content
    return inputs, targets


def compression_instance(
    rng: np.random.Generator, train: bool, *, vocab: int = 16, seq_len: int = 32
) -> Instance:
    """``seq_len - 1`` random tokens and the compression token; the target is the whole input (as MAD).

    The model that reads it is a :class:`BottleneckAutoencoder`: every target is decoded from the
    last position's state alone, so nothing can be copied from the input.
    """
    x = rng.integers(0, vocab - 1, size=seq_len - 1)
    seq = np.concatenate([x, [vocab - 1]]).astype(np.int64)
    return seq, seq.copy()


def memorization_map(vocab: int, seed: int) -> np.ndarray:
    """The fixed fact table: key k in [0, (vocab-1)//2) maps to value[k] in [(vocab-1)//2, vocab-1)."""
    half = (vocab - 1) // 2
    return np.random.default_rng((seed, 12345)).permutation(np.arange(half, vocab - 1))[:half]


def memorization_instance(
    rng: np.random.Generator,
    train: bool,
    *,
    vocab: int = 128,
    seq_len: int = 32,
    facts: np.ndarray | None = None,
) -> Instance:
    """(key, insert) pairs; at each insert token the target is the key's value from the fixed table."""
    facts = memorization_map(vocab, 0) if facts is None else facts
    keys = rng.integers(0, facts.size, size=seq_len // 2)
    inputs = np.stack([keys, np.full_like(keys, vocab - 1)], axis=1).reshape(-1)
    targets = np.stack([np.full_like(keys, IGNORE), facts[keys]], axis=1).reshape(-1)
    return inputs.astype(np.int64), targets.astype(np.int64)


# ---------------------------------------------------------------------------------------- the models


class BottleneckAutoencoder(torch.nn.Module):
    """MAD's compression model: the candidate's LM as the encoder, pooled at its last position, and a
    small decoder of MAD's shape that reconstructs every position from that one vector.

    The decoder (not the candidate's: the same for every architecture) adds a fixed sinusoidal
    embedding of each output position to the pooled state, then LayerNorm, Linear(d, d), GELU twice,
    a LayerNorm and Linear(d, vocab).  Each output sees the input only through the pooled state:
    a mixer that copies tokens cannot solve the task, one that packs the sequence into the last
    position's state can.  The candidate's LM head is not used (it gets no gradient).
    """

    def __init__(self, arch: ArchConfig) -> None:
        super().__init__()
        from nas.models.model import init_gpt2, sinusoidal_table

        d = arch.d_model
        self.lm = build_model(arch)
        self.register_buffer("positions", sinusoidal_table(arch.max_len, d), persistent=False)
        self.decoder = torch.nn.Sequential(
            torch.nn.LayerNorm(d),
            torch.nn.Linear(d, d),
            torch.nn.GELU(),
            torch.nn.LayerNorm(d),
            torch.nn.Linear(d, d),
            torch.nn.GELU(),
            torch.nn.LayerNorm(d),
            torch.nn.Linear(d, arch.vocab_size),
        )
        init_gpt2(self.decoder, 1)

    def encode(self, idx: torch.Tensor) -> torch.Tensor:
        """The last position's state, (B, d): all that the decoder sees."""
        return self.lm.hidden(idx)[:, -1]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pooled = self.encode(idx)
        return self.decoder(pooled[:, None, :] + self.positions[: idx.size(1)].to(pooled.dtype))

    @staticmethod
    def extra_train_flops_per_token(arch: ArchConfig) -> float:
        """The decoder's training FLOPs per output position beyond the LM head it replaces (two d x d
        matrices, forward and backward: 3 x 2 x 2 d^2)."""
        return 12.0 * arch.d_model * arch.d_model


# ---------------------------------------------------------------------------------------- the tasks


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


# ---------------------------------------------------------------------------------------- training


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
