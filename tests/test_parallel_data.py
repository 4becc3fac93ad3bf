"""nas.data for parallel corpora: layout of batches, the built-in task, errors, the tokenizer cache,
and the batch/validation methods both corpus kinds share."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import pytest
import torch
from synthetic_text import write_parallel_corpus
from token_corpus import train_tiny_bpe

from nas.data import (
    DEFAULT_PARALLEL,
    Corpus,
    Pairs,
    ParallelCorpus,
    get_batch,
    is_parallel_dir,
    load_corpus,
    load_parallel,
    parallel_files,
    resolve_data,
    reversed_pairs,
    scored_bytes_per_token,
    task_of,
    train_batch,
    validation_batches,
    validation_windows,
    vocab_size_of,
)
from nas.errors import UserError

PAD, BOS, EOS = 256, 257, 258


def _write(root: Path, **files: str | bytes) -> Path:
    """A parallel directory from ``train_src="..."`` style keyword arguments (raw text, any bytes)."""
    root.mkdir(parents=True, exist_ok=True)
    for key, text in files.items():
        (root / key.replace("_", ".")).write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return root


def _tiny(root: Path) -> ParallelCorpus:
    corpus = load_parallel(
        _write(root, train_src="abc\nd\n", train_tgt="xy\nzzzz\n", val_src="abc\nd\n", val_tgt="xy\nzzzz\n")
    )
    assert isinstance(corpus, ParallelCorpus)
    return corpus


# -- layout --------------------------------------------------------------------------------------


def test_rows_put_bos_eos_pad_and_ignore_index_where_they_belong(tmp_path: Path) -> None:
    corpus = _tiny(tmp_path / "p")
    assert (corpus.pad_id, corpus.bos_id, corpus.eos_id, corpus.vocab_size) == (PAD, BOS, EOS, 259)
    a, b, c, d, x, y, z = (ord(ch) for ch in "abcdxyz")
    xs, ys = corpus.validation(10, 5)  # 2 examples: fewer than asked
    assert xs.dtype == ys.dtype == torch.int64 and xs.shape == (2, 10) and ys.shape == (2, 5)
    assert xs[0].tolist() == [a, b, c, PAD, PAD] + [BOS, x, y, PAD, PAD]
    assert ys[0].tolist() == [x, y, EOS, -100, -100]
    assert xs[1].tolist() == [d, PAD, PAD, PAD, PAD] + [BOS, z, z, z, z]  # tgt_in cut at T
    assert ys[1].tolist() == [z, z, z, z, EOS]  # the eos just fits
    assert corpus.train_pairs.longest() == (3, 4)
    xs, ys = corpus.validation(2, 2)  # truncation of all three parts
    assert xs.tolist() == [[a, b, BOS, x], [d, PAD, BOS, z]] and ys.tolist() == [[x, y], [z, z]]


def test_scored_bytes_per_token_leave_out_eos_and_padding(tmp_path: Path) -> None:
    corpus = _tiny(tmp_path / "p")
    _, ys = corpus.validation(10, 5)  # [x, y, EOS, -, -] and [z, z, z, z, EOS]: 8 scored, 6 bytes
    assert scored_bytes_per_token(corpus, ys) == 6 / 8
    _, ys = corpus.validation(2, 2)  # cut before any eos: every scored target is a byte
    assert scored_bytes_per_token(corpus, ys) == 1.0
    half = dataclasses.replace(corpus, bytes_per_token=2.0)  # a tokenizer's ids: bytes per text token
    assert scored_bytes_per_token(half, corpus.validation(10, 5)[1]) == 2.0 * 6 / 8
    assert scored_bytes_per_token(dataclasses.replace(corpus, bytes_per_token=None), ys) is None


def test_batches_are_training_examples_drawn_from_the_generator_only(tmp_path: Path) -> None:
    corpus = load_parallel(write_parallel_corpus(tmp_path / "p"))
    x1, y1 = corpus.batch(16, 24, torch.Generator().manual_seed(3))
    torch.manual_seed(123)  # the global generator plays no part
    x2, y2 = corpus.batch(16, 24, torch.Generator().manual_seed(3))
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and x1.shape == (16, 48) and y1.shape == (16, 24)
    x3, _ = corpus.batch(16, 24, torch.Generator().manual_seed(4))
    assert not torch.equal(x1, x3)
    every_x, every_y = corpus.rows(corpus.train_pairs, torch.arange(len(corpus.train_pairs)), 24)
    for row_x, row_y in zip(x1, y1, strict=True):  # each row is one whole training example
        match = (every_x == row_x).all(1) & (every_y == row_y).all(1)
        assert match.any()
    assert int(x1.max()) <= corpus.bos_id and int(y1.min()) == -100


def test_samples_encode_and_decode_give_text_back(tmp_path: Path) -> None:
    corpus = load_parallel(
        _write(tmp_path / "p", train_src="é ö\n", train_tgt="ö é\n", val_src="ça va\n", val_tgt="va ça\n")
    )
    assert corpus.samples(5) == [("ça va", "va ça")]
    assert corpus.encode("ça") == list("ça".encode()) and corpus.decode(corpus.encode("ça")) == "ça"
    assert corpus.decode([BOS, *b"hi", EOS, PAD, 9999]) == "hi"  # specials and strays dropped


def test_crlf_and_pairs_blank_on_both_sides(tmp_path: Path) -> None:
    corpus = load_parallel(
        _write(
            tmp_path / "p",
            train_src="a b\r\n\r\n  \nc d\n",
            train_tgt="b a\r\n\r\n\nd c\n",
            val_src="e f",
            val_tgt="f e",
        )
    )  # no final newline in val
    assert corpus.n_skipped == 2 and len(corpus.train_pairs) == 2 and len(corpus.val_pairs) == 1
    assert corpus.train_pairs.source(0) == list(b"a b") and corpus.val_pairs.target(0) == list(b"f e")
    assert "2 blank pairs skipped" in corpus.describe()


# -- errors --------------------------------------------------------------------------------------

_OK = {"train_src": "a b\n", "train_tgt": "b a\n", "val_src": "c d\n", "val_tgt": "d c\n"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"val_tgt": None},
            r"val\.tgt: missing; a parallel corpus directory holds train\.src, train\.tgt, "
            r"val\.src and val\.tgt",
        ),
        ({"train_tgt": "b a\nx\n"}, r"train\.src has 1 line but train\.tgt has 2; .* aligned line by line"),
        ({"val_src": "c d\ne\n"}, r"val\.src has 2 lines but val\.tgt has 1"),
        (
            {"train_src": "\n", "train_tgt": " \n"},
            r"the training split \(train\.src, train\.tgt\) holds no examples",
        ),
        ({"val_src": "", "val_tgt": ""}, r"the validation split \(val\.src, val\.tgt\) holds no examples"),
        (
            {"train_tgt": b"b a\n\xff\n", "train_src": "a b\nc\n"},
            r"train\.tgt: line 2 is not valid UTF-8 \(byte 0xff",
        ),
        (  # Windows' "Unicode" saving: it was 'line 1 is not valid UTF-8 (byte 0xff', no word of the fix
            {"val_src": "c d\n".encode("utf-16")},
            r"val\.src: UTF-16 text, by its byte-order mark; save it as UTF-8",
        ),
        ({"val_tgt": "\n"}, r"val\.tgt: line 1 is blank but line 1 of val\.src is not"),
        (
            {"train_src": "a b\n\n", "train_tgt": "b a\nx\n"},
            r"train\.src: line 2 is blank but line 2 of train\.tgt",
        ),
    ],
)
def test_each_mistake_is_one_line_naming_the_file(tmp_path: Path, change: dict, message: str) -> None:
    files = {**_OK, **change}
    root = _write(tmp_path / "p", **{k: v for k, v in files.items() if v is not None})
    with pytest.raises(UserError, match=message) as err:
        load_corpus(root)
    assert "\n" not in str(err.value)


def test_paths_that_are_not_parallel_directories(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found; a parallel corpus is a directory holding train.src"):
        load_parallel(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        load_parallel(tmp_path / "file")
    with pytest.raises(UserError, match="train.src: missing"):
        load_parallel(tmp_path)  # an empty directory
    empty = ParallelCorpus("e", _tiny(tmp_path / "t").train_pairs, Pairs.from_sequences([], [], torch.uint8))
    with pytest.raises(UserError, match="e: the validation split holds no examples"):
        empty.validation(4, 8)


def test_a_side_that_is_a_directory_is_called_one(tmp_path: Path) -> None:  # it was called missing
    root = _write(tmp_path / "p", train_src="a\n", train_tgt="b\n", val_src="a\n")
    (root / "val.tgt").mkdir()
    with pytest.raises(UserError, match=r"val\.tgt: is a directory, not a file; a parallel corpus directory"):
        load_parallel(root)


@pytest.fixture
def parallel_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tokenized parallel corpus (parallel.json and pairs.npz) made with a real tokenizer."""
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    par = write_parallel_corpus(tmp_path / "p", n_train=5, n_val=2)
    spec = Path(resolve_data(par, train_tiny_bpe(tmp_path / "tokenizer.json", vocab_size=300)))
    assert isinstance(load_corpus(spec), ParallelCorpus)
    return spec


def _with(**changes: object):
    def spoil(file: Path) -> None:
        file.write_text(json.dumps({**json.loads(file.read_text()), **changes}))

    return spoil


@pytest.mark.parametrize(
    "name,spoil,expected",
    [  # each was a traceback: ** of a list, int() of a word, json's recursion, numpy's and zipfile's errors
        ("parallel.json", _with(source=[1]), "source is [1], of the wrong type (edited?)"),
        ("parallel.json", _with(n_skipped="x"), "n_skipped is 'x', of the wrong type (edited?)"),
        ("parallel.json", lambda f: f.write_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
        ("parallel.json", lambda f: f.write_bytes(f.read_text().encode("utf-16")), "UTF-16 text"),
        ("pairs.npz", lambda f: f.write_bytes(b""), "corrupt or incomplete"),
        ("pairs.npz", lambda f: f.write_bytes(f.read_bytes()[:200]), "corrupt or incomplete"),
        ("pairs.npz", lambda f: f.write_bytes(bytes(range(256))), "(not a NumPy .npz archive)"),
    ],
    ids=[
        "source-a-list",
        "n-skipped-a-word",
        "nested-deep",
        "utf16",
        "npz-empty",
        "npz-cut-short",
        "npz-binary",
    ],
)
def test_a_damaged_parallel_cache_is_one_line(parallel_cache: Path, name: str, spoil, expected: str) -> None:
    spoil(parallel_cache / name)
    with pytest.raises(UserError) as info:
        load_corpus(parallel_cache)
    message = str(info.value)
    assert message.startswith(f"{parallel_cache / name}: ") and expected in message, message
    assert "tokenize again" in message and "\n" not in message and "allow_pickle" not in message


# -- which kind of corpus ------------------------------------------------------------------------


def test_specs_are_told_apart_by_name_and_files(tmp_path: Path, corpus_dir: Path) -> None:
    par = write_parallel_corpus(tmp_path / "p")
    assert task_of(DEFAULT_PARALLEL) == task_of(par) == task_of(str(par)) == "seq2seq"
    assert task_of(None) == task_of("shakespeare") == task_of(corpus_dir) == task_of(tmp_path / "no") == "lm"
    assert is_parallel_dir(par) and not is_parallel_dir(corpus_dir)
    half = _write(tmp_path / "half", train_src="a\n")  # meant to be parallel: the error names what is missing
    assert task_of(half) == "seq2seq"
    with pytest.raises(UserError, match="train.tgt: missing"):
        load_corpus(half)
    assert vocab_size_of(DEFAULT_PARALLEL) == vocab_size_of(par) == 259
    corpus = load_corpus(par)
    assert isinstance(corpus, ParallelCorpus) and corpus.task == "seq2seq" and Corpus.task == "lm"
    assert isinstance(load_corpus(corpus_dir), Corpus)
    assert resolve_data(par) == str(par)  # no tokenizer: loaded as is


def test_fingerprint_is_content_all_four_sides(tmp_path: Path) -> None:
    a = load_parallel(write_parallel_corpus(tmp_path / "a"))
    b = load_parallel(write_parallel_corpus(tmp_path / "b"))  # the same text elsewhere
    assert a.fingerprint == b.fingerprint and a.fingerprint.startswith("sha256:")
    rec = a.record()
    assert (
        rec["task"] == "seq2seq"
        and rec["vocab_size"] == 259
        and rec["corpus"] == str((tmp_path / "a").resolve())
    )
    for name in ("train.src", "train.tgt", "val.src", "val.tgt"):
        c = write_parallel_corpus(tmp_path / f"c-{name}")
        text = (c / name).read_text()
        (c / name).write_text(text.replace("e", "E", 1))
        assert load_parallel(c).fingerprint != a.fingerprint, name


# -- the built-in task ---------------------------------------------------------------------------


def test_reversed_pairs_rules() -> None:
    # one word; blank; 61 bytes once joined; exactly 60 bytes (kept)
    text = "  To be,   or not\nExit.\n\n" + "x" * 30 + "  " + "y" * 30 + "\n"
    text += "x" * 30 + " " + "y" * 29 + "\n"
    assert reversed_pairs(text) == [
        ("To be, or not", "not or be, To"),
        ("x" * 30 + " " + "y" * 29, "y" * 29 + " " + "x" * 30),
    ]


def test_builtin_task_is_every_short_line_of_the_default_corpus_reversed() -> None:
    corpus = load_corpus(DEFAULT_PARALLEL)
    assert isinstance(corpus, ParallelCorpus) and corpus.name == DEFAULT_PARALLEL
    assert load_corpus(DEFAULT_PARALLEL) is corpus  # built once per process
    text = load_corpus(None)
    assert isinstance(text, Corpus)
    for pairs, part in ((corpus.train_pairs, text.train), (corpus.val_pairs, text.val)):
        docs = bytes(part.numpy()).decode().replace("\x00", "\n")  # documents end at NUL
        lines = {" ".join(ln.split()) for ln in docs.splitlines()}
        assert len(pairs) > 1000
        for i in range(0, len(pairs), 7):  # a seventh of them, to stay quick
            src, tgt = bytes(pairs.source(i)).decode(), bytes(pairs.target(i)).decode()
            assert src in lines and tgt.split() == src.split()[::-1]
            assert len(src.split()) >= 2 and len(src.encode()) <= 60
    # rebuilt from scratch it is the same data
    rebuilt = parallel_files._load_reversed()
    assert rebuilt.fingerprint == corpus.fingerprint and rebuilt.record()["corpus"] == DEFAULT_PARALLEL


# -- tokenizers ----------------------------------------------------------------------------------


def test_tokenized_copy_round_trips_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tokenizers")
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    par, tok = write_parallel_corpus(tmp_path / "p"), train_tiny_bpe(tmp_path / "tok" / "tokenizer.json")
    text = load_parallel(par)
    spec = resolve_data(par, tok)
    assert Path(spec).parent == tmp_path / "cache" / "parallel" and is_parallel_dir(Path(spec))
    assert task_of(spec) == "seq2seq" and vocab_size_of(spec) == 303
    corpus = load_corpus(spec)
    assert isinstance(corpus, ParallelCorpus) and corpus.base_vocab == 300 and corpus.vocab_size == 303
    assert corpus.samples(20) == text.samples(20)  # the text comes back from the ids
    assert len(corpus.train_pairs) == len(text.train_pairs) and corpus.train_pairs.src.dtype == torch.int32
    assert corpus.decode(corpus.encode("the king")) == "the king" and len(corpus.encode("the king")) < 8
    assert 1 < corpus.bytes_per_token < 8  # type: ignore[operator]
    rec = corpus.record()
    assert rec["corpus"] == str(par.resolve()) and rec["tokenizer"] == str(tok.resolve())
    assert rec["tokenizer_fingerprint"].startswith("sha256:") and rec["fingerprint"] != text.fingerprint
    x, y = corpus.batch(4, 16, torch.Generator().manual_seed(0))
    assert x.shape == (4, 32) and int(x[:, 16].min()) == int(x[:, 16].max()) == corpus.bos_id
    mtime = (Path(spec) / "pairs.npz").stat().st_mtime_ns
    assert resolve_data(par, tok) == spec and (Path(spec) / "pairs.npz").stat().st_mtime_ns == mtime  # cached
    assert load_corpus(spec).fingerprint == corpus.fingerprint
    with pytest.raises(UserError, match="already holds token ids"):
        resolve_data(spec, tok)


def test_tokenized_builtin_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in spec goes through the same cache; a small stand-in keeps the test quick
    (the real task takes seconds to tokenize)."""
    pytest.importorskip("tokenizers")
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    small = load_parallel(write_parallel_corpus(tmp_path / "p", n_train=20, n_val=4))
    stand_in = ParallelCorpus(
        DEFAULT_PARALLEL, small.train_pairs, small.val_pairs, source={"corpus": DEFAULT_PARALLEL}
    )
    monkeypatch.setitem(parallel_files._MEMO, DEFAULT_PARALLEL, stand_in)
    spec = resolve_data(DEFAULT_PARALLEL, train_tiny_bpe(tmp_path / "tokenizer.json"))
    corpus = load_corpus(spec)
    assert isinstance(corpus, ParallelCorpus) and corpus.record()["corpus"] == DEFAULT_PARALLEL
    assert corpus.samples(3) == small.samples(3) and stand_in.fingerprint[7:] in spec


def test_tokenizer_and_cache_mistakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    par = write_parallel_corpus(tmp_path / "p", n_train=5, n_val=2)

    class Broken:  # a tokenizer whose ids run past its vocabulary
        def __init__(self, vocab: int) -> None:
            self.vocab = vocab

        def get_vocab_size(self, with_added_tokens: bool) -> int:
            return self.vocab

        def encode_batch(self, texts: list[str], add_special_tokens: bool) -> list[types.SimpleNamespace]:
            return [types.SimpleNamespace(ids=[5, 50]) for _ in texts]

    import nas.data.tokenize as tokenize

    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    for vocab, message in (
        (10, "gives id 50, beyond its vocabulary of 10"),
        (1 << 31, "vocabulary 2,147,483,648"),
    ):
        monkeypatch.setattr(
            tokenize, "load_tokenizer", lambda path, v=vocab: (Broken(v), "sha256:" + "0" * 16)
        )
        with pytest.raises(UserError, match=message):
            resolve_data(par, tok)
    monkeypatch.setattr(tokenize, "load_tokenizer", lambda path: (Broken(64), "sha256:" + "1" * 16))
    spec = Path(resolve_data(par, tok))
    assert load_corpus(spec).train_pairs.source(0) == [5, 50]
    meta = json.loads((spec / "parallel.json").read_text())
    (spec / "parallel.json").write_text(json.dumps({**meta, "vocab_size": 40}))
    with pytest.raises(
        UserError, match=r"pairs.npz: corrupt or incomplete; delete .* \(id 50 is >= vocab_size 40\)"
    ):
        load_corpus(spec)
    (spec / "parallel.json").write_text("{")
    with pytest.raises(UserError, match="parallel.json: not valid JSON"):
        load_corpus(spec)
    (spec / "parallel.json").write_text(json.dumps({**meta, "format": "other"}))
    with pytest.raises(UserError, match="not a nas-lm-parallel/1 file"):
        vocab_size_of(spec)
    (spec / "parallel.json").write_text(json.dumps(meta))
    (spec / "pairs.npz").write_bytes(b"garbage")
    with pytest.raises(UserError, match="pairs.npz: corrupt or incomplete"):
        load_corpus(spec)


# -- both kinds: batch and validation ------------------------------------------------------------


def test_lm_corpus_methods_are_get_batch_and_validation_windows(corpus_dir: Path) -> None:
    corpus = load_corpus(corpus_dir)
    assert isinstance(corpus, Corpus)
    g1, g2, g3 = (torch.Generator().manual_seed(5) for _ in range(3))
    for _ in range(2):  # the same draws, batch after batch
        want = get_batch(corpus.train, 8, 32, g1)
        for got in (corpus.batch(8, 32, g2), train_batch(corpus, 8, 32, g3)):
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    want = validation_windows(corpus.val, 6, 32)
    for got in (corpus.validation(6, 32), validation_batches(corpus, 6, 32)):
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_helpers_serve_parallel_corpora_and_bare_test_doubles(tmp_path: Path, corpus_dir: Path) -> None:
    par = load_parallel(write_parallel_corpus(tmp_path / "p"))
    assert torch.equal(
        train_batch(par, 4, 8, torch.Generator().manual_seed(1))[0],
        par.batch(4, 8, torch.Generator().manual_seed(1))[0],
    )
    assert torch.equal(validation_batches(par, 3, 8)[1], par.validation(3, 8)[1])
    lm = load_corpus(corpus_dir)
    assert isinstance(lm, Corpus)
    double = types.SimpleNamespace(train=lm.train, val=lm.val)  # only tensors, no methods
    assert torch.equal(
        train_batch(double, 4, 8, torch.Generator().manual_seed(1))[0],
        get_batch(lm.train, 4, 8, torch.Generator().manual_seed(1))[0],
    )
    assert torch.equal(validation_batches(double, 3, 8)[0], validation_windows(lm.val, 3, 8)[0])
