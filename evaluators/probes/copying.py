"""The selective-copying task's generator.

As implemented (MAD's baseline in parentheses; ``T`` = model input length):

``selective_copying``: vocab 16 (content 0-13, blank 14, copy 15), 8 content tokens at random
  places among blanks (55 tokens), then the copy token and 8 blanks (T = 64).  Scored: the 8 final
  blanks, whose targets are the content tokens in order; other positions are ignored in training
  too (as MAD: no shift).  (MAD: length 256, 16 tokens to copy.)
"""

from __future__ import annotations

import numpy as np

from evaluators.probes.base import IGNORE, Instance


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
