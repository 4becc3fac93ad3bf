"""``task: seq2seq`` through the commands: search, best, show, export, retrain, confirm, and mistakes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from synthetic_text import write_parallel_corpus

import nas
from nas.cli import main

pytestmark = pytest.mark.usefixtures("single_thread")

SPACE = {
    "name": "s2s",
    "task": "seq2seq",
    "globals": {"d_model": 32, "n_heads": 4, "n_encoder_layers": [1, 2], "n_layers": 1, "max_len": 32},
    "encoder": {"attention": {"mha": {}, "synth_random": {}}},
    "layers": {"attention": {"mha": {}, "synth_dense": {}}, "ffn": {"mult": 2}},
    "recipe": {"batch_size": 4, "eval_batches": 2, "log_every": 1},
    "budget": {"steps": 3},
    "seed_archs": [],
}
ARCH = {
    "task": "seq2seq",
    "d_model": 32,
    "n_heads": 4,
    "max_len": 32,
    "encoder_layers": [{"attention": "synth_random"}],
    "layers": [{"attention": "mha"}],
}


@pytest.fixture(scope="module")
def parallel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_parallel_corpus(tmp_path_factory.mktemp("pairs"))


def json_out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_search_inspect_export_retrain_and_confirm(
    tmp_path: Path, parallel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space = tmp_path / "s2s.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    runs = str(tmp_path / "runs")
    argv = ["search", "--space", str(space), "--data", str(parallel), "--trials", "3", "--local",
            "--runs-dir", runs, "--objective", "loss", "--no-tensorboard"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    best = json_out(capsys, ["best", "--study", "s2s", "--runs-dir", runs, "--json"])
    top = best["trials"][0] if isinstance(best, dict) else best[0]
    show = ["show", "--study", "s2s", "--runs-dir", runs, "--trial", str(top["trial"]), "--json"]
    shown = json_out(capsys, show)
    stacks = [row["stack"] for row in shown["layers"]]
    assert stacks[0] == "encoder" and stacks[-1] == "decoder" and "enc L" in shown["summary"]
    assert shown["arch"]["task"] == "seq2seq"
    samples = shown["metrics"].get("samples")
    assert samples and set(samples[0]) == {"source", "target", "output"}

    out = tmp_path / "winner.yaml"
    assert main(["export", "--study", "s2s", "--runs-dir", runs, "--best", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["data"]["task"] == "seq2seq" and doc["arch"]["encoder_layers"]
    capsys.readouterr()
    again = json_out(capsys, ["train", "--arch", str(out), "--json"])  # the data comes from the file's record
    assert again["val_loss"] == shown["metrics"]["val_loss"]  # same seed, threads and batches: same loss

    assert main(["confirm", "--study", "s2s", "--runs-dir", runs, "--top", "1", "--seeds", "1", "--scales",
                 "1", "--local", "--baseline", str(out), "--json", "--no-tensorboard"]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert {run["val_loss"] for run in report["runs"]} == {shown["metrics"]["val_loss"]}


def test_train_prints_greedy_decodings(
    tmp_path: Path, parallel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arch = tmp_path / "a.yaml"
    arch.write_text(yaml.safe_dump({"arch": ARCH, "recipe": {"batch_size": 4, "eval_batches": 2}}))
    weights = tmp_path / "w.pt"
    argv = ["train", "--arch", str(arch), "--data", str(parallel), "--steps", "2", "--save", str(weights)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "greedy decoding of the first validation pairs:" in out
    first_val = (parallel / "val.src").read_text().splitlines()[0]
    assert f"  source  {first_val}" in out and "  output  " in out
    model = nas.load_model(weights)  # the checkpoint rebuilds the encoder-decoder
    assert isinstance(model, nas.models.Seq2SeqTransformer) and model.arch.vocab_size == 259


@pytest.mark.parametrize(
    ("which", "words"),
    [
        ("seq2seq space, text corpus", "holds language-model text"),
        ("lm space, parallel corpus", "holds source-target pairs"),
    ],
)
def test_a_task_and_a_corpus_that_do_not_match_are_one_line(
    tmp_path: Path,
    parallel: Path,
    corpus_dir: Path,
    capsys: pytest.CaptureFixture[str],
    which: str,
    words: str,
) -> None:
    raw = dict(SPACE)
    data = corpus_dir
    if which.startswith("lm"):
        raw = {k: v for k, v in SPACE.items() if k not in ("task", "encoder")}
        raw["globals"] = {k: v for k, v in SPACE["globals"].items() if k != "n_encoder_layers"}
        data = parallel
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump(raw))
    runs = tmp_path / "runs"
    code = main(["search", "--space", str(space), "--data", str(data), "--trials", "1", "--local",
                 "--runs-dir", str(runs)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0] and str(space) in err[0]
    assert not runs.exists()  # nothing half-written


def test_greedy_samples_decode_the_sources_as_training_lays_them_out(
    parallel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    import nas.models
    from evaluators.evaluation import greedy_samples
    from nas.data import load_corpus
    from nas.models import ArchConfig, build_model

    corpus = load_corpus(str(parallel))
    torch.manual_seed(0)
    model = build_model(ArchConfig.from_dict({**ARCH, "max_len": 128}).with_vocab(corpus.vocab_size))
    seen = []
    decode = nas.models.greedy_decode

    def spy(model: Any, src: torch.Tensor, *args: Any, **kw: Any) -> Any:
        seen.append(src)
        return decode(model, src, *args, **kw)

    monkeypatch.setattr(nas.models, "greedy_decode", spy)
    samples = greedy_samples(model, corpus, 128, torch.device("cpu"))  # longer than any source
    x, _ = corpus.validation(3, 128)  # the first validation pairs as training and validation see them
    torch.testing.assert_close(seen[0], x[:, :128])  # padded to seq_len: the encoder sees what it learned on
    assert [(s["source"], s["target"]) for s in samples] == corpus.samples(3)
    assert all(isinstance(s["output"], str) for s in samples)


def test_the_blocks_plot_has_a_bar_per_encoder_and_decoder_layer() -> None:
    from types import SimpleNamespace

    from nas.search.reports.layers import layer_choices, slot_name

    enc = {"attention": {"type": "synth_random"}, "ffn": {"activation": "gelu"}}
    dec = {"attention": {"type": "mha"}, "ffn": {"activation": "relu"}}
    arch = {**ARCH, "encoder_layers": [enc], "layers": [dec, dec]}
    choices = layer_choices(SimpleNamespace(user_attrs={"arch": arch}))
    assert [(slot_name(slot, True), a, f) for slot, a, f in choices] == [
        ("enc 0", "synth_random", "gelu"),
        ("dec 0", "mha", "relu"),
        ("dec 1", "mha", "relu"),
    ]
    lm = {"layers": arch["layers"]}
    lm_choices = layer_choices(SimpleNamespace(user_attrs={"arch": lm}))
    assert [slot_name(slot, False) for slot, _, _ in lm_choices] == ["0", "1"]


def test_a_parallel_corpus_without_a_space_searches_the_seq2seq_space(
    tmp_path: Path, parallel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import optuna

    runs = tmp_path / "runs"
    argv = ["search", "--data", str(parallel), "--study", "p", "--trials", "1", "--local",
            "--runs-dir", str(runs), "--budget.steps", "2", "--no-tensorboard",
            "--evaluator", "proxy:params"]  # fmt: skip
    assert main(argv) == 0
    assert "searching the shipped seq2seq space" in capsys.readouterr().out  # said, not silent
    study = optuna.load_study(study_name="p", storage=f"sqlite:///{runs}/p/study.db")
    assert study.user_attrs["spec"]["task"] == "seq2seq"
