"""The recall tasks' generators: associative recall (plain and noisy) and fuzzy recall.

The tasks, as implemented (MAD's baseline in parentheses; ``T`` = model input length):

``in_context_recall``: vocab 16 (keys 0-7, values 8-15), sequence 64 tokens = 31 random
  (key, value) pairs, keys with replacement, each key's value drawn once per sequence, then a
  probe pair (a key already shown, its value); input = tokens[:-1] (T = 63).  Train targets:
  every next token (as MAD).  Scored (test): the position before each value whose key appeared
  earlier in the sequence, target that value; the probe's value is always one.  4096 train,
  256 test sequences (MAD: length 128, 12,800 train, 1,280 test).
``noisy_in_context_recall`` are scored above that plateau (``above_plateau`` of the accuracy and
``fuzzy_in_context_recall``: vocab 16 (keys 0-6, values 7-14, pad 15, as MAD's multi-query
  vocabulary), keys are ordered tuples of 1-3 distinct key tokens and values of 1-3
  distinct value tokens; a probe pair is inserted at a random place, pairs follow until the
  sequence is full, the probe pair closes it, and the sequence is left-padded to 65 tokens
  (T = 64).  At test every key has 3 tokens.  Scored (test): every token of the value of a key
  seen before (always the closing probe's).  (MAD: length 128.)
"""

from __future__ import annotations

import numpy as np

from evaluators.probes.base import IGNORE, Instance


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
