"""nas.data for token files and tokenizers: loading, checks, batches, fingerprints, the tokenizer cache."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from interpreter import start_python
from token_corpus import token_stream, train_tiny_bpe, write_token_corpus

from nas.data import (
    Corpus,
    get_batch,
    load_corpus,
    resolve_data,
    same_data,
    validation_windows,
    vocab_size_of,
    write_token_dir,
)
from nas.data.tokens import DTYPES
from nas.errors import UserError
from nas.models import ArchConfig


def test_token_dir_is_memory_mapped_with_its_vocabulary(tmp_path: Path) -> None:
    corpus = load_corpus(write_token_corpus(tmp_path / "tok", vocab_size=1000, bytes_per_token=3.5))
    assert corpus.vocab_size == 1000 and corpus.bytes_per_token == 3.5
    assert corpus.train.dtype == torch.uint16 and len(corpus.train) == 20_000 and len(corpus.val) == 4_000
    assert torch.equal(corpus.val.long(), torch.from_numpy(token_stream(4_000, 1000, 1)))
    assert _mapped_from(corpus.train.data_ptr()) == tmp_path / "tok" / "train.bin"  # not a copy in memory
    assert vocab_size_of(str(tmp_path / "tok")) == 1000 and vocab_size_of(None) == 256
    assert "20,000 train tokens" in corpus.describe()


def _mapped_from(address: int) -> Path | None:
    """The file whose memory mapping holds ``address`` (Linux /proc/self/maps), or None."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if lo <= address < hi:
            return Path(fields[5]) if len(fields) == 6 else None
    return None


def test_big_vocabularies_use_uint32(tmp_path: Path) -> None:
    corpus = load_corpus(write_token_corpus(tmp_path / "tok", vocab_size=70_000))
    assert json.loads((tmp_path / "tok" / "meta.json").read_text())["dtype"] == "uint32"
    assert corpus.train.dtype == torch.uint32 and int(corpus.train.long().max()) >= 1 << 16
    x, _ = get_batch(corpus.train, 4, 32, torch.Generator().manual_seed(0))  # torch's uint32 ops suffice
    assert int(x.max()) < 70_000 and validation_windows(corpus.val, 2, 32)[0].shape == (2, 32)
    assert corpus.bytes_per_token is None  # not given: bits per byte cannot be known


def test_batches_from_token_files_are_seeded_windows(tmp_path: Path) -> None:
    corpus = load_corpus(write_token_corpus(tmp_path / "tok"))
    x1, y1 = get_batch(corpus.train, 8, 64, torch.Generator().manual_seed(1))
    x2, _ = get_batch(corpus.train, 8, 64, torch.Generator().manual_seed(1))
    assert x1.dtype == torch.int64 and x1.shape == (8, 64) and torch.equal(x1, x2)
    assert torch.equal(x1[:, 1:], y1[:, :-1])
    stream = corpus.train.long()
    for row in x1:  # every row is a window of the stream
        start = int(torch.nonzero((stream.unfold(0, 64, 1) == row).all(1))[0])
        assert torch.equal(stream[start : start + 64], row)
    vx, vy = validation_windows(corpus.val, 4, 64)
    assert torch.equal(vx.flatten(), corpus.val[:256].long()) and torch.equal(
        vy.flatten(), corpus.val[1:257].long()
    )


def test_byte_batches_are_the_same_as_before(corpus_dir: Path) -> None:
    """The window gather was rewritten for speed; byte corpora must give the same batches (same loss)."""
    data = load_corpus(corpus_dir).train
    g, ref = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    for _ in range(3):
        x, y = get_batch(data, 16, 32, g)
        starts = torch.randint(len(data) - 32, (16,), generator=ref)
        window = data[starts[:, None] + torch.arange(33)].long()  # the previous formula
        assert torch.equal(x, window[:, :-1]) and torch.equal(y, window[:, 1:])


def _no_meta(d: Path) -> str:
    (d / "meta.json").unlink()
    return "meta.json: missing"


def _unknown_dtype(d: Path) -> str:
    (d / "meta.json").write_text('{"vocab_size": 1000, "dtype": "int8"}')
    return "unknown dtype 'int8'"


def _dtype_too_small(d: Path) -> str:
    (d / "meta.json").write_text('{"vocab_size": 70000, "dtype": "uint16"}')
    return "too few for vocab_size 70,000"


def _id_out_of_range(d: Path) -> str:
    (d / "meta.json").write_text('{"vocab_size": 500, "dtype": "uint16"}')
    return "is >= vocab_size 500"


def _ragged_size(d: Path) -> str:
    with open(d / "train.bin", "ab") as f:
        f.write(b"\x01")
    return "not a multiple of 2"


def _empty_val(d: Path) -> str:
    (d / "val.bin").write_bytes(b"")
    return "val.bin: is empty"


def _no_train(d: Path) -> str:
    (d / "train.bin").unlink()
    return "train.bin: missing"


def _vocab_past_torch(d: Path) -> str:  # it was blamed on the architecture: "vanilla: vocab_size: ..."
    (d / "meta.json").write_text('{"vocab_size": 3000000000, "dtype": "uint32"}')
    return "meta.json: vocab_size 3,000,000,000 is more than"


def _name_not_text(d: Path) -> str:  # it was printed and recorded as "{'a': 1}"
    (d / "meta.json").write_text('{"vocab_size": 1000, "dtype": "uint16", "name": {"a": 1}}')
    return "meta.json: name must be a string"


def _train_a_directory(d: Path) -> str:  # it was called missing
    (d / "train.bin").unlink()
    (d / "train.bin").mkdir()
    return "train.bin: not a regular file"


def _byte_ends_fall(d: Path) -> str:  # it gave a negative bits per byte
    ends = np.arange(1, 4_001, dtype="<u8") * 3
    ends[100] = 7
    (d / "val_bytes.bin").write_bytes(ends.tobytes())
    return "val_bytes.bin: token 100 ends at byte 7, before the token (or the start) before it"


def _byte_ends_flat(d: Path) -> str:  # a division by zero after the training (a traceback)
    (d / "val_bytes.bin").write_bytes(np.zeros(4_000, "<u8").tobytes())
    return "val_bytes.bin: every validation token ends at byte 0 (none holds text)"


VALID_META = 'meta.json is a UTF-8 JSON object such as {"vocab_size": 50257'


def _meta_utf16(d: Path) -> str:  # Windows' "Unicode": it was "not readable JSON ('utf-8' codec can't ...)"
    (d / "meta.json").write_bytes('{"vocab_size": 1000, "dtype": "uint16"}'.encode("utf-16"))
    return (
        "meta.json: UTF-16 text, by its byte-order mark; save it as UTF-8; a token directory's " + VALID_META
    )


def _meta_not_utf8(d: Path) -> str:
    (d / "meta.json").write_bytes(b'{"vocab_size": 1000,\n "dtype": "uint16\xff"}')
    return "meta.json: not UTF-8 text (byte 0xff at line 2, column 18); a token directory's " + VALID_META


def _meta_empty(d: Path) -> str:
    (d / "meta.json").write_text("\n")
    return "meta.json: is empty; a token directory's " + VALID_META


def _meta_cut_short(d: Path) -> str:
    (d / "meta.json").write_text('{"vocab_size": 1000, "dty')
    return "meta.json: not valid JSON (Unterminated string"


def _meta_nested_deep(d: Path) -> str:  # json's recursive parser: a RecursionError traceback
    (d / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    return "meta.json: nested too deeply to be read; a token directory's " + VALID_META


def _meta_a_list(d: Path) -> str:
    (d / "meta.json").write_text('[1000, "uint16"]')
    return "meta.json: is a JSON list, not an object; a token directory's " + VALID_META


def _meta_a_directory(d: Path) -> str:  # it was called missing
    (d / "meta.json").unlink()
    (d / "meta.json").mkdir()
    return "meta.json: is a directory, not a file"


def _vocab_a_string(d: Path) -> str:
    (d / "meta.json").write_text('{"vocab_size": "1000", "dtype": "uint16"}')
    return "meta.json: vocab_size must be a positive integer, got '1000'"


def _bytes_per_token_negative(d: Path) -> str:
    (d / "meta.json").write_text('{"vocab_size": 1000, "dtype": "uint16", "bytes_per_token": -1}')
    return "meta.json: bytes_per_token must be a number of bytes from 0.001 to 1e6 (the text one token"


def _bytes_per_token_tiny(d: Path) -> str:  # printed "inf bits/byte"
    (d / "meta.json").write_text('{"vocab_size": 1000, "dtype": "uint16", "bytes_per_token": 1e-300}')
    return "bytes_per_token must be a number of bytes from 0.001 to 1e6 (the text one token stands for), got "


def _byte_ends_a_directory(d: Path) -> str:  # it was skipped without a word (bits per byte from the average)
    (d / "val_bytes.bin").mkdir()
    return "val_bytes.bin: is a directory, not a file"


def _byte_ends_a_fifo(d: Path) -> str:
    os.mkfifo(d / "val_bytes.bin")
    return "val_bytes.bin: is not a regular file"


@pytest.mark.parametrize(
    "spoil",
    [_no_meta, _unknown_dtype, _dtype_too_small, _id_out_of_range, _ragged_size, _empty_val, _no_train,
     _vocab_past_torch, _name_not_text, _train_a_directory, _byte_ends_fall, _byte_ends_flat, _meta_utf16,
     _meta_not_utf8, _meta_empty, _meta_cut_short, _meta_nested_deep, _meta_a_list, _meta_a_directory,
     _vocab_a_string, _bytes_per_token_negative, _bytes_per_token_tiny, _byte_ends_a_directory,
     _byte_ends_a_fifo],
)  # fmt: skip
def test_bad_token_files_are_one_line_errors(tmp_path: Path, spoil) -> None:
    d = write_token_corpus(tmp_path / "tok")
    expected = spoil(d)
    with pytest.raises(UserError) as info:
        load_corpus(d)
    assert expected in str(info.value) and str(d) in str(info.value) and "\n" not in str(info.value)


def test_a_meta_json_with_a_utf8_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Notepad's UTF-8 puts EF BB BF first; json refused it (YAML files were always read with one)."""
    d = write_token_corpus(tmp_path / "tok")
    plain = load_corpus(d)
    (d / "meta.json").write_bytes(b"\xef\xbb\xbf" + (d / "meta.json").read_bytes())
    corpus = load_corpus(d)
    assert corpus.vocab_size == 1000 and corpus.fingerprint == plain.fingerprint


def test_byte_ends_are_checked_in_a_sample_of_big_files(tmp_path: Path, monkeypatch) -> None:
    from nas.data import tokens

    monkeypatch.setattr(tokens, "FULL_CHECK", 1000)
    monkeypatch.setattr(tokens, "CHUNK", 100)
    ends, val = np.arange(1, 50_001, dtype=np.int64), np.zeros(50_000, np.int64)
    write_token_dir(tmp_path / "ok", np.zeros(10, np.int64), val, 500, val_byte_ends=ends)
    assert int(load_corpus(tmp_path / "ok").val_byte_ends[-1]) == 50_000
    ends[-100:] -= 49_000  # the last chunk, sampled, falls below the chunk before it
    write_token_dir(tmp_path / "tok", np.zeros(10, np.int64), val, 500, val_byte_ends=ends)
    with pytest.raises(UserError, match="token 49,900 ends at byte 901, before the token"):
        load_corpus(tmp_path / "tok")


def test_ids_are_checked_in_a_sample_of_big_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nas.data import tokens

    monkeypatch.setattr(tokens, "FULL_CHECK", 1000)  # a "big" file without writing gigabytes
    monkeypatch.setattr(tokens, "CHUNK", 100)
    train = np.zeros(50_000, np.int64)
    train[-1] = 999  # the last chunk is always sampled
    write_token_dir(tmp_path / "tok", train, np.zeros(10, np.int64), 500)
    with pytest.raises(UserError, match="token id 999 at position 49,999"):
        load_corpus(tmp_path / "tok")


def test_fingerprint_is_of_the_content_not_the_path(tmp_path: Path, corpus_dir: Path) -> None:
    a = load_corpus(write_token_corpus(tmp_path / "a"))
    b = load_corpus(write_token_corpus(tmp_path / "b", name="another name"))
    c = load_corpus(write_token_corpus(tmp_path / "c", n_train=20_001))
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert same_data(a.record(), b.record()) and not same_data(a.record(), c.record())
    text = load_corpus(corpus_dir)
    assert load_corpus(str(corpus_dir) + "/").fingerprint == text.fingerprint
    assert text.record()["corpus"] == str(corpus_dir.resolve())
    # Studies made before fingerprints recorded the --data string.
    assert same_data(str(corpus_dir), text.record()) and not same_data("shakespeare", text.record())


def test_big_files_are_fingerprinted_from_a_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nas.data import tokens

    monkeypatch.setattr(tokens, "_HASH_WHOLE", 1 << 12)
    monkeypatch.setattr(tokens, "_HASH_CHUNK", 1 << 8)
    d = write_token_corpus(tmp_path / "tok")
    before = load_corpus(d).fingerprint
    data = bytearray((d / "train.bin").read_bytes())
    data[0] ^= 1  # the first chunk is always hashed
    (d / "train.bin").write_bytes(bytes(data))
    assert load_corpus(d).fingerprint != before


def test_empty_data_spec_is_refused() -> None:
    for call in (lambda: load_corpus(""), lambda: resolve_data(" "), lambda: resolve_data(None, "")):
        with pytest.raises(UserError, match="is empty"):
            call()


def test_with_vocab() -> None:
    arch = ArchConfig.from_dict(
        {"d_model": 16, "n_heads": 2, "max_len": 8, "layers": {"repeat": 1, "attention": "mha"}}
    )
    assert arch.with_vocab(256) is arch
    bigger = arch.with_vocab(1000)
    assert bigger.vocab_size == 1000 and bigger.layers == arch.layers and bigger.arch_id != arch.arch_id


# -- tokenizers ----------------------------------------------------------------------------------


@pytest.fixture
def tokenizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    return train_tiny_bpe(tmp_path / "tok" / "tokenizer.json", vocab_size=300)


def test_tokenizer_makes_cached_token_files_once(tokenizer: Path, corpus_dir: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    spec = resolve_data(str(corpus_dir), str(tokenizer))
    assert Path(spec).parent == tmp_path / "cache" / "tokens"
    corpus = load_corpus(spec)
    text = load_corpus(corpus_dir)
    tok = Tokenizer.from_file(str(tokenizer))
    assert corpus.vocab_size == tok.get_vocab_size() == 300
    assert (
        tok.decode(corpus.val.tolist()) == bytes(text.val.numpy()).decode()
    )  # the validation text, losslessly
    assert corpus.bytes_per_token == pytest.approx(len(text.val) / len(corpus.val))
    assert corpus.record()["tokenizer"] == str(tokenizer.resolve())
    assert corpus.record()["corpus"] == str(corpus_dir.resolve())
    stamp = (Path(spec) / "train.bin").stat().st_mtime_ns
    assert resolve_data(str(corpus_dir), str(tokenizer)) == spec  # a cache hit: nothing rewritten
    assert (Path(spec) / "train.bin").stat().st_mtime_ns == stamp
    moved = tmp_path / "elsewhere.json"
    moved.write_bytes(tokenizer.read_bytes())
    again = load_corpus(resolve_data(str(corpus_dir), str(moved)))  # same content: same tokens, new path
    assert again.fingerprint == corpus.fingerprint and again.record()["tokenizer"] == str(moved.resolve())


def test_a_cache_entry_left_without_its_metadata_is_made_again(tokenizer: Path, corpus_dir: Path) -> None:
    spec = Path(resolve_data(str(corpus_dir), str(tokenizer)))
    good = load_corpus(spec).fingerprint
    (spec / "meta.json").unlink()  # a tokenization cut short, or a meta.json removed by hand
    (spec / "train.bin").write_bytes(b"half")
    assert Path(resolve_data(str(corpus_dir), str(tokenizer))) == spec  # no traceback: rebuilt in place
    assert load_corpus(spec).fingerprint == good
    assert sorted(p.name for p in spec.parent.iterdir() if p.name.startswith(".")) == []  # nothing left aside


def test_a_corrupt_cache_entry_says_deleting_it_fixes_it(
    tokenizer: Path, corpus_dir: Path, tmp_path: Path
) -> None:
    """A cache entry whose files were damaged (its metadata intact): the line says it is the tool's
    cache and that deleting it rebuilds it; the same damage in a user's token directory gets no such hint."""
    import shutil

    spec = Path(resolve_data(str(corpus_dir), str(tokenizer)))
    (spec / "val.bin").write_bytes(b"")  # emptied by a disk fault, say
    with pytest.raises(UserError) as info:
        load_corpus(spec)
    message = str(info.value)
    assert "\n" not in message and f"{spec} is this tool's cache" in message and "delete it" in message
    shutil.rmtree(spec)
    assert load_corpus(resolve_data(str(corpus_dir), str(tokenizer))).fingerprint  # made again
    for damaged in ("[1000]", "[" * 100_000 + "]" * 100_000):  # read on a cache hit: a traceback
        (spec / "meta.json").write_text(damaged)
        with pytest.raises(UserError) as info:
            resolve_data(str(corpus_dir), str(tokenizer))
        message = str(info.value)
        assert message.startswith(f"{spec / 'meta.json'}: ") and f"{spec} is this tool's cache" in message
    shutil.rmtree(spec)
    assert load_corpus(resolve_data(str(corpus_dir), str(tokenizer))).fingerprint  # made again
    mine = write_token_corpus(tmp_path / "mine")
    (mine / "val.bin").write_bytes(b"")
    with pytest.raises(UserError) as info:
        load_corpus(mine)
    assert "this tool's cache" not in str(info.value)


def test_tokenizer_errors(tokenizer: Path, corpus_dir: Path, tmp_path: Path, monkeypatch) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cases = [
        (str(tmp_path / "nope.json"), str(corpus_dir), "not found"),
        (str(bad), str(corpus_dir), "not a Hugging Face tokenizers file"),
        (str(tokenizer), str(write_token_corpus(tmp_path / "ids")), "already holds token ids"),
    ]
    for tok, data, expected in cases:
        with pytest.raises(UserError, match=expected) as info:
            resolve_data(data, tok)
        assert "\n" not in str(info.value)
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if not installed
    with pytest.raises(UserError, match="pip install tokenizers"):
        resolve_data(str(corpus_dir), str(tokenizer))


TOKENIZER_VALID = (
    "; --tokenizer takes a Hugging Face tokenizers file (tokenizer.json, as Tokenizer.save writes it)"
)


@pytest.mark.parametrize(
    "spoil,expected",
    [
        # each was "cannot read it ('utf-8' codec can't decode byte 0xff ...)" or a parser's words alone
        (lambda p: p.write_bytes(p.read_text().encode("utf-16")), "UTF-16 text, by its byte-order mark"),
        (lambda p: p.write_bytes(b""), "is empty"),
        (
            lambda p: p.write_bytes(p.read_bytes()[:300]),
            "not a Hugging Face tokenizers file (EOF while parsing",
        ),
        (lambda p: p.write_bytes(b"\x00\x9c" * 64), "not UTF-8 text (byte 0x9c at line 1, column 2)"),
        (
            lambda p: p.write_text('{"vocab_size": 300, "dtype": "uint16"}'),
            "not a Hugging Face tokenizers file",
        ),
        (lambda p: (p.unlink(), p.mkdir()), "is a directory, not a file"),
        (lambda p: (p.unlink(), os.mkfifo(p)), "is not a regular file"),  # open() would block on it
    ],
    ids=["utf16", "empty", "cut-short", "binary", "not-a-tokenizer", "a-directory", "a-fifo"],
)
def test_a_bad_tokenizer_file_is_one_line_naming_it_and_what_is_valid(
    tokenizer: Path, corpus_dir: Path, spoil, expected: str
) -> None:
    spoil(tokenizer)
    with pytest.raises(UserError) as info:
        resolve_data(str(corpus_dir), str(tokenizer))
    message = str(info.value)
    assert message.startswith(f"--tokenizer {tokenizer}: ") and expected in message, message
    assert message.endswith(TOKENIZER_VALID) and "\n" not in message


def test_a_tokenizer_with_a_utf8_byte_order_mark_tokenizes_as_without(
    tokenizer: Path, corpus_dir: Path, tmp_path: Path
) -> None:
    plain = load_corpus(resolve_data(str(corpus_dir), str(tokenizer)))
    marked = tmp_path / "marked.json"
    marked.write_bytes(b"\xef\xbb\xbf" + tokenizer.read_bytes())  # the tokenizers parser refused it
    again = load_corpus(resolve_data(str(corpus_dir), str(marked)))
    assert torch.equal(again.train, plain.train) and torch.equal(again.val, plain.val)


def test_corpus_defaults_keep_byte_corpora_as_they_were() -> None:
    data = torch.tensor(list(b"hello world"), dtype=torch.uint8)
    corpus = Corpus("x", data[:8], data[8:], 1, ())
    assert (
        corpus.vocab_size == 256
        and corpus.bytes_per_token == 1.0
        and corpus.fingerprint.startswith("sha256:")
    )
    assert DTYPES["uint16"].itemsize == 2


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_full_disk_while_tokenizing_is_one_line_and_leaves_no_entry(
    tmp_path: Path, corpus_dir: Path
) -> None:
    """The token cache written under a file-size limit (as a full disk): one line, exit 2, no half-made
    entry; once there is room the same command tokenizes and trains (it used to end in a traceback)."""
    import os
    import subprocess

    tok = train_tiny_bpe(tmp_path / "tok.json")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "NAS_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(root)}
    argv = ["train", "--arch", "vanilla", "--data", str(corpus_dir), "--tokenizer", str(tok), "--steps", "1",
            "--threads", "1"]  # fmt: skip
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4000, 4000))\n"
        "from nas.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    full = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=300
    )
    assert full.returncode == 2, full.stderr
    lines = full.stderr.strip().splitlines()
    assert len(lines) == 1 and "no room left to write" in lines[0] and "Traceback" not in full.stderr
    entries = [p for p in (tmp_path / "cache" / "tokens").iterdir() if not p.name.endswith(".lock")]
    assert entries == []  # nothing half-written (the temporary directory removed)
    ok = subprocess.run([sys.executable, "-m", "nas.cli", *argv], capture_output=True, text=True, env=env,
                        timeout=300)  # fmt: skip
    assert ok.returncode == 0, ok.stderr


def test_bits_per_byte_divide_by_the_bytes_of_exactly_the_scored_text(
    tokenizer: Path, tmp_path: Path
) -> None:
    """The validation text's average bytes per token is not that of its first windows (0.9 to 2.6%
    apart on Shakespeare): the byte ends of each validation token give the scored text's bytes."""
    from tokenizers import Tokenizer

    from nas.data import scored_bytes_per_token, validation_batches
    from nas.data.tokens import VAL_BYTES

    text = tmp_path / "text"
    text.mkdir()
    # multi-byte characters of every UTF-8 length, denser in some documents than others
    for i in range(6):
        words = ["plain ascii words here"] * (20 + 30 * i) + ["naïve café — ☃ 𝄞 ünïcödé"] * (40 - 5 * i)
        (text / f"d{i}.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    spec = resolve_data(str(text), str(tokenizer))
    corpus = load_corpus(spec)
    tok = Tokenizer.from_file(str(tokenizer))
    ends = corpus.val_byte_ends
    assert ends is not None and len(ends) == len(corpus.val)
    val = corpus.val.tolist()
    for n in (1, 7, 100, len(val) - 1):  # the bytes of tokens 1..n, decoded, are the ends' difference
        assert int(ends[n] - ends[0]) == len(tok.decode(val[1 : n + 1]).encode("utf-8"))
    assert int(ends[-1]) == len(tok.decode(val).encode("utf-8"))
    x, y = validation_batches(corpus, 3, 16)
    exact = len(tok.decode(val[1 : y.numel() + 1]).encode("utf-8")) / y.numel()
    assert scored_bytes_per_token(corpus, y) == pytest.approx(exact, rel=1e-12)
    assert abs(exact - corpus.bytes_per_token) > 1e-3  # the average would have been another number
    # a byte-ends file of other tokens is one line, naming the fix
    (Path(spec) / VAL_BYTES).write_bytes(b"\0" * 8)
    with pytest.raises(UserError, match=f"{VAL_BYTES}: 8 bytes, not 8 per validation token.*delete it"):
        load_corpus(spec)
    (Path(spec) / VAL_BYTES).unlink()  # without it: the average, as a nanoGPT directory gives
    plain = load_corpus(spec)
    assert plain.val_byte_ends is None and scored_bytes_per_token(plain, y) == plain.bytes_per_token


def test_a_stray_byte_counts_as_the_one_byte_it_is(tokenizer: Path, tmp_path: Path) -> None:
    """A text document may hold a few bytes that are not UTF-8; the tokenizer reads each as U+FFFD, whose
    three bytes the byte ends counted in its place (bits per byte too low)."""
    from tokenizers import Tokenizer

    text = tmp_path / "text"
    text.mkdir()
    for i in range(5):
        # a stray byte, and two that begin a three-byte character cut short (one U+FFFD for both)
        (text / f"d{i}.txt").write_bytes(b"plain words, all fine\n" * 300 + b"caf\xe9, \xe2\x82 cut\n" * 2)
    raw = load_corpus(text).val
    size = len(bytes(raw.numpy()).replace(b"\0", b""))
    corpus = load_corpus(resolve_data(str(text), str(tokenizer)))
    assert int(corpus.val_byte_ends[-1]) == size
    assert corpus.bytes_per_token == pytest.approx(size / len(corpus.val), rel=1e-12)
    # the ids are the tokenizer's on the text with U+FFFD in place of the byte, as they always were
    replaced = bytes(raw.numpy()).decode("utf-8", errors="replace")
    assert corpus.val.tolist() == Tokenizer.from_file(str(tokenizer)).encode(replaced).ids


def test_a_tokenization_killed_while_it_wrote_leaves_nothing_after_the_next_one(
    tokenizer: Path, corpus_dir: Path
) -> None:
    """SIGKILL (or a power loss) while an entry was written: its temporary directory, as large as the
    tokenized corpus, used to stay in the cache for good; the next tokenization removes it."""
    import shutil
    import subprocess

    spec = Path(resolve_data(str(corpus_dir), str(tokenizer)))
    shutil.rmtree(spec)
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from nas.files.outputs import partial\n"
        "held = partial(Path(sys.argv[1]), sys.argv[2], directory=True)\n"  # as written_whole does
        "d = held.__enter__()\n"
        "(d / 'train.bin').write_bytes(b'half')\n"
        "print(d, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = start_python(code, str(spec.parent), spec.name, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    left = Path(proc.stdout.readline().strip())
    proc.kill()
    proc.communicate(timeout=60)
    assert (left / "train.bin").is_file()
    assert Path(resolve_data(str(corpus_dir), str(tokenizer))) == spec
    assert not left.exists() and (spec / "meta.json").is_file()


def test_write_token_dir_takes_a_str_path_as_the_docs_write_it(tmp_path: Path, monkeypatch) -> None:
    """docs/data.md: `nas.data.write_token_dir(path, ...)`; a str was an AttributeError (no .parent)."""
    monkeypatch.chdir(tmp_path)
    out = write_token_dir("owt", np.arange(300) % 100, np.arange(50) % 100, 100, bytes_per_token=4.0)
    assert out == Path("owt")
    corpus = load_corpus(tmp_path / "owt")
    assert corpus.vocab_size == 100
    assert json.loads((tmp_path / "owt" / "meta.json").read_text())["bytes_per_token"] == 4.0


def test_a_meta_json_name_prints_on_one_line_and_keys_not_read_are_named(tmp_path: Path) -> None:
    """A name with a newline was printed raw (a second line of output); a key this tool does not read was
    ignored without a word."""
    d = write_token_corpus(tmp_path / "tok")
    meta = json.loads((d / "meta.json").read_text())
    (d / "meta.json").write_text(json.dumps({**meta, "name": "web\ntext\x1b[2J", "tokenizer": "gpt2"}))
    corpus = load_corpus(d)
    line = corpus.describe()
    assert "\n" not in line and "\x1b" not in line and line.startswith("web\\ntext\\x1b[2J: ")
    assert "left out meta.json's 'tokenizer' (not read)" in line
    assert "left out" not in load_corpus(write_token_corpus(tmp_path / "plain")).describe()
