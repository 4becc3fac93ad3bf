"""JSON Lines, Parquet and datasets corpora: read by content and suffix, streamed into the token cache once,
split by document as text corpora are, and every bad record named, then refused or skipped."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from records_corpus import documents, jsonl_bytes, write_hf, write_jsonl, write_parquet, write_zst_shards
from synthetic_text import write_corpus
from token_corpus import train_tiny_bpe

import nas.data.ingest as ingest
from nas.data import load_corpus, resolve_data
from nas.data.progress import Progress
from nas.data.records import is_records
from nas.errors import UserError


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tokens"


def entries(cache: Path) -> list[str]:
    """What the token cache holds besides lock files: finished entries and anything half-written."""
    return sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock")) if cache.exists() else []


def text_dir(root: Path, texts: list[str]) -> Path:
    """The same documents as a directory of text files, named in record order."""
    root.mkdir(parents=True)
    for i, t in enumerate(texts):
        (root / f"doc_{i:03d}.txt").write_text(t, encoding="utf-8")
    return root


def ids(spec: str, part: str) -> np.ndarray:
    return load_corpus(spec).__getattribute__(part).numpy().astype(np.int64)


# -- what is read, and how it is split -----------------------------------------------------------


@pytest.mark.parametrize("n_docs", [1, 3, 6, 12, 27])
def test_records_split_and_tokenize_as_text_files_do(tmp_path: Path, n_docs: int, monkeypatch) -> None:
    """Records are documents: the same texts as text files give the same training and validation tokens,
    byte ends and bytes per token, through a tokenizer and as bytes, whatever the batch size."""
    texts = documents(n_docs)
    tok = train_tiny_bpe(tmp_path / "tok.json")
    files = text_dir(tmp_path / "txt", texts)
    monkeypatch.setattr(ingest, "BATCH_CHARS", 500)  # many batches: the stream's seams change nothing
    shards = write_zst_shards(tmp_path / "shards", texts, n_shards=min(3, n_docs))
    for tokenizer in (str(tok), None):
        want, got = resolve_data(str(files), tokenizer), resolve_data(str(shards), tokenizer)
        for part in ("train", "val"):
            assert np.array_equal(ids(want, part), ids(got, part)), (part, tokenizer)
        a, b = load_corpus(want), load_corpus(got)
        assert a.bytes_per_token == pytest.approx(b.bytes_per_token)
        if tokenizer:
            assert np.array_equal(a.val_byte_ends.numpy(), b.val_byte_ends.numpy())


def test_every_format_gives_the_same_tokens(tmp_path: Path, cache: Path) -> None:
    """JSON Lines (plain, gzip, zstd, misnamed), Parquet (string and binary columns, several row groups)
    and a save_to_disk directory holding the same texts are one corpus: one fingerprint."""
    texts = documents(14)
    recs = [{"text": t} for t in texts]
    paths = [
        write_jsonl(tmp_path / "a.jsonl", recs),
        write_jsonl(tmp_path / "b.jsonl.gz", recs, "gzip"),
        write_jsonl(tmp_path / "c.jsonl.zst", recs, "zst"),
        write_jsonl(tmp_path / "d.jsonl", recs, "gzip"),  # compression read from the content
        write_parquet(tmp_path / "e.parquet", {"text": texts}, row_group_size=4),
        write_parquet(tmp_path / "f.bin", {"text": [t.encode() for t in texts]}),  # PAR1 magic, binary
        write_hf(tmp_path / "hf", texts),
    ]
    assert all(is_records(p) for p in paths) and not is_records(write_corpus(tmp_path / "txt", 2))
    prints = {load_corpus(resolve_data(str(p))).fingerprint for p in paths}
    assert len(prints) == 1
    # keyed by the files' content: d.jsonl holds b.jsonl.gz's bytes, so the two share one entry
    assert len(entries(cache)) == len(paths) - 1


def test_a_byte_order_mark_and_windows_line_ends_are_read_past(tmp_path: Path) -> None:
    texts = documents(7)
    plain = write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in texts])
    (tmp_path / "b.jsonl").write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))
    a, b = (load_corpus(resolve_data(str(tmp_path / n))) for n in ("a.jsonl", "b.jsonl"))
    assert a.fingerprint == b.fingerprint


def test_a_dataset_dict_reads_its_train_split(tmp_path: Path) -> None:
    import datasets

    texts = documents(8)
    datasets.disable_progress_bars()
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": texts}),
            "test": datasets.Dataset.from_dict({"text": ["x"]}),
        }
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    got = load_corpus(resolve_data(str(tmp_path / "dd")))
    assert got.fingerprint == load_corpus(resolve_data(str(write_hf(tmp_path / "hf", texts)))).fingerprint
    no_train = datasets.DatasetDict({"test": datasets.Dataset.from_dict({"text": ["x"]})})
    no_train.save_to_disk(str(tmp_path / "dd2"))
    with pytest.raises(UserError, match="without a train split .splits: test.; give the split's directory"):
        resolve_data(str(tmp_path / "dd2"))


def test_the_text_field_is_chosen_and_recorded(tmp_path: Path) -> None:
    texts = documents(8)
    path = write_parquet(tmp_path / "x.parquet", {"content": texts, "text": ["other"] * 8})
    spec = resolve_data(str(path), text_field="content")
    corpus = load_corpus(spec)
    assert corpus.fingerprint == load_corpus(resolve_data(str(write_hf(tmp_path / "hf", texts)))).fingerprint
    assert corpus.record()["text_field"] == "content" and "on_bad_record" not in corpus.record()
    with pytest.raises(UserError, match="data.text_field applies to JSON Lines, Parquet and datasets"):
        resolve_data(str(write_corpus(tmp_path / "txt", 2)), text_field="content")


def test_tokenized_once_then_read_from_the_cache(tmp_path: Path, cache: Path) -> None:
    shards = write_zst_shards(tmp_path / "s", documents(9))
    out, err = io.StringIO(), io.StringIO()
    first = ingest.tokenize_records(shards, stream=out)
    stamp = (first / "train.bin").stat().st_mtime_ns
    assert ingest.tokenize_records(shards, stream=err) == first
    assert "tokenizing" in out.getvalue() and err.getvalue() == ""
    assert (first / "train.bin").stat().st_mtime_ns == stamp and entries(cache) == [first.name]
    write_jsonl(shards / "shard-009.jsonl", [{"text": "one more document"}])  # new content: a new entry
    assert ingest.tokenize_records(shards, stream=err) != first


def test_what_is_held_at_once_is_a_batch_whatever_the_corpus(tmp_path: Path, monkeypatch) -> None:
    """Memory is bounded by the batch: the writer never holds more than BATCH_CHARS characters and one
    record, and tokens reach the files batch by batch, not at the end."""
    held, written = [], []
    flush = ingest._Writer.flush

    def watched(self) -> None:
        held.append(self.chars)
        flush(self)
        written.append(sum(f.tell() for f in self.out.values()))

    monkeypatch.setattr(ingest._Writer, "flush", watched)
    monkeypatch.setattr(ingest, "BATCH_CHARS", 3000)
    texts = documents(60)
    ingest.tokenize_records(write_zst_shards(tmp_path / "s", texts), stream=io.StringIO())
    assert len(held) > 10 and max(held) < 3000 + max(map(len, texts))
    assert written == sorted(written) and 0 < written[0] < written[-1] / 10


def test_a_parquet_file_is_read_a_row_group_at_a_time(tmp_path: Path) -> None:
    """pyarrow's reader, left to its defaults, buffered every row group of the file before the first
    batch: memory grew with the file.  Arrow's own allocations stay near one row group's column."""
    import subprocess

    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz      ", dtype=np.uint8)
    texts = [letters[rng.integers(0, 32, 2000)].tobytes().decode() for _ in range(12_000)]  # 24 MB
    path = write_parquet(tmp_path / "big.parquet", {"text": texts}, row_group_size=500)  # 1 MB groups
    del texts
    code = (
        "import io, sys, pyarrow as pa\n"
        "from nas.data.ingest import tokenize_records\n"
        "tokenize_records(sys.argv[1], stream=io.StringIO())\n"
        "print(pa.default_memory_pool().max_memory())\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert path.stat().st_size > 20e6 and int(out.stdout.split()[-1]) < path.stat().st_size / 2


# -- bad records ---------------------------------------------------------------------------------

GOOD = [{"text": t} for t in documents(7, n_words=30)]
BAD_LINES = {  # kind: (the bad line, what the message says)
    "not_json": (b"{not json", "not a JSON object"),
    "missing": (b'{"body": "no text here"}', "no field 'text'"),
    "not_string": (b'{"text": 42}', "field 'text' is not a string"),
    "invalid_utf8": (b'{"text": "caf\xe9"}', "invalid UTF-8"),
    "empty": (b'{"text": "  "}', "field 'text' is empty"),
    "surrogate": (b'{"text": "\\ud800"}', "invalid UTF-8"),
}


def jsonl_with(tmp_path: Path, line: bytes) -> Path:
    """A shard whose 4th line is ``line``."""
    raw = jsonl_bytes(GOOD[:3]) + line + b"\n" + jsonl_bytes(GOOD[3:])
    (tmp_path / "c").mkdir(exist_ok=True)
    (tmp_path / "c" / "part.jsonl").write_bytes(raw)
    return tmp_path / "c"


def truncated_gzip(tmp_path: Path) -> Path:
    big = [{"text": t} for t in documents(40, n_words=400)]
    path = write_jsonl(tmp_path / "c" / "part.jsonl.gz", big, "gzip")
    path.write_bytes(path.read_bytes()[:-200])
    return tmp_path / "c"


def truncated_parquet(tmp_path: Path) -> Path:
    path = write_parquet(tmp_path / "c" / "part.parquet", {"text": documents(5)})
    path.write_bytes(path.read_bytes()[:-30])
    return tmp_path / "c"


def truncated_arrow(tmp_path: Path) -> Path:
    hf = write_hf(tmp_path / "c", documents(9))
    shard = sorted(hf.glob("*.arrow"))[1]
    shard.write_bytes(shard.read_bytes()[:-60])
    return hf


CASES = {  # name: (make the corpus, where the first bad record is, what is said, good records left)
    **{
        kind: (lambda tmp, line=line: jsonl_with(tmp, line), "c/part.jsonl line 4", said, 7)
        for kind, (line, said) in BAD_LINES.items()
    },
    "jsonl_cut": (lambda tmp: jsonl_with(tmp, b""), "", "", 7),  # placeholder replaced below
    "gzip_truncated": (truncated_gzip, "c/part.jsonl.gz line", "truncated or damaged shard", None),
    "parquet_truncated": (truncated_parquet, "c/part.parquet row 0", "truncated or damaged shard", 0),
    "parquet_missing": (
        lambda tmp: write_parquet(tmp / "c" / "p.parquet", {"body": ["a", "b"]}).parent,
        "c/p.parquet row 0",
        "no field 'text'",
        0,
    ),
    "parquet_null": (
        lambda tmp: write_parquet(tmp / "c" / "p.parquet", {"text": ["a b", None, "c d"]}).parent,
        "c/p.parquet row 1",
        "field 'text' is not a string (null)",
        2,
    ),
    "parquet_binary_not_utf8": (
        lambda tmp: write_parquet(tmp / "c" / "p.parquet", {"text": [b"ok", b"ok", b"\xff\xfe"]}).parent,
        "c/p.parquet row 2",
        "invalid UTF-8",
        2,
    ),
    "parquet_empty": (
        lambda tmp: write_parquet(tmp / "c" / "p.parquet", {"text": ["a b", "", "c d"]}).parent,
        "c/p.parquet row 1",
        "field 'text' is empty",
        2,
    ),
    "parquet_int_column": (
        lambda tmp: write_parquet(tmp / "c" / "p.parquet", {"text": [1, 2]}).parent,
        "c/p.parquet row 0",
        "not a string (a column of int64)",
        0,
    ),
    "arrow_truncated": (
        truncated_arrow,
        "c/data-00001-of-00002.arrow row 0",
        "truncated or damaged shard",
        None,
    ),
}


def cut_last_line(tmp_path: Path) -> Path:
    """A plain shard whose last line is cut short (no newline): the writer stopped mid-record."""
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "part.jsonl").write_bytes(jsonl_bytes(GOOD) + b'{"text": "cut sho')
    return tmp_path / "c"


CASES["jsonl_cut"] = (
    cut_last_line,
    "c/part.jsonl line 8",
    "truncated or damaged shard (its last line is cut",
    7,
)


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_record_is_named_then_refused_or_skipped(tmp_path: Path, cache: Path, case: str) -> None:
    make, where, said, good = CASES[case]
    corpus = make(tmp_path)
    with pytest.raises(UserError) as info:
        resolve_data(str(corpus))
    message = str(info.value)
    assert "\n" not in message and f"{tmp_path}/{where}" in message and said in message, message
    assert "--data.on_bad_record skip" in message
    assert entries(cache) == []  # nothing half-written stays

    if good == 0:  # no record gives text: skipping leaves nothing to train on, said in one line
        with pytest.raises(UserError, match="no record gives text .1 bad record|no record gives text .2 bad"):
            resolve_data(str(corpus), on_bad_record="skip")
        assert entries(cache) == []
        return
    err = io.StringIO()
    spec = ingest.tokenize_records(corpus, on_bad_record="skip", stream=err)
    meta = json.loads((spec / "meta.json").read_text())
    ((kind, first),) = meta["bad_records"].items()
    assert first["first"] == f"{tmp_path}/{where}" or first["first"].startswith(f"{tmp_path}/{where}")
    if good is not None:
        assert first["count"] == 1 and meta["records"]["documents"] == good
    note = err.getvalue()
    assert "skipped 1 bad record(s): " in note and f"{said.split(' (')[0]}: 1 (first: " in note
    assert load_corpus(str(spec)).record()["on_bad_record"] == "skip"
    # the entry made under skip is not used to pass a run that refuses bad records
    with pytest.raises(UserError, match="bad record.s. in all"):
        resolve_data(str(corpus))


def test_every_bad_record_is_counted_and_the_first_of_each_kind_named(tmp_path: Path) -> None:
    lines = [jsonl_bytes([g]) for g in GOOD] + [b'{"text": 1}\n', b'{"x": 1}\n', b'{"text": 2}\n', b"\n"]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "p.jsonl").write_bytes(b"".join(lines))  # a blank line is no record: not counted
    spec = ingest.tokenize_records(tmp_path / "c", on_bad_record="skip", stream=io.StringIO())
    bad = json.loads((spec / "meta.json").read_text())["bad_records"]
    assert bad["not_string"]["count"] == 2 and bad["not_string"]["first"].endswith("p.jsonl line 8")
    assert bad["missing"]["count"] == 1 and bad["missing"]["first"].endswith("p.jsonl line 9")


def test_an_interrupted_tokenization_leaves_nothing(tmp_path: Path, cache: Path, monkeypatch) -> None:
    shards = write_zst_shards(tmp_path / "s", documents(30))
    monkeypatch.setattr(ingest, "BATCH_CHARS", 200)  # tokens are on disk when the interrupt comes
    calls = []

    def interrupt(self, records: int, done: int, tokens: int) -> None:
        calls.append(tokens)
        if records == 20:
            raise KeyboardInterrupt

    monkeypatch.setattr(Progress, "update", interrupt)
    with pytest.raises(KeyboardInterrupt):
        resolve_data(str(shards))
    assert calls[-1] > 0 and entries(cache) == []
    monkeypatch.undo()
    monkeypatch.setenv("NAS_CACHE_DIR", str(cache.parent))
    assert load_corpus(resolve_data(str(shards))).n_docs == 0 and len(entries(cache)) == 1


# -- reporting -----------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream", [Terminal, io.StringIO])
def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere(tmp_path: Path, stream, monkeypatch) -> None:
    import nas.data.progress as progress

    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    monkeypatch.setattr(progress, "_REDRAW_S", 0.0)
    out = stream()
    ingest.tokenize_records(write_zst_shards(tmp_path / "s", documents(12), n_shards=4), stream=out)
    text = out.getvalue()
    assert "records" in text and "tokens/s" in text and "left" in text and " of " in text
    assert ("\r" in text) == (stream is Terminal) and ("[#" in text) == (stream is Terminal)
    assert text.splitlines()[-1].startswith(f"tokenizing {tmp_path}/s: 12 records")


def test_a_missing_reader_package_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch) -> None:
    shards = write_zst_shards(tmp_path / "s", documents(3))
    parquet = write_parquet(tmp_path / "p.parquet", {"text": ["a"]})
    hf = write_hf(tmp_path / "hf", ["a", "b"])
    for module, path in (("zstandard", shards), ("pyarrow.parquet", parquet), ("datasets", hf)):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as when it is not installed
        with pytest.raises(UserError) as info:
            resolve_data(str(path))
        assert f"needs the {module.split('.')[0]} package" in str(info.value)
        assert "pip install 'nas-lm[datasets]'" in str(info.value) and "\n" not in str(info.value)
        monkeypatch.delitem(sys.modules, module)
