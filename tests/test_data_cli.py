"""Data through the CLI: token files and tokenizers in train and search, data identity, export/retrain."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from token_corpus import train_tiny_bpe, write_token_corpus

import nas
from nas.cli import main
from nas.files.archfile import load_arch_file

ROOT = Path(__file__).resolve().parents[1]
TINY_SPACE = ROOT / "tests" / "search" / "tiny_space.yaml"
pytestmark = pytest.mark.usefixtures("single_thread")


def arch_file(path: Path) -> Path:
    doc = {
        "arch": {"d_model": 32, "n_heads": 2, "max_len": 32, "layers": {"repeat": 1, "attention": "mha"}},
        "recipe": {"batch_size": 4, "eval_batches": 2, "log_every": 1, "seq_len": 32},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def train_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["train", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], *words: str) -> str:
    """Exit 2 with one line on stderr holding every word, nothing on stdout, no traceback."""
    try:  # argparse refuses a flag's value itself (exit 2); the rest return 2
        code = main(argv)
    except SystemExit as info:
        code = info.code
    assert code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err


def test_train_takes_the_vocabulary_from_token_files(tmp_path: Path, capsys) -> None:
    data = write_token_corpus(tmp_path / "tok", vocab_size=1000)
    m = train_json(capsys, "--arch", str(arch_file(tmp_path / "a.yaml")), "--data", str(data), "--steps", "2")
    arch = nas.load_arch(tmp_path / "a.yaml").with_vocab(1000)
    assert m["vocab_size"] == 1000 and m["params"] == nas.compute(arch).params
    assert m["arch_id"] == arch.arch_id and m["corpus"] == str(data)


def test_train_with_a_tokenizer(tmp_path: Path, corpus_dir: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    tok = train_tiny_bpe(tmp_path / "tokenizer.json", vocab_size=300)
    argv = ["--arch", str(arch_file(tmp_path / "a.yaml")), "--data", str(corpus_dir), "--tokenizer", str(tok)]
    m = train_json(capsys, *argv, "--steps", "2")
    assert m["vocab_size"] == 300 and "tokenized by tokenizer.json" in m["corpus"]


def test_empty_and_bad_data_are_refused(tmp_path: Path, capsys) -> None:
    arch = str(arch_file(tmp_path / "a.yaml"))
    refused(capsys, ["train", "--arch", arch, "--data", ""], "--data: is empty")
    bad = write_token_corpus(tmp_path / "tok")
    (bad / "meta.json").write_text('{"vocab_size": 100, "dtype": "uint16"}')
    refused(capsys, ["train", "--arch", arch, "--data", str(bad)], "meta.json", ">= vocab_size 100")
    refused(
        capsys,
        ["train", "--arch", arch, "--tokenizer", str(tmp_path / "nope.json")],
        "--tokenizer",
        "not found",
    )
    runs = tmp_path / "runs"
    refused(
        capsys,
        ["search", "--space", str(TINY_SPACE), "--data", "", "--local", "--runs-dir", str(runs)],
        "--data: is empty",
    )
    assert not runs.exists()


def search(tmp_path: Path, data: Path | str, trials: int, *extra: str) -> int:
    return main(["search", "--space", str(TINY_SPACE), "--study", "tok", "--runs-dir", str(tmp_path / "runs"),
                 "--data", str(data), "--local", "--trials", str(trials), "--steps", "4",
                 "--sampler", "random", "--no-tensorboard", *extra])  # fmt: skip


@pytest.mark.timeout(300)
def test_search_export_retrain_on_token_files(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = write_token_corpus(tmp_path / "tok", vocab_size=1000)
    assert search(tmp_path, data, 2) == 0
    assert main(["export", "--study", "tok", "--runs-dir", "runs", "--best", "--out", "best.yaml"]) == 0
    capsys.readouterr()
    doc = load_arch_file("best.yaml")
    assert doc["arch"].vocab_size == 1000
    corpus = nas.data.load_corpus(data)
    assert doc["data"] == {
        "corpus": str(data),
        "name": str(data),
        "vocab_size": 1000,
        "fingerprint": corpus.fingerprint,
    }

    again = train_json(capsys, "--arch", "best.yaml")  # no --data: the file says which data
    assert again["vocab_size"] == 1000 and again["arch_id"] == doc["arch"].arch_id
    assert abs(again["val_loss"] - doc["metrics"]["val_loss"]) < 1e-4

    # The same tokens under another spelling continue the study; other tokens under the path do not.
    assert search(tmp_path, f"{tmp_path}/./tok/", 3) == 0
    capsys.readouterr()
    shutil.move(data, tmp_path / "moved")
    refused(capsys, ["train", "--arch", "best.yaml"], "best.yaml", str(data), "pass --data")
    write_token_corpus(data, vocab_size=1000, n_train=30_000)
    refused(capsys, ["train", "--arch", "best.yaml"], "best.yaml", corpus.fingerprint, "pass --data")
    refused(capsys, ["search", "--space", str(TINY_SPACE), "--study", "tok", "--runs-dir", "runs",
                     "--data", str(data), "--local", "--trials", "4", "--steps", "4", "--sampler", "random"],
            "other data", corpus.fingerprint)  # fmt: skip
    m = train_json(capsys, "--arch", "best.yaml", "--data", str(tmp_path / "moved"), "--steps", "1")
    assert m["vocab_size"] == 1000  # the copy, named by a flag


def test_exported_tokenizer_is_found_or_named(tmp_path: Path, corpus_dir: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    tok = train_tiny_bpe(tmp_path / "tokenizer.json", vocab_size=300)
    assert search(tmp_path, corpus_dir, 1, "--tokenizer", str(tok), "--evaluator", "proxy:params") == 0
    assert main(["export", "--study", "tok", "--runs-dir", "runs", "--best", "--out", "best.yaml"]) == 0
    capsys.readouterr()
    rec = load_arch_file("best.yaml")["data"]
    assert rec["corpus"] == str(corpus_dir.resolve()) and rec["tokenizer"] == str(tok.resolve())
    assert rec["vocab_size"] == 300 and load_arch_file("best.yaml")["arch"].vocab_size == 300
    tok.rename(tmp_path / "elsewhere.json")
    refused(capsys, ["train", "--arch", "best.yaml"], "tokenizer", "pass --tokenizer")
    m = train_json(
        capsys, "--arch", "best.yaml", "--tokenizer", str(tmp_path / "elsewhere.json"), "--steps", "1"
    )
    assert m["vocab_size"] == 300


@pytest.mark.timeout(300)
def test_paths_in_files_are_read_from_the_files_directory(tmp_path: Path, capsys, monkeypatch) -> None:
    """A spec's `data: {corpus: ../data, tokenizer: tok/tokenizer.json}` was read from the working directory:
    run from another one, the search trained on whatever was there (or said not found).  Paths in a file
    are relative to the file; the study and the exported file keep them absolute, so each command below
    runs from another directory and trains on the same data."""
    from synthetic_text import write_corpus

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    proj, work, third = tmp_path / "proj", tmp_path / "a" / "work", tmp_path / "third"
    data = write_corpus(proj / "data", 6)
    tok = train_tiny_bpe(proj / "configs" / "tok" / "tokenizer.json", vocab_size=300)
    spec = proj / "configs" / "s.yaml"
    spec.write_text(TINY_SPACE.read_text() + "data: {corpus: ../data, tokenizer: tok/tokenizer.json}\n")
    # decoys where the same text names other files from the working directory
    write_corpus(tmp_path / "a" / "data", 3, n_words=300)
    train_tiny_bpe(work / "tok" / "tokenizer.json", vocab_size=280)
    third.mkdir()
    runs = str(tmp_path / "runs")
    argv = ["search", "--study", "s", "--runs-dir", runs, "--local", "--steps", "2", "--no-tensorboard"]

    monkeypatch.chdir(work)
    assert main([*argv, "--space", "../../proj/configs/s.yaml", "--trials", "1"]) == 0
    err = capsys.readouterr().err
    assert f"read relative to the file: {data}" in err and f"read relative to the file: {tok}" in err
    study = optuna_study(runs)
    trained = nas.data.load_corpus(nas.data.resolve_data(str(data), str(tok)))
    assert study.user_attrs["settings"]["data"]["fingerprint"] == trained.fingerprint
    assert study.user_attrs["spec"]["data"] == {
        "corpus": str(data),
        "tokenizer": str(tok),
        "text_field": "text",
        "on_bad_record": "refuse",
    }
    assert study.trials[0].user_attrs["vocab_size"] == 300  # the file's tokenizer, not the decoy's 280

    monkeypatch.chdir(third)  # no decoys: the study's spec, then the file by another relative path
    assert main([*argv, "--trials", "2"]) == 0
    assert main([*argv, "--space", "../proj/configs/s.yaml", "--trials", "3"]) == 0
    assert main(["export", "--study", "s", "--runs-dir", runs, "--best", "--out", "../proj/best.yaml"]) == 0
    capsys.readouterr()
    assert len(optuna_study(runs).trials) == 3

    monkeypatch.chdir(tmp_path)  # the exported file records absolute paths: it retrains from anywhere
    best = load_arch_file(proj / "best.yaml")
    again = train_json(capsys, "--arch", "proj/best.yaml")
    assert again["vocab_size"] == 300 and abs(again["val_loss"] - best["metrics"]["val_loss"]) < 1e-4
    # a hand-written architecture file's relative data is relative to it too
    (proj / "archs").mkdir()
    arch_file(proj / "archs" / "mine.yaml").write_text(
        (proj / "archs" / "mine.yaml").read_text()
        + "data: {corpus: ../data, tokenizer: ../configs/tok/tokenizer.json}\n"
    )
    m = train_json(capsys, "--arch", "proj/archs/mine.yaml", "--steps", "1")
    assert m["vocab_size"] == 300 and m["corpus"] == trained.name
    # confirm reads the study's data from anywhere: its first seed repeats the search's run exactly
    confirm = ["confirm", "--study", "s", "--runs-dir", runs, "--local", "--no-tensorboard", "--top", "1"]
    assert main([*confirm, "--seeds", "1", "--scales", "1", "--baseline", "proj/archs/mine.yaml"]) == 0
    capsys.readouterr()
    conf = optuna_study(runs, "s-confirm")
    finalist = next(t for t in conf.trials if t.user_attrs["role"] == "finalist")
    searched = {t.user_attrs["arch_id"]: t.values[0] for t in optuna_study(runs).trials if t.values}
    assert finalist.values[0] == searched[finalist.user_attrs["arch_id"]]


def optuna_study(runs: str, name: str = "s"):
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{runs}/s/study.db")
