"""Parallel corpora for sequence-to-sequence tasks: aligned (source, target) examples.

A parallel corpus is a directory holding ``train.src``, ``train.tgt``,
``val.src`` and ``val.tgt``: UTF-8 text, one example per line, line ``i`` of
``.src`` aligned with line ``i`` of ``.tgt``.  Tokens are bytes (vocabulary
256) unless a local tokenizer made a cached copy; examples are stored as
:class:`nas.data.pairs.Pairs`.  This module says what a parallel corpus is;
:mod:`nas.data.parallel_files` loads one (:func:`~nas.data.parallel_files.load_parallel`).
Three special ids follow the base vocabulary: pad, bos and eos.

A line pair where both sides are blank is skipped (a trailing blank line, blank
separators); a pair with one blank side is refused, since it usually means the
two files have gone out of step.  Lines end at ``\\n``; a ``\\r`` before it is
dropped.  Every mistake is one :class:`UserError` naming the file.

The built-in task ``shakespeare-reversed`` (:func:`reversed_pairs`) needs no
download beyond the default corpus.  ``DEFAULT_PARALLEL``, its name, is defined
beside the default corpus's (:mod:`nas.data.corpus`), so the text loader can name
it without importing this module.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from nas.data.corpus import DEFAULT_CORPUS, DEFAULT_PARALLEL, VOCAB_SIZE, corpus_record
from nas.data.pairs import Pairs, pad_rows
from nas.errors import UserError

SIDES = ("train.src", "train.tgt", "val.src", "val.tgt")
IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index: no loss on padding
MAX_LINE_BYTES = 60  # the built-in task's longest source line
N_SPECIALS = 3  # pad, bos, eos
PARALLEL_META = "parallel.json"  # marks a tokenized parallel corpus (nas.data.parallel_files)


@dataclasses.dataclass(frozen=True, eq=False)
class ParallelCorpus:
    """Aligned (source, target) examples for training and validation, with what they are.

    ``base_vocab`` is 256 for bytes or the tokenizer's vocabulary; the model's
    vocabulary (:attr:`vocab_size`) adds pad, bos and eos after it.
    ``bytes_per_token`` is 1 for bytes and, for tokenizer ids, the validation
    targets' UTF-8 bytes per target token (eos not counted).  ``fingerprint``
    hashes all four sides and the vocabulary; ``source`` says how to rebuild:
    ``{"corpus": spec}`` plus ``tokenizer`` and ``tokenizer_fingerprint``.
    ``n_skipped`` counts the blank line pairs left out.
    """

    task: ClassVar[str] = "seq2seq"

    name: str
    train_pairs: Pairs
    val_pairs: Pairs
    base_vocab: int = VOCAB_SIZE
    bytes_per_token: float | None = 1.0
    fingerprint: str = ""  # computed from the pairs when not given
    source: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    n_skipped: int = 0

    def __post_init__(self) -> None:
        if not self.fingerprint:
            h = hashlib.sha256(f"seq2seq:{self.base_vocab}\n".encode())
            self.train_pairs.fingerprint_into(h)
            self.val_pairs.fingerprint_into(h)
            object.__setattr__(self, "fingerprint", "sha256:" + h.hexdigest()[:16])

    @property
    def vocab_size(self) -> int:
        return self.base_vocab + N_SPECIALS

    @property
    def pad_id(self) -> int:
        return self.base_vocab

    @property
    def bos_id(self) -> int:
        return self.base_vocab + 1

    @property
    def eos_id(self) -> int:
        return self.base_vocab + 2

    def describe(self) -> str:
        """One line for logs: what was loaded and how much of it."""
        unit = "bytes" if not self.source.get("tokenizer") else f"tokens, vocabulary {self.base_vocab:,}"
        skipped = f", {self.n_skipped:,} blank pairs skipped" if self.n_skipped else ""
        return (
            f"{self.name}: {len(self.train_pairs):,} train pairs, {len(self.val_pairs):,} validation pairs "
            f"({unit}; + pad, bos, eos{skipped})"
        )

    def record(self) -> dict[str, Any]:
        """What a study and an exported architecture file store about this corpus (as Corpus.record)."""
        return {"task": self.task, **corpus_record(self.name, self.source, self.vocab_size, self.fingerprint)}

    def batch(self, batch_size: int, seq_len: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Random training examples (with replacement, drawn from ``generator`` only); see :meth:`rows`."""
        idx = torch.randint(len(self.train_pairs), (batch_size,), generator=generator)
        return self.rows(self.train_pairs, idx, seq_len)

    def validation(self, n_examples: int, seq_len: int) -> tuple[Tensor, Tensor]:
        """The first ``n_examples`` validation examples (fewer if there are fewer), as :meth:`rows`."""
        if len(self.val_pairs) == 0:
            raise UserError(f"{self.name}: the validation split holds no examples")
        return self.rows(self.val_pairs, torch.arange(min(n_examples, len(self.val_pairs))), seq_len)

    def rows(self, pairs: Pairs, idx: Tensor, seq_len: int) -> tuple[Tensor, Tensor]:
        """x (B, 2T) = [src | tgt_in] and y (B, T), int64, for the examples ``idx`` of ``pairs``.

        src: the source cut to T, right-padded with pad; tgt_in: bos + target, cut
        to T, padded; y: target + eos, cut to T, padding IGNORE_INDEX (-100).
        """
        src = pad_rows(pairs.src, pairs.src_offsets, idx, seq_len, 0, self.pad_id)
        tgt_in = pad_rows(pairs.tgt, pairs.tgt_offsets, idx, seq_len, 1, self.pad_id)
        tgt_in[:, 0] = self.bos_id
        y = pad_rows(pairs.tgt, pairs.tgt_offsets, idx, seq_len, 0, IGNORE_INDEX)
        length = pairs.tgt_offsets[idx + 1] - pairs.tgt_offsets[idx]  # (B,)
        ends = (length < seq_len).nonzero().squeeze(1)  # rows whose eos fits
        y[ends, length[ends]] = self.eos_id
        return torch.cat([src, tgt_in], dim=1), y

    def scored_bytes_per_token(self, y: Tensor) -> float | None:
        """UTF-8 bytes per scored target of ``y`` (rows of :meth:`validation`), what turns its mean loss
        into bits per byte: an eos is scored but stands for no text, and padding is not scored.
        ``bytes_per_token`` (per target token, eos not counted) times the text tokens, over the scored."""
        if self.bytes_per_token is None:
            return None
        scored = int((y != IGNORE_INDEX).sum())
        text = int(((y != IGNORE_INDEX) & (y >= 0) & (y < self.base_vocab)).sum())
        return self.bytes_per_token * text / scored if scored else None

    def samples(self, k: int) -> list[tuple[str, str]]:
        """The first ``k`` validation pairs as text (source, target)."""
        n = min(k, len(self.val_pairs))
        pairs = self.val_pairs
        return [(self.decode(pairs.source(i)), self.decode(pairs.target(i))) for i in range(n)]

    def encode(self, text: str) -> list[int]:
        """Source text to ids (no specials)."""
        if self.source.get("tokenizer"):
            return list(_tokenizer(self.source["tokenizer"]).encode(text, add_special_tokens=False).ids)
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text; specials and any id >= base_vocab are dropped, invalid UTF-8 replaced."""
        kept = [int(i) for i in ids if 0 <= int(i) < self.base_vocab]
        if self.source.get("tokenizer"):
            return str(_tokenizer(self.source["tokenizer"]).decode(kept, skip_special_tokens=False))
        return bytes(kept).decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str) -> Any:
    from nas.data.tokenize import load_tokenizer

    return load_tokenizer(Path(path))[0]


# -- which specs name one ------------------------------------------------------------------------


def is_parallel_dir(path: Path) -> bool:
    """A directory that holds (or is meant to hold) a parallel corpus, or a tokenized cache of one."""
    return path.is_dir() and any((path / name).exists() for name in (*SIDES, PARALLEL_META))


def task_of(spec: str | os.PathLike[str] | None) -> str:
    """``"seq2seq"`` for the built-in parallel task and parallel directories, else ``"lm"``.

    Decided by the name and which files exist; no data is read.
    """
    if spec is not None and str(spec) == DEFAULT_PARALLEL:
        return "seq2seq"
    if spec is None or not str(spec).strip() or str(spec) == DEFAULT_CORPUS:
        return "lm"  # the default corpus's name wins over a directory of that name, as in load_corpus
    return "seq2seq" if is_parallel_dir(Path(spec).expanduser()) else "lm"


def sides_text() -> str:
    """The four files a parallel directory holds, for error messages."""
    return f"{', '.join(SIDES[:-1])} and {SIDES[-1]} (one example per line, aligned)"


# -- the built-in task ---------------------------------------------------------------------------


def reversed_pairs(text: str) -> list[tuple[str, str]]:
    """(line, line with its words in reverse order) for every line of ``text`` that qualifies.

    A line qualifies with at least 2 words and at most MAX_LINE_BYTES UTF-8 bytes
    once its words are joined by single spaces (the source the model sees); the
    target is the same words in reverse order, joined the same way.
    """
    pairs = []
    for line in text.splitlines():
        words = line.split()
        source = " ".join(words)
        if len(words) >= 2 and len(source.encode("utf-8")) <= MAX_LINE_BYTES:
            pairs.append((source, " ".join(reversed(words))))
    return pairs
