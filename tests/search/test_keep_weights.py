"""A search that keeps its best models (``resources.keep_weights: K``, issue 35).

The K best trials' trained weights are kept as they finish, as the safetensors checkpoints
``train --save`` writes, under ``RUNS_DIR/STUDY/weights``; files that drop out are deleted;
``export --study S --best --hf DIR`` exports one with no retraining; a trial without kept weights
is refused in one line naming the commands that rebuild them; Ray brings the worker's weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
from pathlib import Path

import optuna
import pytest
import torch
from optuna.trial import TrialState

import nas
import nas.search.driver.loop as loop
from nas.cli import main
from nas.execution.local_pool import LocalPool
from nas.files.checkpoint import checkpoint_bytes, load_checkpoint, save_checkpoint
from nas.search.driver.weights import choose
from nas.search.storage.records import SPEC, WEIGHTS, trained
from nas.shipped import arch_path

HERE = Path(__file__).parent
TINY_SPACE = HERE / "tiny_space.yaml"
LLAMA_SPACE = HERE / "llama_space.yaml"  # every candidate Transformer++-shaped: exports as a Llama


def _argv(tmp_path: Path, corpus: Path, *extra: str, space: Path | None = TINY_SPACE, study: str = "s"):
    where = ["--space", str(space)] if space is not None else []
    return ["search", *where, "--study", study, "--storage", f"sqlite:///{tmp_path}/s.db", "--runs-dir",
            str(tmp_path / "runs"), "--data", str(corpus), "--no-tensorboard", *extra]  # fmt: skip


def _study(tmp_path: Path, study: str = "s") -> optuna.Study:
    return optuna.load_study(study_name=study, storage=f"sqlite:///{tmp_path}/s.db")


def _weights_dir(tmp_path: Path, study: str = "s") -> Path:
    from nas.search.driver.context import weights_dir

    return Path(weights_dir(str(tmp_path / "runs"), study, f"sqlite:///{tmp_path}/s.db"))


def _files(directory: Path) -> set[str]:
    """Every file there, hidden ones (a temporary file left behind) included."""
    return {p.name for p in directory.iterdir()} if directory.is_dir() else set()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the rule ---------------------------------------------------------------------------------------


def test_one_objective_keeps_the_k_lowest_losses_ties_to_the_earlier_trial() -> None:
    available = {0: (3.0,), 1: (2.0,), 2: (2.5,), 3: (2.0,)}
    assert choose(available, list(available.values()), 2) == [1, 3]
    assert choose(available, list(available.values()), 9) == [1, 3, 2, 0]


def test_several_objectives_keep_only_the_pareto_front_lowest_loss_first() -> None:
    every = [(2.0, 9.0), (3.0, 5.0), (4.0, 1.0), (3.5, 6.0), (2.5, 9.5)]  # trials 3 and 4 are dominated
    available = dict(enumerate(every))
    assert choose(available, every, 5) == [0, 1, 2]
    assert choose(available, every, 2) == [0, 1]
    # a trial dominated by one whose weights are not held (trained before keep_weights) is not kept
    assert choose({3: every[3]}, every, 2) == []


def test_the_bytes_a_worker_sends_are_the_file_train_save_writes(tmp_path: Path) -> None:
    from safetensors import safe_open

    torch.manual_seed(0)
    model = nas.build_model(nas.load_arch(arch_path("transformer_pp")))
    extra = {"recipe": {"lr": 0.003}, "metrics": {"val_loss": 2.5}, "data": None}
    save_checkpoint(tmp_path / "m.safetensors", model, **extra)
    (tmp_path / "b.safetensors").write_bytes(checkpoint_bytes(model, **extra))
    # the same tensors and metadata (safetensors orders its metadata map differently on every call)
    a, b = (safe_open(str(tmp_path / f"{n}.safetensors"), framework="pt") for n in "mb")
    assert a.metadata() == b.metadata() and a.keys() == b.keys()
    assert all(torch.equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys())  # noqa: SIM118


# -- a search with --local --------------------------------------------------------------------------


class CountingPool(LocalPool):
    """The --local pool, counting which trials' weights the driver fetched."""

    fetched: list[int] = []

    def wait(self, timeout: float):
        done = super().wait(timeout)
        for fin in done:
            if fin.weights is not None:
                inner, tag = fin.weights, fin.tag
                fin.weights = lambda inner=inner, tag=tag: (CountingPool.fetched.append(tag), inner())[1]
        return done


def test_keep_2_keeps_exactly_the_two_best_and_deletes_the_dropped(
    tmp_path, text_corpus, capsys, monkeypatch
):
    CountingPool.fetched = []
    monkeypatch.setattr(loop, "default_pool", lambda run: CountingPool(threads=1))
    argv = _argv(
        tmp_path, text_corpus, "--local", "--objective", "loss", "--trials", "7", "--keep-weights", "2"
    )
    assert main(argv) == 0
    out = capsys.readouterr().out
    study = _study(tmp_path)
    ran = [t for t in trained(study) if "duplicate_of" not in t.user_attrs]  # trials that trained a model
    best = sorted(ran, key=lambda t: (t.values[0], t.number))[:2]
    directory = _weights_dir(tmp_path)
    assert _files(directory) == {f"trial_{t.number}.safetensors" for t in best}  # and nothing else
    for t in best:
        path = directory / f"trial_{t.number}.safetensors"
        rec = t.user_attrs[WEIGHTS]
        assert (
            rec["file"] == str(path) and rec["sha256"] == _sha(path) and rec["bytes"] == path.stat().st_size
        )
        doc = load_checkpoint(path)  # the format of train --save: nas.load_model reads it
        assert doc["metrics"]["val_loss"] == t.values[0] and doc["arch"].to_dict() == t.user_attrs["arch"]
        assert doc["budget"] == {"steps": 8} and doc["data"]["vocab_size"] == 256
    # only a trial that was among the best 2 when it finished had its weights fetched; the others'
    # stayed with the worker.  Some that were kept then dropped out: their files are gone.
    entered, losses = [], []
    for t in sorted(ran, key=lambda t: t.number):  # --local runs them in order
        if len(losses) < 2 or t.values[0] < sorted(losses)[1]:
            entered.append(t.number)
        losses.append(t.values[0])
    assert CountingPool.fetched == entered and len(entered) > 2
    dropped = {t.number for t in study.trials if t.user_attrs.get(WEIGHTS)} - {t.number for t in best}
    assert dropped == set(entered) - {t.number for t in best}
    # show --trial says where a trial's weights are, and whether they are still kept
    for t, kept in ((best[0], True), *((study.trials[n], False) for n in dropped)):
        capsys.readouterr()
        assert main(["show", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--runs-dir",
                     str(tmp_path / "runs"), "--trial", str(t.number), "--json"]) == 0  # fmt: skip
        assert json.loads(capsys.readouterr().out)["weights"]["kept"] is kept
    size = sum((directory / n).stat().st_size for n in _files(directory))
    line = next(x for x in out.splitlines() if x.startswith("weights:"))
    assert f"2 kept (trial {best[0].number}, {best[1].number}, best first): {size:,} bytes" in line
    assert f"deleted {len(dropped)} that dropped out of the best 2" in line


def test_with_two_objectives_only_pareto_front_trials_are_kept(tmp_path, text_corpus, capsys):
    assert main(_argv(tmp_path, text_corpus, "--local", "--trials", "6", "--keep-weights", "3")) == 0
    study = _study(tmp_path)
    front = sorted(
        (t for t in study.best_trials if "duplicate_of" not in t.user_attrs),
        key=lambda t: (t.values[0], t.number),
    )
    assert _files(_weights_dir(tmp_path)) == {f"trial_{t.number}.safetensors" for t in front[:3]}
    # a trial off the front is said to be off the front (it read "not among the best 3" with a front of 1)
    off = next(t for t in trained(study) if t.number not in {f.number for f in study.best_trials})
    capsys.readouterr()
    argv = ["export", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--runs-dir",
            str(tmp_path / "runs"), "--trial", str(off.number), "--hf", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 2
    assert "not on the Pareto front as it finished" in capsys.readouterr().err


def test_continuing_with_another_k_follows_it_and_0_deletes_nothing(tmp_path, text_corpus, capsys):
    common = ("--local", "--objective", "loss")
    assert main(_argv(tmp_path, text_corpus, *common, "--trials", "4", "--keep-weights", "3")) == 0
    directory = _weights_dir(tmp_path)
    assert len(_files(directory)) == 3
    # the study's spec records the field like every resources field; show --spec prints it
    capsys.readouterr()
    assert main(["show", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--spec"]) == 0
    shown = tmp_path / "shown.yaml"
    shown.write_text(capsys.readouterr().out)
    assert "keep_weights: 3" in shown.read_text()
    # a continuation with a smaller K (resources may change): the kept shrink to the best 1 at once
    assert (
        main(_argv(tmp_path, text_corpus, *common, "--trials", "5", "--keep-weights", "1", space=shown)) == 0
    )
    best = min(trained(_study(tmp_path)), key=lambda t: (t.values[0], t.number))
    assert _files(directory) == {f"trial_{best.number}.safetensors"}
    assert _study(tmp_path).user_attrs[SPEC]["resources"]["keep_weights"] == 1
    # keep_weights 0 (the file's default) adds none and deletes none
    assert main(_argv(tmp_path, text_corpus, *common, "--trials", "7", space=TINY_SPACE)) == 0
    assert _files(directory) == {f"trial_{best.number}.safetensors"}
    assert "1 kept" in capsys.readouterr().out


def test_a_search_continued_in_a_copy_of_its_directory_never_touches_the_originals_files(
    tmp_path, text_corpus, capsys
):
    """The study records each kept file by its absolute path; a copy of the whole directory (database and
    runs) continued must find its own files, and delete nothing in the original it was never given."""
    import shutil

    first, copy = tmp_path / "first", tmp_path / "copy"

    def search(runs: Path, trials: int, k: int) -> None:  # the default storage: the database in runs
        assert main(["search", "--space", str(TINY_SPACE), "--study", "s", "--runs-dir", str(runs), "--data",
                     str(text_corpus), "--no-tensorboard", "--local", "--objective", "loss",
                     "--keep-weights", str(k), "--trials", str(trials)]) == 0  # fmt: skip

    search(first, 3, 2)
    weights = first / "s" / "weights"
    original = {p.name: _sha(p) for p in weights.iterdir()}
    assert len(original) == 2
    shutil.copytree(first, copy)
    capsys.readouterr()
    search(copy, 4, 1)  # K shrinks to 1: the second best drops out at once
    out = capsys.readouterr().out
    assert {p.name: _sha(p) for p in weights.iterdir()} == original  # the original is untouched
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{copy}/s/study.db")
    best = min(trained(study), key=lambda t: (t.values[0], t.number))
    assert "missing" not in out  # the copy found its own files
    # the copied file that dropped out is left (this run did not write it there), and said
    assert _files(copy / "s" / "weights") == {f"trial_{best.number}.safetensors", *original}
    assert "this tool did not write it at this path" in out


# -- export --best --hf -----------------------------------------------------------------------------


@pytest.fixture
def llama_study(tmp_path: Path, text_corpus: Path) -> Path:
    argv = _argv(tmp_path, text_corpus, "--local", "--objective", "loss", "--trials", "5",
                 "--keep-weights", "1", space=LLAMA_SPACE)  # fmt: skip
    assert main(argv) == 0
    return tmp_path


def _no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    import evaluators.lm

    def refuse(*args, **kwargs):
        raise AssertionError("export trained a model")

    for name in ("train_lm", "run_loop", "prepare_model"):
        monkeypatch.setattr(evaluators.lm, name, refuse)


def test_export_best_hf_writes_the_kept_model_as_a_llama_without_training(llama_study, capsys, monkeypatch):
    transformers = pytest.importorskip("transformers")
    tmp_path = llama_study
    _no_training(monkeypatch)
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["export", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db",
                 "--runs-dir", str(tmp_path / "runs"), "--best", "--hf", str(out)]) == 0  # fmt: skip
    best = min(trained(_study(tmp_path)), key=lambda t: (t.values[0], t.number))
    kept = _weights_dir(tmp_path) / f"trial_{best.number}.safetensors"
    assert f"from trial {best.number}" in capsys.readouterr().out
    hf = transformers.LlamaForCausalLM.from_pretrained(out).eval()
    ours = nas.load_model(kept)
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (hf(input_ids=idx).logits - ours(idx)).abs().max().item() < 1e-5
    # how it was found: the study and trial, in the model card and config.json
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"Trial {best.number}" in card and "of the search study `s`" in card and "not retrained" in card
    found = json.loads((out / "config.json").read_text(encoding="utf-8"))["nas_found"]
    assert (found["study"], found["trial"]) == ("s", best.number)
    assert found["search_loss"] == pytest.approx(best.values[0])
    # nothing published with the model names a directory of this machine (the database, the corpus, the
    # tokenizer): they were in config.json's nas_found and nas_data and in the model card
    for f in out.iterdir():
        if f.suffix in (".json", ".md", ".py"):
            text = f.read_text(encoding="utf-8")
            assert str(tmp_path) not in text and str(tmp_path.parent) not in text, f.name
    assert found["storage"] == "sqlite:///s.db"


def test_a_trial_without_kept_weights_is_refused_in_one_line_naming_train(llama_study, capsys, monkeypatch):
    tmp_path = llama_study
    _no_training(monkeypatch)
    study = _study(tmp_path)
    best = min(trained(study), key=lambda t: (t.values[0], t.number))
    ran = [t for t in trained(study) if "duplicate_of" not in t.user_attrs]
    other = next(t for t in ran if WEIGHTS not in t.user_attrs)  # never among the best 1 as it finished
    dropped = [t for t in ran if t.user_attrs.get(WEIGHTS) and t.number != best.number]
    flags = ["--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--runs-dir", str(tmp_path / "runs")]
    out = tmp_path / "out"

    def refused(*argv: str) -> str:
        capsys.readouterr()
        assert main(["export", *flags, *argv, "--hf", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and not out.exists(), err  # one line, nothing written
        return err[0]

    line = refused("--trial", str(other.number))
    assert "not kept" in line and f"--trial {other.number} --out trial_{other.number}.yaml" in line
    assert f"train --arch trial_{other.number}.yaml --save trial_{other.number}.safetensors" in line
    for t in dropped:  # kept once, then pushed out by a better trial: its file was deleted
        assert "are gone" in refused("--trial", str(t.number))
    # the kept file changed, or is gone: refused the same way
    kept = _weights_dir(tmp_path) / f"trial_{best.number}.safetensors"
    data = kept.read_bytes()
    kept.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert "changed since the search wrote them" in refused("--best")
    kept.unlink()
    assert "are gone" in refused("--best") and "train --arch" in refused("--best")


def test_export_hf_of_a_study_that_kept_nothing_says_keep_weights_0(tmp_path, text_corpus, capsys):
    assert main(_argv(tmp_path, text_corpus, "--local", "--trials", "1", space=LLAMA_SPACE)) == 0
    capsys.readouterr()
    assert main(["export", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--best",
                 "--hf", str(tmp_path / "out")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "resources.keep_weights 0" in err and "train --arch" in err and not (tmp_path / "out").exists()


# -- refusals and failures --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--keep-weights", "-1"), "resources.keep_weights"),
        (("--resources.keep_weights", "1.5"), "resources.keep_weights"),
        (("--keep-weights", "1", "--evaluator", "proxy:params"), "trains none"),
    ],
)
def test_a_bad_k_is_one_line_and_nothing_is_made(tmp_path, text_corpus, capsys, flags, said):
    try:
        code = main(_argv(tmp_path, text_corpus, "--local", *flags))
    except SystemExit as exit:  # argparse's own refusal of a flag's type
        code = exit.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "runs").exists()


def test_a_non_integer_k_in_the_file_names_the_file(tmp_path, text_corpus, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(TINY_SPACE.read_text() + "resources:\n  keep_weights: 2.5\n")
    assert main(_argv(tmp_path, text_corpus, "--local", space=spec)) == 2
    err = capsys.readouterr().err.strip()
    assert str(spec) in err and "resources.keep_weights" in err and "\n" not in err


def test_a_weights_directory_that_cannot_be_written_is_refused_before_anything(tmp_path, text_corpus, capsys):
    directory = _weights_dir(tmp_path)
    directory.parent.mkdir(parents=True)
    directory.write_text("not a directory")  # root writes through chmod: a file in the way is what stops it
    assert main(_argv(tmp_path, text_corpus, "--local", "--keep-weights", "1")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--runs-dir" in err[0] and "not a directory" in err[0], err
    assert not (tmp_path / "s.db").exists()


def test_trial_files_no_trial_of_the_study_wrote_are_refused_not_overwritten(tmp_path, text_corpus, capsys):
    directory = _weights_dir(tmp_path)
    directory.mkdir(parents=True)
    (directory / "trial_0.safetensors").write_bytes(b"a user's model")
    assert main(_argv(tmp_path, text_corpus, "--local", "--keep-weights", "1")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trial_0.safetensors" in err[0] and "no trial of this study wrote" in err[0]
    assert (directory / "trial_0.safetensors").read_bytes() == b"a user's model"
    assert not (tmp_path / "s.db").exists()


def test_a_full_disk_while_writing_weights_stops_in_one_line_keeping_the_trial(
    tmp_path, text_corpus, capsys, monkeypatch
):
    real = pathlib.Path.write_bytes

    def full(self, data):
        if ".safetensors" in self.name:  # the temporary file: .trial_N.safetensors.XXXXXXXX.nas-partial
            with open(self, "wb") as f:  # half a file, then the disk is full
                f.write(data[: len(data) // 2])
            raise OSError(28, os.strerror(28), str(self))
        return real(self, data)

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    argv = _argv(
        tmp_path, text_corpus, "--local", "--objective", "loss", "--trials", "3", "--keep-weights", "1"
    )
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no room" in err[0] and "run the same command again" in err[0], err
    study = _study(tmp_path)
    (first,) = [t for t in study.trials if t.state == TrialState.COMPLETE]  # its measurement is kept
    assert first.user_attrs.get(WEIGHTS) is None
    assert _files(_weights_dir(tmp_path)) == set()  # nothing half-written, no temporary file left
    # with room again the same command goes on, and keeps the best trial's weights
    monkeypatch.setattr(pathlib.Path, "write_bytes", real)
    assert main(argv) == 0
    best = min(trained(_study(tmp_path)), key=lambda t: (t.values[0], t.number))
    if best.number == first.number:  # its weights never reached the disk: the best held is kept instead
        assert len(_files(_weights_dir(tmp_path))) == 1
    else:
        assert _files(_weights_dir(tmp_path)) == {f"trial_{best.number}.safetensors"}


@pytest.mark.parametrize("command", ["confirm", "ladder"])
def test_confirm_and_ladder_keep_no_weights(tmp_path, text_corpus, capsys, command):
    assert main(_argv(tmp_path, text_corpus, "--local", "--trials", "1", "--steps", "2")) == 0
    capsys.readouterr()
    assert main([command, "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--keep-weights", "1",
                 "--local"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "resources.keep_weights" in err[0] and "keeps no weights" in err[0], err


# -- Ray --------------------------------------------------------------------------------------------


def test_weights_through_ray_equal_the_workers(tmp_path, text_corpus, ray_cluster):
    """The weights come from the worker's node through Ray (no shared file system assumed), and they are
    the model the worker trained: a retrain here, same seed and thread count, gives the same tensors."""
    from safetensors.torch import load

    from evaluators.lm import train_lm
    from nas.data import load_corpus
    from nas.spec.training import Budget, TrainRecipe

    argv = _argv(tmp_path, text_corpus, "--workers", "2", "--objective", "loss", "--trials", "3",
                 "--keep-weights", "3", "--steps", "6")  # fmt: skip
    assert main(argv) == 0
    study = _study(tmp_path)
    ran = [t for t in trained(study) if "duplicate_of" not in t.user_attrs]
    assert ran and all(t.user_attrs.get("worker_node") not in (None, "local") for t in ran)
    spec = study.user_attrs[SPEC]
    corpus = load_corpus(str(text_corpus))
    for t in ran:
        path = _weights_dir(tmp_path) / f"trial_{t.number}.safetensors"
        assert t.user_attrs[WEIGHTS]["sha256"] == _sha(path)
        got = load_checkpoint(path)
        made: list[bytes] = []
        arch = nas.ArchConfig.from_dict(t.user_attrs["arch"])
        train_lm(arch, TrainRecipe.from_dict(spec["recipe"]), Budget.from_dict(spec["budget"]), corpus,
                 device="cpu", threads=1, checkpoint_to=made.append)  # fmt: skip
        here, theirs = load(made[0]), got["model"].state_dict()
        assert here and all(torch.equal(here[k], theirs[k]) for k in here)
        assert got["metrics"]["val_loss"] == t.values[0]
