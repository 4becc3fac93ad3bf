"""Loading parallel corpora: the built-in task, the four text files, and their tokenized copy in the cache.

:func:`load_parallel` is the entry point: ``None`` or ``shakespeare-reversed`` (the
built-in task, made from the default corpus by :func:`nas.data.parallel.reversed_pairs`),
a directory of text files (the rules are in :mod:`nas.data.parallel`), or a
tokenized copy of either.

``--data DIR --tokenizer tok.json`` on a parallel directory (or the built-in
task) encodes every example once, source and target separately and without
special tokens, into ``cache_dir()/parallel/<tokenizer hash>-<text fingerprint>/``:
``parallel.json`` (vocabulary, dtype, name, source) and ``pairs.npz`` (each
side's ids end to end and the offsets where examples start).  Search workers
and retrains load that directory; it is a parallel corpus like any other
(:func:`nas.data.parallel.is_parallel_dir`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nas.data.corpus import written_whole
from nas.data.pairs import Pairs
from nas.data.parallel import (
    DEFAULT_PARALLEL,
    PARALLEL_META,
    SIDES,
    ParallelCorpus,
    reversed_pairs,
    sides_text,
)
from nas.errors import UserError
from nas.plural import plural
from nas.validate import not_a_file, read_json_file, utf16_text

PAIRS_FILE = "pairs.npz"
_FORMAT = "nas-lm-parallel/1"
_DTYPES = {"uint16": np.uint16, "uint32": np.uint32}
_MAX_VOCAB = (1 << 31) - 1 - 3  # ids and the three specials are int32 in memory

_MEMO: dict[str, ParallelCorpus] = {}


def load_parallel(spec: str | os.PathLike[str] | None) -> ParallelCorpus:
    """The parallel corpus ``spec`` names: None or ``shakespeare-reversed`` (built-in), or a directory."""
    if spec is None or str(spec) == DEFAULT_PARALLEL:
        if DEFAULT_PARALLEL not in _MEMO:
            _MEMO[DEFAULT_PARALLEL] = _load_reversed()
        return _MEMO[DEFAULT_PARALLEL]
    path = Path(spec).expanduser()
    if (path / PARALLEL_META).exists():
        return load_parallel_cache(path)
    if not path.is_dir():
        what = "not found" if not path.exists() else "not a directory"
        raise UserError(f"{path}: {what}; a parallel corpus is a directory holding {sides_text()}")
    return read_parallel_text(path)


# -- the built-in task ---------------------------------------------------------------------------


def _load_reversed() -> ParallelCorpus:
    from nas.data.text import SEPARATOR, load_text

    corpus = load_text(None)
    splits = []
    for part in (corpus.train, corpus.val):
        docs = bytes(part.numpy()).split(SEPARATOR)
        pairs = [p for doc in docs for p in reversed_pairs(doc.decode("utf-8"))]
        srcs, tgts = [s.encode("utf-8") for s, _ in pairs], [t.encode("utf-8") for _, t in pairs]
        splits.append(Pairs.from_sequences(srcs, tgts, torch.uint8))
    return ParallelCorpus(DEFAULT_PARALLEL, splits[0], splits[1], source={"corpus": DEFAULT_PARALLEL})


# -- text ----------------------------------------------------------------------------------------


def read_parallel_text(path: Path) -> ParallelCorpus:
    """The byte-level parallel corpus in ``path`` (see :mod:`nas.data.parallel` for the rules)."""
    for name in SIDES:
        problem = not_a_file(path / name)  # a directory of that name was called missing
        if problem:
            raise UserError(f"{path / name}: {problem}; a parallel corpus directory holds {sides_text()}")
    lines = {name: _read_lines(path / name) for name in SIDES}
    splits, skipped = [], 0
    for split, what in (("train", "training"), ("val", "validation")):
        src_name, tgt_name = f"{split}.src", f"{split}.tgt"
        src, tgt = lines[src_name], lines[tgt_name]
        if len(src) != len(tgt):
            raise UserError(
                f"{path}: {src_name} has {plural(len(src), 'line', fmt=',')} "
                f"but {tgt_name} has {len(tgt):,}; "
                "the two sides must be aligned line by line"
            )
        keep = []
        for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
            blank_s, blank_t = not s.strip(), not t.strip()
            if blank_s and blank_t:
                skipped += 1
            elif blank_s or blank_t:
                blank, other = (src_name, tgt_name) if blank_s else (tgt_name, src_name)
                raise UserError(
                    f"{path / blank}: line {i + 1} is blank but line {i + 1} of {other} is not; "
                    "aligned examples need both sides (pairs blank on both sides are skipped)"
                )
            else:
                keep.append(i)
        if not keep:
            raise UserError(
                f"{path}: the {what} split ({src_name}, {tgt_name}) holds no examples "
                "(pairs blank on both sides are skipped)"
            )
        splits.append(Pairs.from_sequences([src[i] for i in keep], [tgt[i] for i in keep], torch.uint8))
    source = {"corpus": str(path.resolve())}  # absolute: a record must find it again from any directory
    return ParallelCorpus(str(path), splits[0], splits[1], source=source, n_skipped=skipped)


def _read_lines(file: Path) -> list[bytes]:
    """The lines of a UTF-8 file (no line ends; a final newline does not start a line)."""
    try:
        data = file.read_bytes()
    except OSError as err:
        raise UserError(f"{file}: cannot read it: {err.strerror or err}") from None
    wide = utf16_text(data)
    if wide:
        raise UserError(f"{file}: {wide}")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise UserError(
            f"{file}: line {line} is not valid UTF-8 (byte 0x{data[err.start]:02x}, "
            f"byte {column} of the line)"
        ) from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


# -- the tokenized cache -------------------------------------------------------------------------


def tokenize_parallel(corpus: ParallelCorpus, tokenizer_path: str | os.PathLike[str]) -> Path:
    """The cached tokenized copy of ``corpus`` (bytes) through the tokenizer file, made once."""
    from nas.data.tokenize import cached_tokenization

    path = Path(tokenizer_path).expanduser()

    def write(out: Path, tokenizer: Any, source: dict[str, str]) -> None:
        _write(out, corpus, tokenizer, path, source)

    return cached_tokenization(
        "parallel",
        PARALLEL_META,
        corpus.name,
        corpus.source,
        corpus.fingerprint,
        not corpus.source.get("tokenizer"),
        tokenizer_path,
        write,
    )


def _write(out: Path, corpus: ParallelCorpus, tokenizer: Any, tok_path: Path, source: dict[str, str]) -> None:
    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    if vocab > _MAX_VOCAB:
        raise UserError(f"--tokenizer {tok_path}: vocabulary {vocab:,} is over the {_MAX_VOCAB:,} supported")
    dtype = "uint16" if vocab <= 1 << 16 else "uint32"
    arrays: dict[str, np.ndarray] = {}
    for split, pairs in (("train", corpus.train_pairs), ("val", corpus.val_pairs)):
        sides = (("src", pairs.src, pairs.src_offsets), ("tgt", pairs.tgt, pairs.tgt_offsets))
        for side, flat, offsets in sides:
            blob, cuts = bytes(flat.numpy()), offsets.tolist()
            texts = [blob[a:b].decode("utf-8") for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
            encoded = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
            ids = np.fromiter((i for e in encoded for i in e), dtype=np.int64)
            if len(ids) and int(ids.max()) >= vocab:
                raise UserError(
                    f"--tokenizer {tok_path}: gives id {int(ids.max()):,}, beyond its vocabulary of {vocab:,}"
                )
            lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
            arrays[f"{split}_{side}"] = ids.astype(_DTYPES[dtype])
            arrays[f"{split}_{side}_offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    val_tgt_bytes = len(corpus.val_pairs.tgt)
    meta = {
        "format": _FORMAT,
        "task": "seq2seq",
        "vocab_size": vocab,
        "dtype": dtype,
        "bytes_per_token": val_tgt_bytes / max(1, len(arrays["val_tgt"])),
        "name": f"{corpus.name} tokenized by {tok_path.name}",
        "n_skipped": corpus.n_skipped,
        "source": source,
    }
    with written_whole(out) as tmp:
        np.savez(tmp / PAIRS_FILE, **arrays)
        (tmp / PARALLEL_META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def read_parallel_meta(path: Path) -> dict[str, Any]:
    """parallel.json of a tokenized parallel corpus, checked (format, vocabulary, dtype)."""
    file = path / PARALLEL_META
    again = f"delete {path} and tokenize again"
    meta = read_json_file(file, again)
    vocab = meta.get("vocab_size") if isinstance(meta, dict) else None
    ok = isinstance(meta, dict) and meta.get("format") == _FORMAT and meta.get("dtype") in _DTYPES
    if not ok or isinstance(vocab, bool) or not isinstance(vocab, int) or not 0 < vocab <= _MAX_VOCAB:
        raise UserError(f"{file}: not a {_FORMAT} file; {again}")
    # what loading reads besides: a wrong type was a traceback (** of a list, int() of a word)
    for key, kinds in (("n_skipped", int), ("source", dict), ("bytes_per_token", (int, float))):
        value = meta.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            raise UserError(f"{file}: {key} is {value!r}, of the wrong type (edited?); {again}")
    return meta


def load_parallel_cache(path: Path) -> ParallelCorpus:
    """The tokenized parallel corpus in ``path`` (written by :func:`tokenize_parallel`)."""
    meta = read_parallel_meta(path)
    vocab = int(meta["vocab_size"])
    corrupt = f"{path / PAIRS_FILE}: corrupt or incomplete; delete {path} and tokenize again"
    try:
        with np.load(path / PAIRS_FILE, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except OSError as err:
        raise UserError(f"{corrupt} ({err.strerror or err})") from None
    except Exception:  # noqa: BLE001 - numpy and zipfile raise many kinds (EOFError, BadZipFile, ValueError)
        # not numpy's own words: for a file that is no archive they suggest loading it unsafely (pickle)
        raise UserError(f"{corrupt} (not a NumPy .npz archive)") from None
    splits = []
    for split in ("train", "val"):
        parts = []
        for side in ("src", "tgt"):
            ids, offsets = arrays.get(f"{split}_{side}"), arrays.get(f"{split}_{side}_offsets")
            if ids is None or offsets is None or ids.ndim != 1 or offsets.ndim != 1 or len(offsets) < 1:
                raise UserError(corrupt)
            if offsets[0] != 0 or offsets[-1] != len(ids) or (np.diff(offsets) < 0).any():
                raise UserError(corrupt)
            if len(ids) and int(ids.max()) >= vocab:
                raise UserError(f"{corrupt} (id {int(ids.max()):,} is >= vocab_size {vocab:,})")
            parts += [torch.from_numpy(ids.astype(np.int32)), torch.from_numpy(offsets.astype(np.int64))]
        if len(parts[1]) != len(parts[3]):
            raise UserError(corrupt)
        splits.append(Pairs(*parts))
    if len(splits[0]) == 0 or len(splits[1]) == 0:
        raise UserError(corrupt)
    bpt = meta.get("bytes_per_token")
    return ParallelCorpus(
        name=str(meta.get("name") or path),
        train_pairs=splits[0],
        val_pairs=splits[1],
        base_vocab=vocab,
        bytes_per_token=float(bpt) if isinstance(bpt, (int, float)) and bpt > 0 else None,
        source={"corpus": str(path.resolve()), **(meta.get("source") or {})},
        n_skipped=int(meta.get("n_skipped") or 0),
    )
