"""No output replaces or joins an input directory (issue 46, HIGH): an output given with ``--force`` inside a
corpus directory (the one being trained on, or the one a study or checkpoint recorded) replaced a document of
it, since the rule compared outputs with input *files* only.  Every command that writes, every kind of
input directory: one line, exit status 2, the directory exactly as it was."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from synthetic_text import write_corpus, write_parallel_corpus
from token_corpus import write_token_corpus

from nas.cli import main
from nas.data import load_corpus
from nas.errors import UserError
from nas.files.outputs import plan_output, write_output


def _state(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (hidden ones included) and its SHA-256."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _new_process() -> None:
    """As if the next command ran in a process of its own: no input noted by an earlier one."""
    import nas.files.outputs

    nas.files.outputs._INPUTS.clear()


@pytest.fixture(autouse=True)
def fresh_process() -> None:
    _new_process()


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], said: str = "an input") -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and said in err, err


# -- the rule, for each kind of input directory -----------------------------------------------------


@pytest.mark.parametrize(
    "kind, make",
    [
        ("text directory", lambda d: write_corpus(d, 3)),
        ("token directory", lambda d: write_token_corpus(d, vocab_size=300, n_train=2000, n_val=400)),
        ("parallel directory", lambda d: write_parallel_corpus(d, n_train=40, n_val=8)),
    ],
)
@pytest.mark.parametrize("name", ["new.safetensors", "doc_00.txt", "train.bin", "train.src", "sub/new.md"])
def test_no_output_goes_into_a_corpus_directory_once_read(tmp_path, kind, make, name):
    corpus = make(tmp_path / kind.replace(" ", "_"))
    target = corpus / name
    target.parent.mkdir(exist_ok=True)
    early = plan_output(target, "--report", force=True)  # planned before the corpus was read: allowed now
    load_corpus(str(corpus))  # any command that reads it notes it (nas.data.load_corpus)
    before = _state(corpus)
    with pytest.raises(UserError, match="corpus directory this command reads; an output never replaces or"):
        plan_output(target, "--save", force=True)
    # and the output planned first is checked again when written: nothing is written
    with pytest.raises(UserError, match="an output never replaces or joins an input"):
        write_output(early, lambda tmp: tmp.write_text("report"))
    assert _state(corpus) == before


def test_an_input_directory_reached_through_a_link_is_still_an_input(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", 3)
    link = tmp_path / "link"
    os.symlink(corpus, link)
    load_corpus(str(corpus))
    with pytest.raises(UserError, match="an output never replaces or joins an input"):
        plan_output(link / "doc_00.txt", "--out", force=True)


# -- every command that writes ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A two-trial search on a corpus directory of its own: (root, storage URL, corpus)."""
    root = tmp_path_factory.mktemp("inputs")
    corpus = write_corpus(root / "corpus", 6)
    space = root / "space.yaml"
    space.write_text(
        "name: tiny\nglobals: {d_model: 16, n_heads: 2, n_layers: 1, max_len: 16}\n"
        "layers:\n  attention: {mha: {}}\n  ffn: {activation: [relu, squared_relu], mult: 2}\n"
        "recipe: {batch_size: 2, eval_batches: 1, log_every: 2}\nbudget: {steps: 4}\n",
        encoding="utf-8",
    )
    url = f"sqlite:///{root}/s.db"
    argv = ["search", "--space", str(space), "--study", "s", "--storage", url, "--data", str(corpus),
            "--trials", "2", "--local", "--no-tensorboard", "--objective", "loss",
            "--sampler", "random"]  # fmt: skip
    assert main(argv) == 0
    return root, url, corpus


def test_train_save_into_the_corpus_directory_is_refused_even_with_force(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus", 3)
    before = _state(corpus)
    for name in ("doc_00.txt", "model.safetensors"):
        argv = ["train", "--arch", "vanilla", "--data", str(corpus), "--budget.steps", "1", "--threads", "1",
                "--save", str(corpus / name), "--force"]  # fmt: skip
        _refused(capsys, argv, f"is inside {str(corpus)!r}, the --data directory this command reads")
    assert _state(corpus) == before


def test_train_save_into_a_token_directory_is_refused(tmp_path, capsys):
    tokens = write_token_corpus(tmp_path / "tokens", vocab_size=300, n_train=4000, n_val=1000)
    before = _state(tokens)
    argv = ["train", "--arch", "vanilla", "--data", str(tokens), "--budget.steps", "1", "--threads", "1",
            "--save", str(tokens / "train.bin"), "--force"]  # fmt: skip
    _refused(capsys, argv, "the --data directory this command reads")
    assert _state(tokens) == before


def _into(kind: str, url: str, corpus: Path) -> list[str]:
    """``kind``'s command line writing into the study's corpus directory, with --force."""
    study = ["--study", "s", "--storage", url]
    runs = ["--local", "--no-tensorboard", "--report"]
    return {
        "confirm": ["confirm", *study, *runs, str(corpus / "doc_00.txt")],
        "ladder": ["ladder", *study, *runs, str(corpus / "ladder.md")],
        "export": ["export", *study, "--best", "--out", str(corpus / "best.yaml")],
        "plot": ["plot", *study, "--out", str(corpus)],
    }[kind] + ["--force"]


@pytest.mark.parametrize("command", ["confirm", "ladder", "export", "plot"])
def test_a_report_export_or_plot_never_goes_into_the_studys_corpus(study, capsys, command):
    """None of these commands is given the corpus: the study recorded it, and that is enough."""
    root, url, corpus = study
    before = _state(corpus)
    _refused(capsys, _into(command, url, corpus), "corpus directory this command reads; an output never")
    # plot and export never load the corpus: the study's record alone names it
    assert _state(corpus) == before


def test_export_hf_never_goes_into_the_checkpoints_corpus(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus", 3)
    checkpoint = tmp_path / "model.safetensors"
    argv = ["train", "--arch", "transformer_pp", "--data", str(corpus), "--budget.steps", "1", "--threads",
            "1", "--save", str(checkpoint)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    before = _state(corpus)
    _new_process()  # export runs in a process of its own: only the checkpoint names the corpus
    for target in (corpus, corpus / "hf"):
        argv = ["export", "--checkpoint", str(checkpoint), "--hf", str(target), "--force"]
        _refused(capsys, argv, "the checkpoint's corpus directory this command reads")
    assert _state(corpus) == before


@pytest.mark.parametrize("kind", ["parallel", "records"])
def test_a_corpus_resolved_through_its_cache_is_an_input_too(tmp_path, kind):
    """A parallel corpus through a tokenizer, and a records corpus, are read by resolve_data straight into
    their token caches, never through load_corpus: their directories are inputs all the same."""
    from nas.data import resolve_data

    if kind == "parallel":
        from token_corpus import train_tiny_bpe

        corpus = write_parallel_corpus(tmp_path / "pairs", n_train=40, n_val=8)
        resolve_data(str(corpus), str(train_tiny_bpe(tmp_path / "tok.json")))
    else:
        corpus = tmp_path / "records"
        corpus.mkdir()
        lines = [f'{{"text": "record {i} to be or not to be that is the question"}}' for i in range(12)]
        (corpus / "part.jsonl").write_text("\n".join(lines) + "\n")
        resolve_data(str(corpus))
    with pytest.raises(UserError, match="an output never replaces or joins an input"):
        plan_output(corpus / "report.md", "--report", force=True)
