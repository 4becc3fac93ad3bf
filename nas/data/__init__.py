"""Corpora: byte-level text, token files, text through a local tokenizer, and parallel corpora.

``load_corpus(spec)`` is the one entry point; ``spec`` is ``None`` or
``"shakespeare"`` (the default corpus), a text file, a directory of text files
(:mod:`nas.data.text`, byte tokens, vocabulary 256), or a directory holding
``train.bin``, ``val.bin`` and ``meta.json`` (:mod:`nas.data.tokens`,
memory-mapped).  ``resolve_data(spec, tokenizer)`` turns a text corpus and a
``tokenizer.json`` into such a directory once (:mod:`nas.data.tokenize`).
Batches come from :mod:`nas.data.batches`.  Every :class:`Corpus` knows its
vocabulary size, its bytes per token and a fingerprint of its content
(:mod:`nas.data.corpus`).

``spec`` may also name a parallel corpus for a sequence-to-sequence task
(:mod:`nas.data.parallel`): ``"shakespeare-reversed"`` (built in) or a directory
holding ``train.src``, ``train.tgt``, ``val.src`` and ``val.tgt``; then
``load_corpus`` gives a :class:`ParallelCorpus` (loaded by :mod:`nas.data.parallel_files`)
and ``task_of(spec)`` is ``"seq2seq"``.  Both kinds have ``task``, ``batch``, ``validation``,
``record`` and ``describe``; :func:`train_batch` and :func:`validation_batches` call them.

JSON Lines, Parquet and ``datasets`` directories (:mod:`nas.data.records`) are streamed once into
cached token files (:mod:`nas.data.ingest`), through a tokenizer or as UTF-8 bytes, and load as those.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from nas.data.batches import decode, encode, get_batch, validation_windows
from nas.data.corpus import (
    DEFAULT_CORPUS,
    VOCAB_SIZE,
    Corpus,
    describe_record,
    same_data,
)
from nas.data.pairs import Pairs
from nas.data.parallel import (
    DEFAULT_PARALLEL,
    IGNORE_INDEX,
    N_SPECIALS,
    PARALLEL_META,
    SIDES,
    ParallelCorpus,
    is_parallel_dir,
    reversed_pairs,
    task_of,
)
from nas.data.parallel_files import load_parallel, read_parallel_meta, tokenize_parallel
from nas.data.records import DEFAULT_FIELD, is_records
from nas.data.text import SEPARATOR, load_text, split_documents, validation_indices
from nas.data.tokens import FILES as TOKEN_FILES
from nas.data.tokens import META as TOKEN_META
from nas.data.tokens import is_token_dir, load_token_dir, read_meta, write_token_dir
from nas.errors import UserError

__all__ = [
    "DEFAULT_CORPUS", "DEFAULT_PARALLEL", "IGNORE_INDEX", "N_SPECIALS", "SEPARATOR", "VOCAB_SIZE",
    "AnyCorpus", "Corpus", "Pairs", "ParallelCorpus", "cache_dir", "data_record", "decode",
    "describe_record", "encode", "get_batch", "is_parallel_dir", "load_corpus", "load_parallel",
    "resolve_data", "reversed_pairs", "same_data", "scored_bytes_per_token", "split_documents", "task_of",
    "train_batch", "validation_batches", "validation_indices", "validation_windows", "vocab_size_of",
    "write_token_dir",
]  # fmt: skip

AnyCorpus = Corpus | ParallelCorpus


def _check_spec(spec: str | os.PathLike[str] | None) -> None:
    if spec is not None and not str(spec).strip():
        # Path("") is the current directory: an empty --data would train on whatever is there.
        raise UserError(
            f"--data is empty; give '{DEFAULT_CORPUS}', a text file, a directory of text files, "
            "JSON Lines or Parquet files (or a directory of them), a datasets save_to_disk directory, "
            f"a token-file directory, '{DEFAULT_PARALLEL}' or a parallel corpus directory "
            "(or leave it out for the default)"
        )
    if spec is None or str(spec) in (DEFAULT_CORPUS, DEFAULT_PARALLEL):
        return
    path = Path(spec).expanduser()
    if is_token_dir(path) and is_parallel_dir(path):  # which one was meant? never guessed silently
        kinds = (*TOKEN_FILES, TOKEN_META, *SIDES, PARALLEL_META)
        have = sorted(p.name for p in path.iterdir() if p.name in kinds)
        raise UserError(
            f"{spec}: holds two kinds of corpus ({', '.join(have)}): token files (train.bin, val.bin, "
            "meta.json) and a parallel corpus (train.src, train.tgt, ...); give a directory that holds one"
        )


def load_corpus(spec: str | os.PathLike[str] | None = None) -> AnyCorpus:
    """The corpus named by ``spec`` (see the module docstring); mistakes raise one-line UserErrors."""
    _check_spec(spec)
    _note(spec)
    if task_of(spec) == "seq2seq":
        return load_parallel(spec)
    if spec is not None and str(spec) != DEFAULT_CORPUS:
        path = Path(spec).expanduser()
        if is_token_dir(path):
            try:
                return load_token_dir(path)
            except UserError as err:
                raise _cache_hint(err, path) from None
        if is_records(path):  # as UTF-8 bytes; resolve_data first for a tokenizer or another field
            return load_corpus(resolve_data(spec))
    return load_text(spec)


def _note(spec: str | os.PathLike[str] | None) -> None:
    """Mark the corpus's file or directory as an input of this process: no output goes there
    (:func:`nas.files.outputs.note_input`)."""
    from nas.files.outputs import note_input

    if spec is not None and str(spec) not in (DEFAULT_CORPUS, DEFAULT_PARALLEL):
        note_input(spec, "corpus")


def _cache_hint(err: UserError, path: Path) -> UserError:
    """``err`` about ``path``, with what fixes it when ``path`` is an entry of this tool's cache (a corpus
    it tokenized): deleting the entry, which the next run makes again."""
    from nas.files.outputs import cache_dir

    try:
        inside = path.resolve().is_relative_to(cache_dir().resolve())
    except OSError:
        inside = False
    if not inside:
        return err
    return UserError(f"{err}; {path} is this tool's cache of a tokenized corpus: delete it and the next run "
                     "tokenizes the corpus again")  # fmt: skip


def resolve_data(
    spec: str | os.PathLike[str] | None,
    tokenizer: str | os.PathLike[str] | None = None,
    text_field: str = DEFAULT_FIELD,
    on_bad_record: str = "refuse",
) -> str | None:
    """The spec to load: ``spec`` itself, or with a tokenizer the cached token directory of its text;
    a records corpus (JSON Lines, Parquet, datasets) always its cached token directory, whose text is
    ``text_field`` of each record, bad records refused or skipped by ``on_bad_record``.

    Tokenizing happens here, once per (tokenizer, text) pair, so a search does it
    in the driver before any worker starts and workers memory-map the result.
    A parallel corpus goes to its tokenized copy (:mod:`nas.data.parallel_files`).
    """
    _check_spec(spec)
    # noted here too: a records corpus, or a parallel one through a tokenizer, never passes load_corpus
    _note(spec)
    path = Path(spec).expanduser() if spec is not None and task_of(spec) == "lm" else None
    if path is not None and str(spec) != DEFAULT_CORPUS and not is_token_dir(path) and is_records(path):
        from nas.data.ingest import tokenize_records

        return str(tokenize_records(spec, tokenizer, text_field, on_bad_record))  # type: ignore[arg-type]
    if text_field != DEFAULT_FIELD or on_bad_record != "refuse":
        given = "data.text_field" if text_field != DEFAULT_FIELD else "data.on_bad_record"
        raise UserError(f"{given} applies to JSON Lines, Parquet and datasets corpora; "
                        f"{spec or DEFAULT_CORPUS} is none (drop {given})")  # fmt: skip
    if tokenizer is None:
        return None if spec is None else str(spec)
    if not str(tokenizer).strip():
        raise UserError("--tokenizer is empty; give the path of a tokenizer.json")
    if task_of(spec) == "seq2seq":
        return str(tokenize_parallel(load_parallel(spec), tokenizer))
    from nas.data.tokenize import tokenize_corpus  # imports tokenizers only when asked for

    text = load_corpus(spec)
    assert isinstance(text, Corpus)  # task_of said lm
    return str(tokenize_corpus(text, tokenizer))


def data_record(spec: str | os.PathLike[str] | None) -> dict[str, Any]:
    """What a study records about its data: :meth:`Corpus.record` of the corpus ``spec`` names."""
    return load_corpus(spec).record()


def vocab_size_of(spec: str | os.PathLike[str] | None) -> int:
    """The model vocabulary of the corpus ``spec`` names, from meta.json alone (no data is read).

    For a parallel corpus it includes pad, bos and eos (:attr:`ParallelCorpus.vocab_size`).
    """
    if task_of(spec) == "seq2seq":
        path = Path(str(spec)).expanduser()
        if str(spec) != DEFAULT_PARALLEL and (path / PARALLEL_META).is_file():
            return int(read_parallel_meta(path)["vocab_size"]) + N_SPECIALS
        return VOCAB_SIZE + N_SPECIALS
    if spec is not None and str(spec) != DEFAULT_CORPUS and is_token_dir(Path(spec).expanduser()):
        return int(read_meta(Path(spec).expanduser())["vocab_size"])
    return VOCAB_SIZE


def train_batch(
    corpus: Any, batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """A training batch of any corpus: its ``batch`` method, or :func:`get_batch` on ``corpus.train``.

    The fallback serves test doubles that only carry ``train``/``val`` tensors.
    """
    if hasattr(corpus, "batch"):
        return corpus.batch(batch_size, seq_len, generator)
    return get_batch(corpus.train, batch_size, seq_len, generator)


def validation_batches(corpus: Any, n: int, seq_len: int) -> tuple[Tensor, Tensor]:
    """The fixed validation set of any corpus: its ``validation`` method, or windows of ``corpus.val``."""
    if hasattr(corpus, "validation"):
        return corpus.validation(n, seq_len)
    return validation_windows(corpus.val, n, seq_len)


def scored_bytes_per_token(corpus: Any, y: Tensor) -> float | None:
    """Bytes of text per scored target of the validation targets ``y``: what the mean validation loss is
    divided by (with ln 2) to give bits per byte.  A parallel corpus's own (an eos is scored but is no
    text), else the corpus's ``bytes_per_token`` (1 for bytes; None when not known)."""
    if hasattr(corpus, "scored_bytes_per_token"):
        return corpus.scored_bytes_per_token(y)
    return getattr(corpus, "bytes_per_token", 1.0)
