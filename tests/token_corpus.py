"""Token-file corpora and tokenizers for tests, made on the spot (nothing is downloaded).

Run as a script to make a token directory for trying the CLI by hand:
``python tests/token_corpus.py DIR [VOCAB]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from synthetic_text import synthetic_text


def token_stream(n: int, vocab_size: int, seed: int) -> np.ndarray:
    """Ids with structure a model can learn: mostly id[t] = id[t-1] + 1 (mod vocab), 10% jumps."""
    rng = np.random.default_rng(seed)
    steps = np.where(rng.random(n) < 0.1, rng.integers(0, vocab_size, n), 1)
    return (np.cumsum(steps) % vocab_size).astype(np.int64)


def write_token_corpus(
    path: Path, vocab_size: int = 1000, n_train: int = 20_000, n_val: int = 4_000, **meta: object
) -> Path:
    """A token directory (train.bin, val.bin, meta.json) through the engine's own writer."""
    from nas.data import write_token_dir

    return write_token_dir(
        path, token_stream(n_train, vocab_size, 0), token_stream(n_val, vocab_size, 1), vocab_size, **meta
    )


def train_tiny_bpe(path: Path, vocab_size: int = 300) -> Path:
    """A byte-level BPE tokenizer.json trained here on synthetic text (needs ``tokenizers``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([synthetic_text(i, 400) for i in range(8)], trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


if __name__ == "__main__":
    out = write_token_corpus(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
    print(f"wrote {out}")
