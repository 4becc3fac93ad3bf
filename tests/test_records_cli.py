"""Records corpora through the CLI: a search on zstd JSON Lines shards and on a Parquet file, each tokenized
once; train on a save_to_disk directory; export and retrain read the records as the search did; every
mistake one line and exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from records_corpus import documents, write_hf, write_jsonl, write_parquet, write_zst_shards
from test_data_cli import TINY_SPACE, arch_file, refused, train_json

from nas.cli import main
from nas.files.archfile import load_arch_file

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tokens"


def entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock"))


def search(tmp_path: Path, data: Path, trials: int, *extra: str) -> int:
    return main(["search", "--space", str(TINY_SPACE), "--study", "rec", "--runs-dir", str(tmp_path / "runs"),
                 "--data", str(data), "--local", "--trials", str(trials), "--steps", "2",
                 "--sampler", "random", "--no-tensorboard", *extra])  # fmt: skip


@pytest.mark.timeout(300)
def test_a_search_on_zstd_json_lines_shards_tokenizes_them_once(tmp_path: Path, cache: Path, capsys) -> None:
    shards = write_zst_shards(tmp_path / "shards", documents(24), n_shards=4)
    assert search(tmp_path, shards, 1) == 0
    first = capsys.readouterr().err
    assert f"tokenizing {shards}: 24 records" in first and len(entries(cache)) == 1
    stamp = (cache / entries(cache)[0] / "train.bin").stat().st_mtime_ns
    assert search(tmp_path, shards, 2) == 0  # the study continues: the same data, read from the cache
    again = capsys.readouterr().err
    assert "tokenizing" not in again and len(entries(cache)) == 1
    assert (cache / entries(cache)[0] / "train.bin").stat().st_mtime_ns == stamp


@pytest.mark.timeout(300)
def test_a_search_on_a_parquet_file_is_tokenized_once_and_retrained_from_its_record(
    tmp_path: Path, cache: Path, capsys, monkeypatch
) -> None:
    """The text in another field and one bad row skipped: the export records both, so ``train --arch``
    with no flags reads the Parquet file as the search did and repeats its loss."""
    monkeypatch.chdir(tmp_path)
    texts = documents(20)
    texts[7] = ""  # an empty text: skipped, and said
    path = write_parquet(tmp_path / "corpus.parquet", {"content": texts, "text": ["decoy"] * 20})
    flags = ("--data.text_field", "content", "--data.on_bad_record", "skip")
    assert search(tmp_path, path, 1, *flags) == 0
    err = capsys.readouterr().err
    assert f"tokenizing {path}: 20 records" in err
    assert "field 'text' is empty: 1" not in err and "field 'content' is empty: 1 (first: " in err
    assert search(tmp_path, path, 2, *flags) == 0
    assert "tokenizing" not in capsys.readouterr().err and len(entries(cache)) == 1
    assert main(["export", "--study", "rec", "--runs-dir", "runs", "--best", "--out", "best.yaml"]) == 0
    capsys.readouterr()
    doc = load_arch_file("best.yaml")
    assert doc["data"]["corpus"] == str(path) and doc["data"]["vocab_size"] == 256
    assert doc["data"]["text_field"] == "content" and doc["data"]["on_bad_record"] == "skip"
    again = train_json(capsys, "--arch", "best.yaml")
    assert abs(again["val_loss"] - doc["metrics"]["val_loss"]) < 1e-4 and len(entries(cache)) == 1
    # the same study on the same file read as refusing bad records: refused in one line, naming the row
    refused(capsys, ["search", "--space", str(TINY_SPACE), "--study", "rec", "--runs-dir", "runs",
                     "--data", str(path), "--data.text_field", "content", "--local", "--trials", "3"],
            f"{path} row 7", "field 'content' is empty", "--data.on_bad_record skip")  # fmt: skip


def test_train_on_a_save_to_disk_directory(tmp_path: Path, cache: Path, capsys) -> None:
    hf = write_hf(tmp_path / "hf", documents(12))
    m = train_json(capsys, "--arch", str(arch_file(tmp_path / "a.yaml")), "--data", str(hf), "--steps", "2")
    assert m["vocab_size"] == 256 and m["corpus"] == str(hf) and len(entries(cache)) == 1


def test_records_mistakes_are_one_line_and_exit_2(tmp_path: Path, cache: Path, capsys, monkeypatch) -> None:
    arch = str(arch_file(tmp_path / "a.yaml"))
    good = [{"text": t} for t in documents(6)]
    bad = write_jsonl(tmp_path / "bad.jsonl.gz", [*good[:2], {"txt": "typo"}, *good[2:]], "gzip")
    refused(capsys, ["train", "--arch", arch, "--data", str(bad)], f"{bad} line 3", "no field 'text'")
    refused(capsys, ["train", "--arch", arch, "--data", str(bad), "--data.on_bad_record", "drop"],
            "--data.on_bad_record", "skip")  # fmt: skip
    text = tmp_path / "notes.txt"
    text.write_text("plain text\n" * 50)
    refused(capsys, ["train", "--arch", arch, "--data", str(text), "--data.text_field", "body"],
            "data.text_field applies to JSON Lines")  # fmt: skip
    zst = write_zst_shards(tmp_path / "z", documents(3))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as when it is not installed
    refused(capsys, ["train", "--arch", arch, "--data", str(zst)], "zstandard", "nas-lm[datasets]")
    runs = tmp_path / "runs"
    refused(capsys, ["search", "--space", str(TINY_SPACE), "--data", str(zst), "--local", "--runs-dir",
                     str(runs)], "zstandard", "nas-lm[datasets]")  # fmt: skip
    assert entries(cache) == [] and not runs.exists()
