"""Generated text for unit tests (the real corpus is for the one end-to-end test)."""

from __future__ import annotations

import random
from pathlib import Path

_WORDS = (
    "the king queen lord lady sword crown night day love death war peace heart blood honour "
    "speak come go give take stand fall rise sleep dream tell hear see know think thou thee my "
    "his her our their and but or if when where why how not no yes so"
).split()


def synthetic_text(seed: int, n_words: int) -> str:
    """Pseudo-English lines from a fixed word list: enough structure for a loss to fall."""
    rng = random.Random(seed)
    lines = []
    while n_words > 0:
        k = min(n_words, rng.randint(4, 10))
        lines.append(" ".join(rng.choice(_WORDS) for _ in range(k)).capitalize() + ".")
        n_words -= k
    return "\n".join(lines) + "\n"


def write_corpus(root: Path, n_docs: int, n_words: int = 600) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n_docs):
        (root / f"doc_{i:02d}.txt").write_text(synthetic_text(i, n_words), encoding="utf-8")
    return root


def write_parallel_corpus(root: Path, n_train: int = 200, n_val: int = 20, seed: int = 0) -> Path:
    """A parallel corpus directory (train/val .src/.tgt): synthetic lines to their words reversed."""
    root.mkdir(parents=True, exist_ok=True)
    lines = synthetic_text(seed, 10 * (n_train + n_val)).splitlines()  # lines hold at most 10 words
    for split, part in (("train", lines[:n_train]), ("val", lines[n_train : n_train + n_val])):
        (root / f"{split}.src").write_text("".join(f"{s}\n" for s in part), encoding="utf-8")
        (root / f"{split}.tgt").write_text(
            "".join(" ".join(reversed(s.split())) + "\n" for s in part), encoding="utf-8"
        )
    return root
