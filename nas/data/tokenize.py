"""Text through a local Hugging Face ``tokenizers`` file, once, into cached token files.

``--tokenizer PATH/tokenizer.json`` turns a text corpus (the default Shakespeare,
a file, a directory) into a token directory under ``cache_dir()/tokens/``, keyed
by the tokenizer file's content hash and the text's fingerprint, so any later
run, worker or retrain with the same two inputs reuses it.  Nothing is fetched
from a hub: the tokenizer is read from disk.

Each document (the byte corpus's train and validation text, split at its NUL
separators) is encoded in pieces of about a MiB cut at line ends, so memory
stays bounded for big documents; tokenizers that merge across a newline lose
those merges at the cuts only.  ``bytes_per_token`` is measured on the whole
validation text; ``val_bytes.bin`` (:data:`nas.data.tokens.VAL_BYTES`) holds, per validation token, the
bytes of text up to its end (from the tokenizer's offsets), so bits per byte divide by the bytes of
exactly the text the loss is measured on.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nas.data.corpus import Corpus, file_lock
from nas.data.text import SEPARATOR
from nas.data.tokens import META, write_token_dir
from nas.errors import UserError
from nas.files.outputs import cache_dir, note_input, partial
from nas.validate import check_writable_dir, read_json_file, read_text_file

_PIECE = 1 << 20  # characters per encoded piece
#: bytes that are not UTF-8, as :func:`_documents` decodes them (one character, U+DC80 + their count, where
#: errors="replace" puts one U+FFFD), to the U+FFFD the tokenizer reads in their place
_STRAY = {c: "\ufffd" for c in range(0xDC80, 0xDD00)}


def _stray(err: UnicodeError) -> tuple[str, int]:
    """The decode error handler of :func:`_documents`: ``replace``'s one character per invalid stretch, one
    that says how many bytes it stands for."""
    assert isinstance(err, UnicodeDecodeError)
    return chr(0xDC80 + err.end - err.start), err.end


codecs.register_error("nas-stray", _stray)


def load_tokenizer(path: Path, shown: str | None = None) -> tuple[Any, str]:
    """The ``tokenizers.Tokenizer`` in the file ``path`` and the file's content hash; one-line UserErrors
    naming the file as ``shown`` (by default ``--tokenizer PATH``)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError(
            "--tokenizer needs the tokenizers package: pip install tokenizers "
            "(or pip install 'nas-lm[tokenizers]')"
        ) from None
    valid = "--tokenizer takes a Hugging Face tokenizers file (tokenizer.json, as Tokenizer.save writes it)"
    shown = f"--tokenizer {path}" if shown is None else shown
    if not path.exists() and not path.is_symlink():  # a path typed: "not found", as for other flags
        raise UserError(f"{shown}: not found; {valid}")
    text, blob = read_text_file(path, valid, shown)
    note_input(path, "tokenizer")  # no output replaces it (nas.files.outputs)
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as err:  # noqa: BLE001 - the Rust parser raises plain Exception
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{shown}: not a Hugging Face tokenizers file ({first}); {valid}") from None
    return tokenizer, "sha256:" + hashlib.sha256(blob).hexdigest()[:16]


def tokenize_corpus(text: Corpus, tokenizer_path: str | os.PathLike[str]) -> Path:
    """The cached token directory of ``text`` (a byte corpus) through the tokenizer file."""
    name = Path(tokenizer_path).name

    def write(out: Path, tokenizer: Any, source: dict[str, str]) -> None:
        _write(out, text, tokenizer, source, name)

    return cached_tokenization(
        "tokens", META, text.name, text.source, text.fingerprint, text.is_bytes, tokenizer_path, write
    )


def cached_tokenization(
    kind: str,
    meta_name: str,
    name: str,
    text_source: Mapping[str, Any],
    fingerprint: str,
    is_text: bool,
    tokenizer_path: str | os.PathLike[str],
    write: Callable[[Path, Any, dict[str, str]], None],
) -> Path:
    """``cache_dir()/kind/<tokenizer hash>-<text fingerprint>``, made once by ``write(out,
    tokenizer, source)`` under a file lock (``meta_name`` in it marks a finished entry)."""
    path = Path(tokenizer_path).expanduser()
    tokenizer, tok_fp = load_tokenizer(path)
    if not is_text:
        raise UserError(f"--tokenizer applies to text; {name} already holds token ids (drop --tokenizer)")
    key = f"{tok_fp.removeprefix('sha256:')}-{fingerprint.removeprefix('sha256:')}"
    out = cache_dir() / kind / key
    check_writable_dir(out.parent, "NAS_CACHE_DIR (the token cache)")
    source = {
        "corpus": text_source.get("corpus", name),
        "tokenizer": str(path.resolve()),
        "tokenizer_fingerprint": tok_fp,
    }
    with file_lock(out.with_name(key + ".lock")):
        if not (out / meta_name).is_file():
            write(out, tokenizer, source)
        else:
            update_source(out / meta_name, source)
    return out


def _write(out: Path, text: Corpus, tokenizer: Any, source: dict[str, str], tok_name: str) -> None:
    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    train = np.concatenate([_encode(tokenizer, d, byte_ends=False)[0] for d in _documents(text.train)])
    encoded = [_encode(tokenizer, d) for d in _documents(text.val)]
    val = np.concatenate([i for i, _, _ in encoded])
    # each document's byte ends, shifted by the bytes of the documents before it (no separators)
    shift = np.cumsum([0] + [n for _, _, n in encoded])
    ends = np.concatenate([e + s for (_, e, _), s in zip(encoded, shift, strict=False)])
    write_token_dir(
        out,
        train,
        val,
        vocab,
        val_byte_ends=ends,
        bytes_per_token=int(shift[-1]) / max(1, len(val)),
        name=f"{text.name} tokenized by {tok_name}",
        source=source,
    )


def _documents(part: Any) -> list[str]:
    """The documents of a byte corpus's split as text (split at its NUL separators).  A document may hold a
    few bytes that are not UTF-8 (nas.data.text keeps it): each stretch of them is one character here
    (:func:`_stray`), which the tokenizer reads as U+FFFD and the byte ends count as the bytes it is."""
    return [d.decode("utf-8", errors="nas-stray") for d in bytes(part.numpy()).split(SEPARATOR)]


def _encode(tokenizer: Any, doc: str, byte_ends: bool = True) -> tuple[np.ndarray, np.ndarray, int]:
    """``doc``'s ids, the UTF-8 bytes of ``doc`` up to the end of each token, and its bytes
    (:func:`encode_docs` of one document)."""
    return encode_docs(tokenizer, [doc], byte_ends)[0]


def encode_docs(
    tokenizer: Any, docs: list[str], byte_ends: bool = True
) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Per document: its ids, the UTF-8 bytes of it up to the end of each token (never decreasing), and
    its bytes.  The documents go to the tokenizer in one batch, each cut in pieces of about a MiB at line
    ends.  The ends come from the tokenizer's offsets, which are in characters: a token that is part of one
    character ends where that character does.  Without ``byte_ends`` (training text, whose ends nothing
    reads) the ends are empty and the bytes 0."""
    pieces, owner = [], []
    for k, doc in enumerate(docs):
        start = 0
        while start < len(doc):
            end = doc.find("\n", start + _PIECE)
            end = len(doc) if end < 0 else end + 1
            pieces.append(doc[start:end])
            owner.append(k)
            start = end
    texts = [_tokenizer_text(p) for p in pieces]
    encoded = tokenizer.encode_batch(texts, add_special_tokens=False) if pieces else []
    ids: list[list[np.ndarray]] = [[] for _ in docs]
    ends: list[list[np.ndarray]] = [[] for _ in docs]
    done = [0] * len(docs)
    for k, piece, e in zip(owner, pieces, encoded, strict=True):
        ids[k].append(np.asarray(e.ids, dtype=np.int64))
        if byte_ends:
            prefix = np.concatenate([[0], np.cumsum(_utf8_lengths(piece))])  # bytes before each character
            chars = np.asarray([b for _, b in e.offsets], dtype=np.int64).reshape(-1)
            ends[k].append(done[k] + prefix[np.minimum(chars, len(piece))])
            done[k] += int(prefix[-1])
    none = np.zeros(0, np.int64)
    out = []
    for i, e, n in zip(ids, ends, done, strict=True):
        rising = np.maximum.accumulate(np.concatenate(e)) if e else none
        out.append((np.concatenate(i), rising, n) if i else (none, none, 0))
    return out


def _tokenizer_text(piece: str) -> str:
    """``piece`` as the tokenizer reads it: a byte that is not UTF-8 (:func:`_documents`) as U+FFFD."""
    try:
        piece.encode("utf-8")
    except UnicodeEncodeError:  # the rare document with stray bytes
        return piece.translate(_STRAY)
    return piece


def _utf8_lengths(text: str) -> np.ndarray:
    """The UTF-8 length of each character of ``text`` (1 to 4; for bytes that are not UTF-8, as
    :func:`_documents` decodes them, their count), vectorised over its code points."""
    points = np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), dtype=np.uint32)
    stray = (points >= 0xDC80) & (points < 0xDD00)
    utf8 = 1 + (points >= 0x80).astype(np.int64) + (points >= 0x800) + (points >= 0x10000)
    return np.where(stray, points.astype(np.int64) - 0xDC80, utf8)


def update_source(meta_path: Path, source: dict[str, str]) -> None:
    """Point a cache hit's metadata file at the paths given now (the fingerprint ignores them)."""
    # damaged on disk (a bad copy, an edit): json's own errors were a traceback
    fix = f"{meta_path.parent} is this tool's cache of a tokenized corpus: delete it and run again"
    meta = read_json_file(meta_path, fix)
    if not isinstance(meta, dict):
        raise UserError(f"{meta_path}: is a JSON {type(meta).__name__}, not an object; {fix}")
    if meta.get("source") == source:
        return
    meta["source"] = source
    with partial(meta_path.parent, meta_path.name) as tmp:
        tmp.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is shared like any other
        os.replace(tmp, meta_path)
