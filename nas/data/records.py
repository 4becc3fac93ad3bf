"""Corpora kept as records: JSON Lines, Parquet and Hugging Face ``datasets`` directories, read one record
at a time.

A records corpus is one of:

* a JSON Lines file, ``.jsonl``, ``.jsonl.gz`` or ``.jsonl.zst`` (the compression is read from the file's
  first bytes, so a misnamed file is still read), one JSON object per line;
* a Parquet file (``.parquet``, or any file starting with Parquet's ``PAR1`` magic);
* a directory holding such files (searched recursively, hidden files skipped, in name order; other files
  in it are left out and named);
* a directory written by ``datasets``' ``save_to_disk`` (``state.json`` beside ``.arrow`` files; of a
  ``DatasetDict``, its ``train`` split).

Each record's text is its ``text_field`` (``text`` by default).  A record that gives no text is a bad
record of one of :data:`KINDS`, yielded as :class:`Bad` with where it is (``file line N`` for JSON
Lines, 1-based as editors count; ``file row N`` for Parquet and Arrow, 0-based as ``dataset[N]``), so the
caller refuses or skips it (:mod:`nas.data.ingest`).  Reading needs optional packages (``pyarrow``,
``datasets``, ``zstandard``: ``pip install "nas-lm[datasets]"``); a missing one is one line naming it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nas.errors import UserError

#: the kinds of bad record, as messages and meta.json name them
KINDS = {
    "not_json": "not a JSON object",
    "missing": "no field",
    "not_string": "a value that is not a string",
    "invalid_utf8": "invalid UTF-8",
    "empty": "an empty text",
    "truncated": "a truncated or damaged shard",
}
DEFAULT_FIELD = "text"  # a record's text unless data.text_field names another field
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
PARQUET_SUFFIX = ".parquet"
EXTRA = "pip install 'nas-lm[datasets]'"
_GZIP_MAGIC, _ZSTD_MAGIC, _PARQUET_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"PAR1"
_CHUNK = 1 << 20  # bytes read from a shard at a time
_ROWS = 1024  # rows per Arrow batch
_HASH_WHOLE = 64 << 20  # shards up to this size are hashed whole; bigger ones by samples, as token files
_SAMPLES = 64


@dataclasses.dataclass(frozen=True)
class Bad:
    """A record that gives no text: its kind (a key of :data:`KINDS`) and what was found."""

    kind: str
    detail: str


def needs(module: str, what: str) -> Any:
    """``module`` imported, or a one-line UserError naming the package and the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        package = module.split(".")[0]
        raise UserError(f"{what} needs the {package} package: pip install {package} (or {EXTRA})") from None


def _is_hf_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def _magic(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(4)
    except OSError:
        return b""


def shard_kind(path: Path) -> str | None:
    """``jsonl`` or ``parquet`` for a file of records (by suffix, or Parquet's magic), else None."""
    name = path.name.lower()
    if name.endswith(PARQUET_SUFFIX) or _magic(path) == _PARQUET_MAGIC:
        return "parquet"
    return "jsonl" if name.endswith(JSONL_SUFFIXES) else None


def is_records(path: Path) -> bool:
    """Whether ``path`` is a records corpus (the module docstring); only names and magic bytes are read."""
    if path.is_file():
        return shard_kind(path) is not None
    if not path.is_dir():
        return False
    return _is_hf_dir(path) or any(_shard_names(path))


def _shard_names(path: Path) -> Iterator[Path]:
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        if p.name.lower().endswith((*JSONL_SUFFIXES, PARQUET_SUFFIX)):
            yield p


class Records:
    """The records of a corpus, read once in order; ``done``/``total`` are bytes of its files for progress.

    ``left_out`` names the files of a directory that are no records; ``fingerprint(h)`` hashes what the
    records are read from (names, sizes and content of the shards).
    """

    def __init__(self, path: Path, text_field: str) -> None:
        self.path, self.field = path, text_field
        if not path.exists():
            raise UserError(f"{path}: corpus not found")
        self.left_out: list[str] = []
        if _is_hf_dir(path):
            self.kind, self.shards = "datasets", _arrow_files(path)
        elif path.is_dir():
            self.kind = "shards"
            self.shards = list(_shard_names(path))
            named = set(self.shards)
            for p in sorted(path.rglob("*")):
                rel = p.relative_to(path)
                if p.is_file() and p not in named and not any(s.startswith(".") for s in rel.parts):
                    self.left_out.append(rel.as_posix())
        else:
            self.kind, self.shards = "file", [path]
        if not self.shards:
            raise UserError(f"{path}: holds no records ({', '.join(JSONL_SUFFIXES)}, {PARQUET_SUFFIX} files)")
        self.total = sum(p.stat().st_size for p in self.shards)
        self.done = 0  # bytes of the shards read so far (compressed, as on disk)

    def where(self, shard: Path) -> str:
        """A shard as messages name it: its path under the corpus directory, or the file itself."""
        return str(shard) if self.kind == "file" else f"{self.path}/{shard.relative_to(self.path).as_posix()}"

    def fingerprint(self, h: Any) -> None:
        """Feed ``h`` (a hashlib object) the shards' names, sizes and content; a shard over 64 MiB is hashed
        from 64 evenly spaced MiB (first and last included), as token files are."""
        h.update(f"records/1:{self.kind}:{self.field}\n".encode())
        for shard in self.shards:
            size = shard.stat().st_size
            h.update(f"{shard.relative_to(self.path) if self.kind != 'file' else ''}:{size}\n".encode())
            with open(shard, "rb") as f:
                if size <= _HASH_WHOLE:
                    for block in iter(lambda f=f: f.read(_CHUNK), b""):
                        h.update(block)
                    continue
                for k in range(_SAMPLES):
                    f.seek((size - _CHUNK) * k // (_SAMPLES - 1))
                    h.update(f.read(_CHUNK))

    def __iter__(self) -> Iterator[tuple[str, str | Bad]]:
        """(where, text or :class:`Bad`) for every record, in order: shards by name, records as stored."""
        before = 0
        for shard in self.shards:
            where = self.where(shard)
            if self.kind == "datasets":
                rows = _arrow_rows(shard, self.field, where)
            elif shard_kind(shard) == "parquet":
                rows = _parquet_rows(shard, self.field, where)
            else:
                rows = _jsonl_records(shard, self.field, where)
            size = shard.stat().st_size
            for item, fraction in rows:
                self.done = before + int(fraction * size)
                yield item
            before += size
            self.done = before


def _arrow_files(path: Path) -> list[Path]:
    """The ``.arrow`` files of a ``save_to_disk`` directory, in order (a DatasetDict's ``train`` split)."""
    if (path / "dataset_dict.json").is_file():
        splits = _json_file(path / "dataset_dict.json").get("splits", [])
        if "train" not in splits:
            names = ", ".join(map(str, splits)) or "none"
            example = path / str((splits or ["NAME"])[0])
            raise UserError(f"{path}: a DatasetDict without a train split (splits: {names}); give "
                            f"the split's directory, e.g. --data {example}")  # fmt: skip
        path = path / "train"
    state = _json_file(path / "state.json")
    files = [f.get("filename") for f in state.get("_data_files", []) if isinstance(f, dict)]
    if not files or not all(isinstance(f, str) for f in files):
        raise UserError(f"{path / 'state.json'}: lists no _data_files; is this a save_to_disk directory?")
    return [path / f for f in files]


def _json_file(file: Path) -> dict[str, Any]:
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"{file}: cannot be read as JSON ({err}); is it a save_to_disk directory?") from None
    if not isinstance(doc, dict):
        raise UserError(f"{file}: is not a JSON object; is this a save_to_disk directory?")
    return doc


# -- JSON Lines ----------------------------------------------------------------------------------


class _Truncated(Exception):
    """A compressed shard ended before its end-of-stream marker."""


def _decompressor(magic: bytes, where: str) -> Callable[[], Any] | None:
    """A maker of streaming decompressors for the shard's compression (from its first bytes), or None."""
    if magic[:2] == _GZIP_MAGIC:
        return lambda: zlib.decompressobj(wbits=31)  # gzip framing
    if magic == _ZSTD_MAGIC:
        zstd = needs("zstandard", f"{where}: reading zstd-compressed JSON Lines")
        return lambda: zstd.ZstdDecompressor().decompressobj()
    return None


def _blocks(f: Any, make: Callable[[], Any] | None) -> Iterator[bytes]:
    """The shard's bytes, decompressed a chunk at a time; raises _Truncated when a compressed stream (gzip
    members and zstd frames may follow one another) stops before its end."""
    if make is None:
        yield from iter(lambda: f.read(_CHUNK), b"")
        return
    dec, fed = make(), False
    for chunk in iter(lambda: f.read(_CHUNK), b""):
        while chunk:
            fed = True
            yield dec.decompress(chunk)
            if not dec.eof:
                break
            chunk = dec.unused_data  # the next member or frame starts here
            dec, fed = make(), False
    if fed and not dec.eof:
        raise _Truncated


def _jsonl_records(shard: Path, field: str, where: str) -> Iterator[tuple[tuple[str, str | Bad], float]]:
    """Each line's ((where, text or Bad), fraction of the shard read); a blank line is no record."""
    size = max(1, shard.stat().st_size)
    with open(shard, "rb") as f:
        make = _decompressor(f.read(4), where)
        f.seek(0)
        tail, n = b"", 0
        blocks = _blocks(f, make)
        while True:
            try:
                block = next(blocks)
            except StopIteration:
                break
            except (_Truncated, zlib.error, OSError) as err:
                why = "ends before its end-of-stream marker" if isinstance(err, _Truncated) else str(err)
                at = f"{where} line {n + 1}"
                yield (at, Bad("truncated", f"{why}; lines from {n + 1} on are lost")), 1.0
                return
            except Exception as err:  # noqa: BLE001 - zstandard raises its own ZstdError
                yield (f"{where} line {n + 1}", Bad("truncated", f"cannot be decompressed ({err})")), 1.0
                return
            lines = (tail + block).split(b"\n")
            if n == 0 and lines[0].startswith(b"\xef\xbb\xbf"):  # a byte-order mark some editors write
                lines[0] = lines[0][3:]
            tail = lines.pop()
            fraction = f.tell() / size
            for line in lines:
                n += 1
                item = _record(line, field)
                if item is not None:
                    yield (f"{where} line {n}", item), fraction
        if tail.strip():
            n += 1
            item = _record(tail, field)
            if isinstance(item, Bad) and item.kind == "not_json":  # a last line cut short, no newline
                item = Bad("truncated", f"its last line is cut short ({item.detail})")
            if item is not None:
                yield (f"{where} line {n}", item), 1.0


def _record(line: bytes, field: str) -> str | Bad | None:
    """A JSON Lines line's text, or why it gives none (None: a blank line, which is no record)."""
    try:
        doc = line.decode("utf-8")
    except UnicodeDecodeError as err:
        return Bad("invalid_utf8", f"byte {err.start + 1} of the line is {line[err.start : err.start + 1]!r}")
    if not doc.strip():
        return None
    try:
        obj = json.loads(doc)
    except ValueError as err:
        return Bad("not_json", str(err))
    if not isinstance(obj, dict):
        return Bad("not_json", f"a JSON {type(obj).__name__}")
    if field not in obj:
        return Bad("missing", f"keys: {', '.join(list(obj)[:8]) or 'none'}")
    return _text(obj[field])


def _text(value: Any) -> str | Bad:
    """A field's value as a record's text, or why it is none."""
    if not isinstance(value, str):
        return Bad("not_string", "null" if value is None else f"{type(value).__name__} {str(value)[:40]!r}")
    if not value.isascii():
        try:  # JSON can spell a lone surrogate (\ud800), which is no Unicode text and has no UTF-8
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            return Bad("invalid_utf8", f"a lone surrogate {value[err.start]!r} at character {err.start}")
    if not value.strip():
        return Bad("empty", "empty" if not value else "only white space")
    return value


# -- Parquet and Arrow ---------------------------------------------------------------------------


def _parquet_rows(shard: Path, field: str, where: str) -> Iterator[tuple[tuple[str, str | Bad], float]]:
    """Each row's ((where, text or Bad), fraction of the shard read), through pyarrow's Parquet reader."""
    pq = needs("pyarrow.parquet", f"{where}: reading Parquet")
    try:
        # pre_buffer (pyarrow's default) reads every row group's column chunks ahead: the whole file in
        # memory (a 512 MB file took 360 MB); without it, one row group's column at a time
        pf = pq.ParquetFile(shard, pre_buffer=False)
    except Exception as err:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError for a cut-off file
        yield (f"{where} row 0", Bad("truncated", _first_line(err))), 1.0
        return
    n = pf.metadata.num_rows
    if field not in pf.schema_arrow.names:
        yield from _no_column(where, field, pf.schema_arrow.names, n)
        return
    yield from _column_rows(lambda: pf.iter_batches(batch_size=_ROWS, columns=[field]), field, where, n)


def _arrow_rows(shard: Path, field: str, where: str) -> Iterator[tuple[tuple[str, str | Bad], float]]:
    """One ``.arrow`` file of a ``save_to_disk`` directory, row by row, through ``datasets`` (mapped)."""
    datasets = needs("datasets", f"{where}: reading a datasets save_to_disk directory")
    try:
        ds = datasets.Dataset.from_file(str(shard))
    except Exception as err:  # noqa: BLE001 - a cut-off Arrow stream is an OSError from pyarrow
        yield (f"{where} row 0", Bad("truncated", _first_line(err))), 1.0
        return
    if field not in ds.column_names:
        yield from _no_column(where, field, ds.column_names, ds.num_rows)
        return
    table = ds.data.table.select([field])
    yield from _column_rows(lambda: table.to_batches(max_chunksize=_ROWS), field, where, ds.num_rows)


def _no_column(where: str, field: str, names: list[str], n: int) -> Iterator[tuple[tuple[str, Bad], float]]:
    bad = Bad("missing", f"the shard has no column {field!r} (columns: {', '.join(names[:8])})")
    for row in range(n):  # every row lacks it: each is counted, as a JSON line without the field is
        yield (f"{where} row {row}", bad), (row + 1) / max(1, n)


def _column_rows(batches: Callable[[], Any], field: str, where: str, n: int
                 ) -> Iterator[tuple[tuple[str, str | Bad], float]]:  # fmt: skip
    """The texts of one column, batch by batch: strings as they are, binary decoded as UTF-8 (writers that
    store text without the UTF8 annotation), any other type a value that is not a string."""
    import pyarrow as pa

    row = 0
    try:
        for batch in batches():
            col = batch.column(0)
            kind = col.type
            if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
                values: list[Any] = [_decoded(v) for v in col.to_pylist()]
            elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
                values = col.to_pylist()
            else:
                values = [Bad("not_string", f"a column of {kind}")] * len(col)
            for value in values:
                item = value if isinstance(value, Bad) else _text(value)
                yield (f"{where} row {row}", item), (row + 1) / max(1, n)
                row += 1
    except Exception as err:  # noqa: BLE001 - a damaged page or row group: pyarrow's OSError/ArrowInvalid
        bad = Bad("truncated", f"{_first_line(err)}; rows from {row} on are lost")
        yield (f"{where} row {row}", bad), 1.0


def _decoded(value: bytes | None) -> str | Bad | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as err:
        return Bad(
            "invalid_utf8", f"byte {err.start + 1} of the value is {value[err.start : err.start + 1]!r}"
        )


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def source_fingerprint(records: Records, tokenizer_fp: str) -> str:
    """The cache key's hash of a records corpus read through a tokenizer (or ``bytes``)."""
    h = hashlib.sha256(f"{tokenizer_fp}\n".encode())
    records.fingerprint(h)
    return "sha256:" + h.hexdigest()[:16]
