"""The :class:`Corpus` every source produces, its content fingerprint, and the cache directory.

A corpus is identified by what it holds, not by the path it was read from: a
study records :meth:`Corpus.record` (name, vocabulary, fingerprint, tokenizer),
continues only on data with the same fingerprint (:func:`same_data`), and an
exported architecture file carries the same record so ``train --arch`` can find
and check its data again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from nas.data.batches import get_batch, validation_windows
from nas.files.outputs import partial
from nas.interrupts import held
from nas.plural import plural

DEFAULT_CORPUS = "shakespeare"
DEFAULT_PARALLEL = "shakespeare-reversed"  # the built-in seq2seq task (nas.data.parallel)
VOCAB_SIZE = 256  # byte-level tokens


@dataclasses.dataclass(frozen=True, eq=False)
class Corpus:
    """Token ids for training and validation, with what they are and where they came from.

    ``train`` and ``val`` are 1-D tensors: uint8 bytes for text corpora (held in
    memory), uint16 or uint32 ids memory-mapped from token files (never read
    whole).  ``bytes_per_token`` turns nats per token into bits per byte: exactly
    1 for byte corpora, measured on the text for tokenized ones, None when
    unknown.  ``fingerprint`` is a hash of the content (see :func:`bytes_fingerprint`
    and :func:`nas.data.tokens.load_token_dir`); ``source`` says how to rebuild it:
    ``{"corpus": spec}`` plus ``tokenizer`` and ``tokenizer_fingerprint`` when a
    tokenizer made it.
    """

    task: ClassVar[str] = "lm"  # what a model trained on it predicts (ParallelCorpus: "seq2seq")

    name: str
    train: Tensor  # (N_train,) token ids
    val: Tensor  # (N_val,) token ids
    n_docs: int  # 0 for token files (documents are not known there)
    val_docs: tuple[str, ...]  # names of the held-out documents (empty: byte-split single document)
    vocab_size: int = VOCAB_SIZE
    bytes_per_token: float | None = 1.0
    fingerprint: str = ""  # computed from train and val when not given
    source: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    left_out: tuple[str, ...] = ()  # files of a corpus directory left out, each with why
    #: per validation token, the bytes of text up to its end (nas.data.tokens.VAL_BYTES), or None
    val_byte_ends: Tensor | None = None

    def __post_init__(self) -> None:
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", bytes_fingerprint(self.train, self.val))

    @property
    def is_bytes(self) -> bool:
        return self.train.dtype == torch.uint8

    def describe(self) -> str:
        """One line for logs: what was loaded and how much of it."""
        if self.is_bytes:
            held = plural(len(self.val_docs), "held-out document") if self.val_docs else "last 10% held out"
            line = (
                f"{self.name}: {plural(self.n_docs, 'document')}, {len(self.train):,} train bytes, "
                f"{len(self.val):,} validation bytes ({held})"
            )
            if self.left_out:  # never silently: each file left out, with why (the first few named)
                more = f", and {len(self.left_out) - 3} more" if len(self.left_out) > 3 else ""
                line += f"; left out {len(self.left_out)} file(s): {', '.join(self.left_out[:3])}{more}"
            return line
        bpt = f", {self.bytes_per_token:.3g} bytes/token" if self.bytes_per_token else ""
        dtype = str(self.train.dtype).removeprefix("torch.")
        unread = f"; left out {', '.join(self.left_out)}" if self.left_out else ""  # never silently
        return (
            f"{self.name}: {len(self.train):,} train tokens, {len(self.val):,} validation tokens, "
            f"vocabulary {self.vocab_size:,}{bpt} (memory-mapped {dtype}){unread}"
        )

    def batch(self, batch_size: int, seq_len: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Random training windows: :func:`nas.data.batches.get_batch` on ``train`` (the same draws)."""
        return get_batch(self.train, batch_size, seq_len, generator)

    def validation(self, n_windows: int, seq_len: int) -> tuple[Tensor, Tensor]:
        """The fixed validation slice: :func:`nas.data.batches.validation_windows` on ``val``."""
        return validation_windows(self.val, n_windows, seq_len)

    def scored_bytes_per_token(self, y: Tensor) -> float | None:
        """Bytes of text per target of the validation targets ``y`` (:meth:`validation`'s, the tokens
        1 to N of ``val``): exact where the byte ends are known, else ``bytes_per_token``."""
        n = y.numel()
        if self.val_byte_ends is None or n == 0:
            return self.bytes_per_token
        return float(self.val_byte_ends[n] - self.val_byte_ends[0]) / n

    def record(self) -> dict[str, Any]:
        """What a study and an exported architecture file store about this corpus."""
        return corpus_record(self.name, self.source, self.vocab_size, self.fingerprint)


def corpus_record(name: str, source: Mapping[str, Any], vocab_size: int, fingerprint: str) -> dict[str, Any]:
    """A corpus's record (:meth:`Corpus.record`): how to find it again and what it holds."""
    rec: dict[str, Any] = {
        "corpus": source.get("corpus", name),
        "name": name,
        "vocab_size": vocab_size,
        "fingerprint": fingerprint,
    }
    # how the text was read when not as by default (nas.data.ingest): a retrain must read it so again
    for key in ("tokenizer", "tokenizer_fingerprint", "text_field", "on_bad_record"):
        if source.get(key):
            rec[key] = source[key]
    return rec


@contextlib.contextmanager
def written_whole(out: Path) -> Iterator[Path]:
    """A temporary sibling directory to fill, renamed to ``out`` when the block ends, so a
    reader sees the whole directory or none; removed if the block raises."""
    with partial(out.parent, out.name, directory=True) as tmp:
        yield tmp
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is shared like any other
        with held():  # the unfinished entry set aside and the new one in place, or neither
            if out.exists():  # an entry left unfinished (its metadata file missing): this one replaces it
                with partial(out.parent, out.name, directory=True) as aside:
                    os.replace(out, aside / "entry")
                    os.replace(tmp, out)
            else:
                os.replace(tmp, out)


def bytes_fingerprint(train: Tensor, val: Tensor) -> str:
    """sha256 of every token of an in-memory corpus, with the split point (16 hex digits)."""
    h = hashlib.sha256(f"{train.dtype}:{len(train)}:{len(val)}\n".encode())
    for part in (train, val):
        if len(part):
            h.update(memoryview(part.contiguous().numpy()))
    return "sha256:" + h.hexdigest()[:16]


def same_data(old: Any, new: Mapping[str, Any]) -> bool:
    """Whether ``new`` (a :meth:`Corpus.record`) is the data a study recorded as ``old``.

    Records are compared by fingerprint, so the same text under another path is the
    same data and other text under the same path is not.  Studies made before
    fingerprints recorded the ``--data`` string (None or ``shakespeare`` for the
    default); those compare by the resolved path.
    """
    if isinstance(old, Mapping):
        return bool(old.get("fingerprint")) and old.get("fingerprint") == new.get("fingerprint")
    if new.get("tokenizer"):
        return False
    if old in (None, DEFAULT_CORPUS):
        return new.get("corpus") == DEFAULT_CORPUS
    return isinstance(old, str) and str(Path(old).expanduser().resolve()) == new.get("corpus")


def describe_record(rec: Any) -> str:
    """A record (or a legacy path string) in a few words, for error messages."""
    if not isinstance(rec, Mapping):
        return repr(rec or DEFAULT_CORPUS)
    tok = f" tokenized by {rec['tokenizer']}" if rec.get("tokenizer") else ""
    return f"{rec.get('corpus')}{tok} (vocabulary {rec.get('vocab_size')}, {rec.get('fingerprint')})"


class file_lock:
    """An exclusive advisory lock (POSIX ``flock``), so concurrent processes build a cache entry once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> file_lock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: atomic writes still keep readers safe
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
