"""Corpora: byte-level text, token files, and text through a local tokenizer.

``load_corpus(spec)`` is the one entry point; ``spec`` is ``None`` or
``"shakespeare"`` (the default corpus), a text file, a directory of text files
(:mod:`nas.data.text`, byte tokens, vocabulary 256), or a directory holding
``train.bin``, ``val.bin`` and ``meta.json`` (:mod:`nas.data.tokens`,
memory-mapped).  ``resolve_data(spec, tokenizer)`` turns a text corpus and a
``tokenizer.json`` into such a directory once (:mod:`nas.data.tokenize`).
Batches come from :mod:`nas.data.batches`.  Every :class:`Corpus` knows its
vocabulary size, its bytes per token and a fingerprint of its content
(:mod:`nas.data.corpus`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nas.data.batches import decode, encode, get_batch, validation_windows
from nas.data.corpus import (
    DEFAULT_CORPUS,
    VOCAB_SIZE,
    Corpus,
    cache_dir,
    describe_record,
    same_data,
)
from nas.data.text import SEPARATOR, load_text, split_documents, validation_indices
from nas.data.tokens import is_token_dir, load_token_dir, read_meta, write_token_dir
from nas.errors import UserError

__all__ = [
    "DEFAULT_CORPUS", "SEPARATOR", "VOCAB_SIZE", "Corpus", "cache_dir", "data_record", "decode",
    "describe_record", "encode", "get_batch", "load_corpus", "resolve_data", "same_data",
    "split_documents", "validation_indices", "validation_windows", "vocab_size_of", "write_token_dir",
]  # fmt: skip


def _check_spec(spec: str | os.PathLike[str] | None) -> None:
    if spec is not None and not str(spec).strip():
        # Path("") is the current directory: an empty --data would train on whatever is there.
        raise UserError(
            f"--data is empty; give '{DEFAULT_CORPUS}', a text file, a directory of text files, "
            "or a token-file directory (or leave it out for the default)"
        )


def load_corpus(spec: str | os.PathLike[str] | None = None) -> Corpus:
    """The corpus named by ``spec`` (see the module docstring); mistakes raise one-line UserErrors."""
    _check_spec(spec)
    if spec is not None and str(spec) != DEFAULT_CORPUS:
        path = Path(spec).expanduser()
        if is_token_dir(path):
            return load_token_dir(path)
    return load_text(spec)


def resolve_data(
    spec: str | os.PathLike[str] | None, tokenizer: str | os.PathLike[str] | None = None
) -> str | None:
    """The spec to load: ``spec`` itself, or with a tokenizer the cached token directory of its text.

    Tokenizing happens here, once per (tokenizer, text) pair, so a search does it
    in the driver before any worker starts and workers memory-map the result.
    """
    _check_spec(spec)
    if tokenizer is None:
        return None if spec is None else str(spec)
    if not str(tokenizer).strip():
        raise UserError("--tokenizer is empty; give the path of a tokenizer.json")
    from nas.data.tokenize import tokenize_corpus  # imports tokenizers only when asked for

    return str(tokenize_corpus(load_corpus(spec), tokenizer))


def data_record(spec: str | os.PathLike[str] | None) -> dict[str, Any]:
    """What a study records about its data: :meth:`Corpus.record` of the corpus ``spec`` names."""
    return load_corpus(spec).record()


def vocab_size_of(spec: str | os.PathLike[str] | None) -> int:
    """The vocabulary of the corpus ``spec`` names, from meta.json alone (no data is read)."""
    if spec is not None and str(spec) != DEFAULT_CORPUS and is_token_dir(Path(spec).expanduser()):
        return int(read_meta(Path(spec).expanduser())["vocab_size"])
    return VOCAB_SIZE
