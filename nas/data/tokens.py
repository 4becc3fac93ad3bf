"""Token-file corpora: ``train.bin``, ``val.bin`` and ``meta.json`` in one directory.

The format nanoGPT and llm.c users already have: raw little-endian token ids,
``uint16`` (vocabularies up to 65,536) or ``uint32``, and ``meta.json`` with at
least ``{"vocab_size": N, "dtype": "uint16"}``, optionally ``"bytes_per_token"``
(so bits per byte can be reported), ``"name"`` and ``"source"`` (written by
:mod:`nas.data.tokenize`).  An optional ``val_bytes.bin`` (little-endian uint64, one per validation
token: the bytes of text up to that token's end, as :mod:`nas.data.tokenize` writes it) makes bits
per byte exact for the windows scored; without it they use ``bytes_per_token``, the validation text's
average.

The files are memory-mapped (numpy copy-on-write maps wrapped as tensors), never
read whole: a 50 GB corpus needs the pages that batches touch, not 50 GB of RAM.
Checks made on loading, each a one-line :class:`UserError`: meta.json present and
valid, a known dtype wide enough for the vocabulary, sizes a multiple of the
dtype, neither file empty, and no id >= vocab_size in every id of files up to
:data:`FULL_CHECK` tokens, or in :data:`SAMPLE_CHUNKS` evenly spaced chunks of
:data:`CHUNK` tokens of bigger ones (about a million ids: milliseconds, not a
pass over 50 GB).  An out-of-range id outside the sample is caught by the
model's embedding when a batch reaches it.  ``val_bytes.bin``, when there is one, must hold one
end per validation token, never decreasing (checked in the same stretches) and rising somewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nas.data.corpus import Corpus, written_whole
from nas.errors import UserError
from nas.redact import one_line
from nas.validate import MAX_DIM, not_a_file, read_json_file

META = "meta.json"
FILES = ("train.bin", "val.bin")
#: optional: per validation token, the bytes of text up to its end (uint64), for exact bits per byte
VAL_BYTES = "val_bytes.bin"
DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
FULL_CHECK = 1 << 22  # ids checked one by one up to this many tokens per file
CHUNK = 1 << 14  # tokens per sampled chunk above it
SAMPLE_CHUNKS = 64
_HASH_CHUNK = 1 << 20  # bytes per fingerprint chunk
_HASH_WHOLE = 64 << 20  # files up to this size are hashed whole
#: what a valid meta.json is, for the end of each error line about one
META_VALID = (
    'a token directory\'s meta.json is a UTF-8 JSON object such as {"vocab_size": 50257, "dtype": "uint16"} '
    "(dtype uint16 or uint32), beside train.bin and val.bin"
)


def is_token_dir(path: Path) -> bool:
    """A directory that holds (or is meant to hold) token files rather than text."""
    return path.is_dir() and any((path / name).exists() for name in (META, *FILES))


#: the fewest bytes of text a token may stand for (a byte-level token is 1; below a thousandth, no text)
MIN_BYTES_PER_TOKEN = 1e-3
#: what meta.json may hold that this tool reads; any other key is named when the corpus is described
META_KEYS = ("vocab_size", "dtype", "bytes_per_token", "name", "source", "records", "bad_records")


def read_meta(path: Path) -> dict[str, Any]:
    """meta.json of a token directory, checked: vocab_size, dtype, bytes_per_token."""
    meta_path = path / META
    meta = read_json_file(meta_path, META_VALID)
    if not isinstance(meta, dict):
        raise UserError(f"{meta_path}: is a JSON {type(meta).__name__}, not an object; {META_VALID}")
    vocab = meta.get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise UserError(f"{meta_path}: vocab_size must be a positive integer, got {vocab!r}")
    dtype = meta.get("dtype")
    if dtype not in DTYPES:
        raise UserError(f"{meta_path}: unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    if vocab > MAX_DIM:  # uint32 holds ids to 2**32 - 1, but no embedding of that many rows can be indexed
        raise UserError(f"{meta_path}: vocab_size {vocab:,} is more than a model's vocabulary can be "
                        f"({MAX_DIM:,}, a tensor dimension torch indexes)")  # fmt: skip
    limit = int(np.iinfo(DTYPES[dtype]).max) + 1
    if vocab > limit:
        raise UserError(
            f"{meta_path}: dtype {dtype} holds ids below {limit:,}, too few for vocab_size {vocab:,}; "
            "use uint32"
        )
    if meta.get("name") is not None and not isinstance(meta["name"], str):  # printed and recorded as the name
        raise UserError(f"{meta_path}: name must be a string, got {meta['name']!r}")
    bpt = meta.get("bytes_per_token")
    if bpt is not None and (
        isinstance(bpt, bool) or not isinstance(bpt, (int, float)) or not MIN_BYTES_PER_TOKEN <= bpt < 1e6
    ):  # a tiny one (1e-300) made bits per byte infinite
        raise UserError(
            f"{meta_path}: bytes_per_token must be a number of bytes from {MIN_BYTES_PER_TOKEN:g} to 1e6 "
            f"(the text one token stands for), got {bpt!r}"
        )
    return meta


def load_token_dir(path: Path) -> Corpus:
    """The memory-mapped corpus in a token directory (see the module docstring for the checks)."""
    meta = read_meta(path)
    dtype = DTYPES[meta["dtype"]]
    vocab = int(meta["vocab_size"])
    parts = [_map(path / name, dtype) for name in FILES]
    for name, part in zip(FILES, parts, strict=True):
        if len(part) == 0:
            raise UserError(f"{path / name}: is empty; a token corpus needs training and validation tokens")
        _check_ids(part, vocab, path / name)
    source = meta.get("source") if isinstance(meta.get("source"), Mapping) else {}
    bpt = meta.get("bytes_per_token")
    return Corpus(
        val_byte_ends=_byte_ends(path / VAL_BYTES, len(parts[1])),
        # one line when printed: a newline or a terminal escape in the file's name is shown escaped
        name=one_line(str(meta.get("name") or path)),
        left_out=tuple(f"meta.json's {one_line(str(k))!r} (not read)" for k in meta if k not in META_KEYS),
        train=parts[0],
        val=parts[1],
        n_docs=0,
        val_docs=(),
        vocab_size=vocab,
        bytes_per_token=float(bpt) if bpt is not None else None,
        fingerprint=token_fingerprint(path, meta),
        source={"corpus": str(path.resolve()), **source},
    )


def _byte_ends(file: Path, n_val: int) -> Tensor | None:
    """``val_bytes.bin`` memory-mapped, or None when the directory has none."""
    if not file.exists():
        return None
    problem = not_a_file(file)  # a directory or FIFO of that name was skipped without a word
    if problem:
        raise UserError(f"{file}: {problem}; it is optional (one little-endian uint64 per validation token)")
    if file.stat().st_size != 8 * n_val:
        raise UserError(
            f"{file}: {file.stat().st_size:,} bytes, not 8 per validation token ({n_val:,} of them); "
            "it belongs to other tokens: delete it (bits per byte then use meta.json's bytes_per_token)"
        )
    ends = np.memmap(file, dtype=np.dtype("<u8"), mode="c").view(np.int64)
    # what bits per byte divide by: ends that fall (or pass 2**63, negative here) gave a negative bits per
    # byte, and ends that never rise a division by zero after the training
    damaged = "damaged or of other tokens: delete it (bits per byte then use meta.json's bytes_per_token)"
    last = 0
    for a, b in _spans(n_val):
        part = ends[a:b]
        falls = np.flatnonzero(np.diff(part, prepend=last) < 0)
        if len(falls):
            where = a + int(falls[0])
            raise UserError(
                f"{file}: token {where:,} ends at byte {int(ends[where]):,}, before the token (or the start) "
                f"before it: {damaged}"
            )
        last = int(part[-1])
    if n_val > 1 and ends[-1] <= ends[0]:
        raise UserError(f"{file}: every validation token ends at byte {int(ends[0]):,} (none holds text): "
                        f"{damaged}")  # fmt: skip
    return torch.from_numpy(ends)


def _spans(n: int) -> list[tuple[int, int]]:
    """The stretches of a file of ``n`` values that loading checks: all of it up to :data:`FULL_CHECK`,
    else :data:`SAMPLE_CHUNKS` evenly spaced chunks of :data:`CHUNK` values."""
    if n <= FULL_CHECK:
        return [(0, n)]
    starts = np.linspace(0, n - CHUNK, SAMPLE_CHUNKS).astype(np.int64)
    return [(int(s), int(s) + CHUNK) for s in starts]


def _map(file: Path, dtype: np.dtype) -> Tensor:
    if not file.is_file():
        what = "not a regular file" if file.exists() else "missing"
        raise UserError(f"{file}: {what}; a token-file directory holds {', '.join(FILES)} and {META}")
    size = file.stat().st_size
    if size % dtype.itemsize:
        raise UserError(
            f"{file}: {size:,} bytes is not a multiple of {dtype.itemsize} ({dtype.name} ids); "
            "is meta.json's dtype right, or the file truncated?"
        )
    if size == 0:
        return torch.empty(0, dtype=torch.uint16 if dtype.itemsize == 2 else torch.uint32)
    # Copy-on-write ("c"): pages are read from the file on first touch and never written
    # back, so the tensor is writable as torch expects without risking the file.
    array = np.memmap(file, dtype=dtype, mode="c")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about uint16/uint32 support being limited
        return torch.from_numpy(array)


def _check_ids(part: Tensor, vocab: int, file: Path) -> None:
    """No id >= vocab in all of a small file, or in a bounded sample of chunks of a big one."""
    array = part.numpy()
    for a, b in _spans(len(part)):
        top = int(array[a:b].max())
        if top >= vocab:
            where = a + int(np.argmax(array[a:b] >= vocab))
            raise UserError(
                f"{file}: token id {top:,} at position {where:,} is >= vocab_size {vocab:,} (meta.json); "
                "the vocabulary or the dtype in meta.json is wrong"
            )


def token_fingerprint(path: Path, meta: Mapping[str, Any]) -> str:
    """A hash of the tokens: meta's vocab_size and dtype, the file sizes, and their content.

    Files up to 64 MiB are hashed whole.  Bigger ones are hashed from their first and
    last MiB and 62 evenly spaced MiB between, so a 50 GB corpus is identified in
    milliseconds; two corpora of the same sizes that differ only between those
    samples would share a fingerprint, which for real token files does not happen
    by accident.  ``name`` and ``source`` are left out: they say where the tokens
    came from, not what they are.
    """
    h = hashlib.sha256(f"{meta['vocab_size']}:{meta['dtype']}\n".encode())
    for name in FILES:
        file = path / name
        size = file.stat().st_size
        h.update(f"{name}:{size}\n".encode())
        with open(file, "rb") as f:
            if size <= _HASH_WHOLE:
                h.update(f.read())
                continue
            for offset in np.linspace(0, size - _HASH_CHUNK, SAMPLE_CHUNKS).astype(np.int64):
                f.seek(int(offset))
                h.update(f.read(_HASH_CHUNK))
    return "sha256:" + h.hexdigest()[:16]


def write_token_dir(
    path: str | os.PathLike[str],
    train: np.ndarray,
    val: np.ndarray,
    vocab_size: int,
    val_byte_ends: np.ndarray | None = None,
    **meta: Any,
) -> Path:
    """Write ``train``/``val`` ids as a token directory (dtype chosen from the vocabulary), and
    ``val_byte_ends`` as :data:`VAL_BYTES` when given.

    Written into a temporary sibling and renamed, so a reader sees the whole
    directory or none.  ``meta`` adds fields (``bytes_per_token``, ``name``, ``source``).
    """
    path = Path(path)  # a str as the docs write it ('data/owt') is a path like any other
    dtype_name = "uint16" if vocab_size <= 1 << 16 else "uint32"
    files = [(name, ids, DTYPES[dtype_name]) for name, ids in zip(FILES, (train, val), strict=True)]
    if val_byte_ends is not None:
        files.append((VAL_BYTES, val_byte_ends, np.dtype("<u8")))
    with written_whole(path) as tmp:
        for name, ids, dtype in files:
            # a Python file, not ndarray.tofile: a full disk then raises OSError with its errno (ENOSPC,
            # EFBIG), which the CLI turns into one line; tofile's says only "N requested and M written"
            data = np.ascontiguousarray(np.asarray(ids).astype(dtype))
            with open(tmp / name, "wb") as f:
                f.write(data.data)
        doc = {"vocab_size": vocab_size, "dtype": dtype_name, **meta}
        (tmp / META).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path
