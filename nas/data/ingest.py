"""A records corpus (:mod:`nas.data.records`) streamed once into cached token files.

``tokenize_records`` reads the records in order, tokenizes them in batches of about a MiB of text (UTF-8
bytes without a tokenizer, vocabulary 256; else a local ``tokenizer.json``'s ids) and appends the ids to
``train.bin`` and ``val.bin`` of a token directory under ``cache_dir()/tokens/``, the files the engine
memory-maps to train.  Memory is bounded by the batch, whatever the corpus's size.  The entry's name
hashes the tokenizer file and the shards' content (:func:`nas.data.records.source_fingerprint`), so every
later run with the same two inputs memory-maps it at once; it is written whole or not at all
(:func:`nas.data.corpus.written_whole`: an interrupted or refused run leaves nothing behind).

Each record is a document and the validation split is by document, as for a directory of text files
(:func:`nas.data.text.validation_indices`): record ``i`` is held out when ``i % 10 == 5``, or the last
record when there are fewer than six; a corpus of one record holds out its last tenth.  Without a
tokenizer documents are joined by a NUL byte as text corpora are.

A bad record (:data:`nas.data.records.KINDS`) refuses the run with ``on_bad_record: refuse`` (the default),
naming where it is; with ``skip`` it is left out, and each kind's count and first place are kept in
``meta.json`` and said on stderr by every run that reads the entry.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from nas.data.corpus import file_lock, written_whole
from nas.data.progress import Progress
from nas.data.records import DEFAULT_FIELD, KINDS, Bad, Records, source_fingerprint
from nas.data.text import SEPARATOR
from nas.data.tokens import DTYPES, META, VAL_BYTES
from nas.errors import UserError
from nas.files.outputs import cache_dir
from nas.validate import check_writable_dir, read_json_file

ON_BAD_RECORD = ("refuse", "skip")
BATCH_CHARS = 1 << 20  # characters of text per tokenizer batch: what bounds memory
_BATCH_RECORDS = 4096
_SKIP_HINT = "pass --data.on_bad_record skip (data.on_bad_record: skip) to leave such records out"


def what_is_bad(kind: str, field: str) -> str:
    """A bad record's kind in words, with the field it concerns."""
    return {
        "missing": f"no field {field!r} (choose the field with --data.text_field)",
        "not_string": f"field {field!r} is not a string",
        "empty": f"field {field!r} is empty",
    }.get(kind, KINDS[kind])


def tokenize_records(
    spec: str | os.PathLike[str],
    tokenizer_path: str | os.PathLike[str] | None = None,
    text_field: str = DEFAULT_FIELD,
    on_bad_record: str = "refuse",
    stream: TextIO | None = None,
) -> Path:
    """The cached token directory of the records corpus ``spec`` (see the module docstring), made once.

    ``stream`` takes the progress bar or lines and the notes (default: stderr).  A bad record under
    ``refuse``, and a corpus with no text at all, raise one-line UserErrors.
    """
    from nas.data.tokenize import load_tokenizer

    if on_bad_record not in ON_BAD_RECORD:
        valid = ", ".join(ON_BAD_RECORD)
        raise UserError(f"data.on_bad_record: {on_bad_record!r} is not valid; valid: {valid}")
    stream = stream if stream is not None else sys.stderr
    path = Path(spec).expanduser()
    records = Records(path, text_field)
    tokenizer, tok_fp, name = None, "bytes", str(spec)
    source: dict[str, str] = {"corpus": str(path.resolve())}
    if tokenizer_path is not None:
        tok_file = Path(tokenizer_path).expanduser()
        tokenizer, tok_fp = load_tokenizer(tok_file)
        name = f"{spec} tokenized by {tok_file.name}"
        source.update(tokenizer=str(tok_file.resolve()), tokenizer_fingerprint=tok_fp)
    if text_field != DEFAULT_FIELD:
        source["text_field"] = text_field
    key = f"{tok_fp.removeprefix('sha256:')}-{source_fingerprint(records, tok_fp).removeprefix('sha256:')}"
    out = cache_dir() / "tokens" / key
    check_writable_dir(out.parent, "NAS_CACHE_DIR (the token cache)")
    with file_lock(out.with_name(key + ".lock")):
        if not (out / META).is_file():
            _write(out, records, tokenizer, on_bad_record, name, stream)
        fix = f"{out} is this tool's cache of a tokenized corpus: delete it and run again"
        meta = read_json_file(out / META, fix)
        bad = meta.get("bad_records") if isinstance(meta, dict) else None
        if bad and not isinstance(bad, dict):
            raise UserError(f"{out / META}: bad_records is not an object; {fix}")
        if bad:  # tokenized before with on_bad_record: skip
            if on_bad_record == "refuse":
                kind, first = next(iter(bad.items()))
                what = what_is_bad(kind, text_field)
                raise UserError(f"{first['first']}: {what} ({first['detail']}); {_count(bad)} bad "
                                "record(s) in all, left out when it was tokenized with on_bad_record skip; "
                                f"data.on_bad_record is refuse: fix them, or {_SKIP_HINT}")  # fmt: skip
            source["on_bad_record"] = "skip"
            stream.write(f"note: {spec}: skipped {_summary(bad, text_field)}\n")
        _set_source(out / META, meta, source, fix)
    return out


def _count(bad: dict[str, Any]) -> int:
    return sum(int(v["count"]) for v in bad.values())


def _summary(bad: dict[str, Any], field: str) -> str:
    """Skipped records in words: the count, then each kind's count and first place."""
    kinds = "; ".join(f"{what_is_bad(k, field).split(' (')[0]}: {v['count']:,} (first: {v['first']})"
                      for k, v in bad.items())  # fmt: skip
    return f"{_count(bad):,} bad record(s): {kinds}"


def _set_source(meta_path: Path, meta: Any, source: dict[str, str], fix: str) -> None:
    from nas.data.tokenize import update_source

    if not isinstance(meta, dict):
        raise UserError(f"{meta_path}: is a JSON {type(meta).__name__}, not an object; {fix}")
    update_source(meta_path, source)


class _Writer:
    """Documents appended to the split's token file, a batch at a time."""

    def __init__(self, tmp: Path, tokenizer: Any, files: contextlib.ExitStack) -> None:
        self.tokenizer = tokenizer
        vocab = VOCAB_BYTES if tokenizer is None else tokenizer.get_vocab_size(with_added_tokens=True)
        self.vocab = int(vocab)
        self.dtype_name = "uint16" if self.vocab <= 1 << 16 else "uint32"
        self.dtype = DTYPES[self.dtype_name]
        self.out = {s: files.enter_context(open(tmp / f"{s}.bin", "wb")) for s in ("train", "val")}
        self.ends = files.enter_context(open(tmp / VAL_BYTES, "wb")) if tokenizer is not None else None
        self.tokens = {"train": 0, "val": 0}
        self.docs = {"train": 0, "val": 0}
        self.val_bytes = 0
        self.batch: list[tuple[str, str]] = []
        self.chars = 0

    def add(self, split: str, text: str) -> None:
        self.batch.append((split, text))
        self.chars += len(text)
        if self.chars >= BATCH_CHARS or len(self.batch) >= _BATCH_RECORDS:
            self.flush()

    def _put(self, split: str, ids: np.ndarray) -> None:
        # a Python file write: a full disk raises OSError with its errno, which the CLI words in one line
        self.out[split].write(np.ascontiguousarray(ids.astype(self.dtype)).data)
        self.tokens[split] += len(ids)

    def flush(self) -> None:
        batch, self.batch, self.chars = self.batch, [], 0
        if self.tokenizer is None:  # UTF-8 bytes, documents joined by NUL as text corpora are
            for split, text in batch:
                data = text.encode("utf-8")
                if self.docs[split]:
                    data = SEPARATOR + data
                self._put(split, np.frombuffer(data, dtype=np.uint8))
                self.docs[split] += 1
            return
        from nas.data.tokenize import encode_docs

        for split in ("train", "val"):
            docs = [t for s, t in batch if s == split]
            for ids, ends, n in encode_docs(self.tokenizer, docs, byte_ends=split == "val"):
                self._put(split, ids)
                if split == "val":
                    assert self.ends is not None
                    self.ends.write(np.ascontiguousarray((ends + self.val_bytes).astype("<u8")).data)
                    self.val_bytes += n
            self.docs[split] += len(docs)


VOCAB_BYTES = 256


class _Splitter:
    """Sends each document to train or validation as it comes (the module docstring's rule); the first
    five wait until a sixth shows the rule for six or more applies."""

    def __init__(self, writer: _Writer) -> None:
        self.writer, self.n, self.pending = writer, 0, list[str]()

    def add(self, text: str) -> None:
        i, self.n = self.n, self.n + 1
        if i < 5:
            self.pending.append(text)
            return
        for waiting in self.pending:
            self.writer.add("train", waiting)
        self.pending.clear()
        self.writer.add("val" if i % 10 == 5 else "train", text)

    def finish(self) -> None:
        if len(self.pending) == 1:  # one document: its last tenth held out, cut at a character's start
            data = self.pending[0].encode("utf-8")
            cut = len(data) - max(1, len(data) // 10)
            while cut > 0 and data[cut] & 0xC0 == 0x80:
                cut -= 1
            self.pending = [data[:cut].decode("utf-8"), data[cut:].decode("utf-8")]
        for k, waiting in enumerate(self.pending):
            self.writer.add("val" if k == len(self.pending) - 1 else "train", waiting)
        self.writer.flush()


def _write(out: Path, records: Records, tokenizer: Any, on_bad: str, name: str, stream: TextIO) -> None:
    if records.left_out:
        more = f", and {len(records.left_out) - 3} more" if len(records.left_out) > 3 else ""
        stream.write(f"note: {records.path}: left out {len(records.left_out)} file(s) that hold no records: "
                     f"{', '.join(records.left_out[:3])}{more}\n")  # fmt: skip
    progress = Progress(f"tokenizing {records.path}", records.total, stream)
    bad: dict[str, dict[str, Any]] = {}
    n = 0
    with written_whole(out) as tmp, contextlib.ExitStack() as files:
        writer = _Writer(tmp, tokenizer, files)
        split = _Splitter(writer)
        try:
            for where, item in records:
                n += 1
                if isinstance(item, Bad):
                    if on_bad == "refuse":
                        what = what_is_bad(item.kind, records.field)
                        raise UserError(f"{where}: {what} ({item.detail}); data.on_bad_record is refuse: "
                                        f"fix the record, or {_SKIP_HINT}")  # fmt: skip
                    first = bad.setdefault(item.kind, {"count": 0, "first": where, "detail": item.detail})
                    first["count"] += 1
                else:
                    split.add(item)
                progress.update(n, records.done, sum(writer.tokens.values()))
            if split.n == 0:
                skipped = f" ({_summary(bad, records.field)})" if bad else ""
                raise UserError(f"{records.path}: no record gives text{skipped}")
            split.finish()
        except BaseException:
            progress.clear()
            raise
        files.close()
        meta = {
            "vocab_size": writer.vocab,
            "dtype": writer.dtype_name,
            "bytes_per_token": 1.0 if tokenizer is None else writer.val_bytes / max(1, writer.tokens["val"]),
            "name": name,
            "records": {
                "documents": split.n,
                "validation_documents": writer.docs["val"],
                "field": records.field,
            },  # fmt: skip
            "bad_records": bad,
        }
        (tmp / META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    progress.finish(n, sum(writer.tokens.values()))
