"""The memorization task's generator and its fixed fact table.

As implemented (MAD's baseline in parentheses; ``T`` = model input length):

``memorization``: vocab 128, a fixed map of 63 facts (keys 0-62, each to a distinct value of
  63-126 drawn from the seed, as MAD's zip leaves one value unused; insert token 127), each
  sequence 16 (key, insert) pairs (T = 32), keys uniform with replacement.  Scored (train and
  test): the insert positions, target the key's value; the map never appears in context.
  256 train sequences (as MAD), 256 test sequences of the same facts.  (MAD: vocab 256, 127 facts.)
"""

from __future__ import annotations

import numpy as np

from evaluators.probes.base import IGNORE, Instance


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
