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
