"""``export --checkpoint FILE --hf DIR``: a Llama-shaped checkpoint becomes a plain Llama directory that
``transformers`` loads with no remote code: logits equal to 1e-5 in float32, ``generate`` gives the
engine's own greedy tokens, ``AutoTokenizer`` loads the byte vocabulary (or the user's tokenizer.json),
config.json records the arch and metrics.  Any other decoder-only architecture exports with its
modeling code (tests/test_export_hf_remote.py); errors are one line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import nas
from nas.cli import main
from nas.files.checkpoint import save_checkpoint
from nas.models import greedy_generate

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("single_thread")

BYTES = {"corpus": "shakespeare", "name": "shakespeare", "vocab_size": 256, "fingerprint": "sha256:x"}


def _arch(kv_heads: int = 0, tied: bool = True, **changes) -> nas.ArchConfig:
    attention = {"type": "mha", "kv_heads": kv_heads} if kv_heads else "mha"
    return nas.ArchConfig.from_dict({
        "vocab_size": 256, "d_model": 32, "n_heads": 4, "max_len": 24, "pos_encoding": "rope",
        "norm": "rmsnorm", "tie_embeddings": tied,
        "layers": {"repeat": 2, "attention": attention, "ffn": {"activation": "swiglu"}},
        **changes,
    })  # fmt: skip


def _checkpoint(path: Path, arch: nas.ArchConfig, data: dict | None = BYTES) -> torch.nn.Module:
    torch.manual_seed(0)
    model = nas.build_model(arch).eval()
    for p in model.parameters():  # norms start at exactly 1: move them so that a missed weight shows
        if p.dim() == 1:
            p.data.uniform_(0.5, 1.5)
    metrics = {"val_loss": 2.25, "val_bpb": float("nan"), "params": 1, "arch_id": arch.arch_id}
    save_checkpoint(path, model, recipe={"lr": 0.003}, budget={"steps": 1}, metrics=metrics, data=data)
    return model


def _export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["export", *argv])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    ("kv_heads", "tied", "suffix"), [(0, True, "safetensors"), (2, False, "pt"), (1, True, "pt")]
)
def test_a_llama_shaped_checkpoint_loads_as_a_plain_llama(tmp_path, capsys, kv_heads, tied, suffix) -> None:
    from transformers import AutoTokenizer, LlamaForCausalLM

    ckpt, out = tmp_path / f"m.{suffix}", tmp_path / "out"
    ours = _checkpoint(ckpt, _arch(kv_heads, tied))
    code, err = _export(capsys, "--checkpoint", str(ckpt), "--hf", str(out))
    assert code == 0, err
    hf = LlamaForCausalLM.from_pretrained(out).eval()
    assert hf.dtype == torch.float32 and (hf.lm_head.weight is hf.model.embed_tokens.weight) == tied
    idx = torch.randint(0, 256, (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (hf(input_ids=idx).logits - ours(idx)).abs().max().item() < 1e-5
    prompt = idx[:2, :8]
    got = hf.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=0)
    assert torch.equal(got, greedy_generate(ours, prompt, 16))
    tok = AutoTokenizer.from_pretrained(out)
    text = "To be, or not: Ünïcødé\n"
    ids = tok(text).input_ids
    assert len(tok) == 256 and ids == list(text.encode()) and tok.decode(ids) == text
    config = json.loads((out / "config.json").read_text())
    assert config["nas_arch_id"] == ours.arch.arch_id and config["nas_arch"] == ours.arch.to_dict()
    assert config["nas_metrics"]["val_loss"] == 2.25 and config["nas_metrics"]["val_bpb"] is None
    assert config["nas_data"]["fingerprint"] == "sha256:x" and "auto_map" not in config
    card = (out / "README.md").read_text()
    assert ours.arch.arch_id in card and "2.2500" in card and "LlamaForCausalLM" in card
    assert oct((out / "model.safetensors").stat().st_mode & 0o777) != "0o600"


@pytest.mark.parametrize("remote", [False, True])
def test_the_card_names_the_context_the_model_was_trained_at(remote: bool) -> None:
    from nas.hf.card import model_card

    arch = _arch()  # max_len 24
    doc = {"recipe": {"seq_len": 8}, "metrics": {"val_loss": 2.25}}
    card = model_card(arch, doc, "m.safetensors", "byte-level", remote=remote)
    # it trained on 8-token windows: "trained context 24" said positions 8 to 23 were trained
    assert "trained context" not in card
    assert "context 24 tokens (max_len), trained on sequences of 8 tokens (recipe.seq_len)" in card
    for recipe in ({"seq_len": None}, {}, {"seq_len": 24}):
        card = model_card(arch, {**doc, "recipe": recipe}, "m.safetensors", "byte-level", remote=remote)
        assert "trained context 24 tokens" in card


def test_the_users_tokenizer_is_copied(tmp_path, capsys) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer

    vocab = {w: i for i, w in enumerate(["[UNK]", "to", "be", "or", "not"])}
    user = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    user.pre_tokenizer = pre_tokenizers.Whitespace()
    user.save(str(tmp_path / "tokenizer.json"))
    data = {**BYTES, "vocab_size": 5, "tokenizer": str(tmp_path / "tokenizer.json")}
    _checkpoint(tmp_path / "m.safetensors", _arch(vocab_size=5), data)
    code, err = _export(
        capsys, "--checkpoint", str(tmp_path / "m.safetensors"), "--hf", str(tmp_path / "out")
    )
    assert code == 0, err
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tok("to be or not").input_ids == [1, 2, 3, 4]


def test_a_tokenizer_damaged_or_replaced_since_training_is_refused(tmp_path, capsys) -> None:
    """The recorded tokenizer.json is read back as --tokenizer is: a damaged one was a traceback, and
    another one shipped with the model without a word."""
    import hashlib

    from tokenizers import Tokenizer, models

    def save(words: list[str]) -> bytes:
        Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")).save(str(file))
        return file.read_bytes()

    file = tmp_path / "tokenizer.json"
    trained = save(["[UNK]", "to", "be", "or", "not"])
    data = {**BYTES, "vocab_size": 5, "tokenizer": str(file),
            "tokenizer_fingerprint": "sha256:" + hashlib.sha256(trained).hexdigest()[:16]}  # fmt: skip
    _checkpoint(tmp_path / "m.pt", _arch(vocab_size=5), data)
    file.write_bytes(trained.decode().encode("utf-16"))
    code, err = _export(capsys, "--checkpoint", str(tmp_path / "m.pt"), "--hf", str(tmp_path / "out"))
    assert code == 2 and len(err) == 1 and f"m.pt: its tokenizer {file}: UTF-16 text" in err[0], err
    save(["[UNK]", "to", "be", "or", "NOT"])
    code, err = _export(capsys, "--checkpoint", str(tmp_path / "m.pt"), "--hf", str(tmp_path / "out"))
    assert code == 2 and len(err) == 1 and f"tokenized with {file}, which has changed since" in err[0], err
    assert not (tmp_path / "out").exists()
    file.write_bytes(trained)
    code, err = _export(capsys, "--checkpoint", str(tmp_path / "m.pt"), "--hf", str(tmp_path / "out"))
    assert code == 0, err


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"layers": [{"attention": "mha", "ffn": "swiglu"}, {"attention": "mdha", "ffn": "swiglu"}]},
         "layer 1's attention is mdha"),
        ({"layers": {"repeat": 2, "attention": "mha", "ffn": "relu"}}, "layer 0's FFN is relu"),
        ({"pos_encoding": "learned"}, "its positions are learned"),
        ({"norm": "layernorm"}, "its norm is layernorm"),
    ],
)  # fmt: skip
def test_what_is_not_a_llama_is_named_and_exports_with_its_code(tmp_path, capsys, changes, words) -> None:
    from nas.hf.llama import not_a_llama

    arch = _arch(**changes)
    assert (not_a_llama(arch) or "").startswith(words)
    _checkpoint(tmp_path / "m.pt", arch)
    code, _ = _export(capsys, "--checkpoint", str(tmp_path / "m.pt"), "--hf", str(tmp_path / "out"))
    assert code == 0
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == "nas_lm" and "AutoModelForCausalLM" in config["auto_map"]
    assert (tmp_path / "out" / "modeling_nas.py").is_file()


def test_a_directory_with_files_needs_force_and_keeps_the_others(tmp_path, capsys) -> None:
    _checkpoint(tmp_path / "m.safetensors", _arch())
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    argv = ["--checkpoint", str(tmp_path / "m.safetensors"), "--hf", str(out)]
    code, err = _export(capsys, *argv)
    assert code == 2 and len(err) == 1 and "--force" in err[0] and "--hf" in err[0], err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert _export(capsys, *argv, "--force")[0] == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "model.safetensors").is_file()


def test_a_ctrl_c_while_a_forced_export_moves_its_files_in_waits_until_all_are_in(
    tmp_path, capsys, monkeypatch, sigint_raises
) -> None:
    """With --force into a directory holding an earlier export, a Ctrl-C between two of the files moved in
    left the old export's files mixed with the new one's; the stop now waits until every file is in."""
    import os
    import signal

    _checkpoint(tmp_path / "m.safetensors", _arch())
    out = tmp_path / "out"
    argv = ["--checkpoint", str(tmp_path / "m.safetensors"), "--hf", str(out)]
    assert _export(capsys, *argv)[0] == 0
    for f in out.iterdir():
        f.write_text("the earlier export")
    real, moved = os.replace, []

    def replace(src, dst) -> None:
        real(src, dst)
        moved.append(dst)
        if len(moved) == 1:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C after the first file

    monkeypatch.setattr(os, "replace", replace)
    code, err = _export(capsys, *argv, "--force")
    assert code == 130 and err[-1] == "interrupted", err
    assert len(moved) > 1 and not [f.name for f in out.iterdir() if f.read_bytes() == b"the earlier export"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors", "out"]  # no temporary directory


def test_the_summary_names_and_sizes_only_what_the_export_wrote(tmp_path, capsys) -> None:
    """With --force into a directory holding a user's files, the `wrote` line listed them and counted
    their bytes as the model's size."""
    _checkpoint(tmp_path / "m.safetensors", _arch())
    out = tmp_path / "out"
    out.mkdir()
    (out / "big_notes.bin").write_bytes(b"x" * 50_000_000)
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(tmp_path / "m.safetensors"), "--hf", str(out), "--force"]) == 0
    wrote = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("wrote "))
    assert "big_notes.bin" not in wrote and "model.safetensors" in wrote, wrote
    size = float(wrote.split(" MB)")[0].rsplit("(", 1)[1])
    written = sum(f.stat().st_size for f in out.iterdir() if f.name != "big_notes.bin")
    assert size == pytest.approx(written / 1e6, abs=0.01), wrote


def test_the_checkpoint_exported_is_never_replaced_even_with_force(tmp_path, capsys) -> None:
    """`train --save out/model.safetensors` then `export --checkpoint out/model.safetensors --hf out
    --force` replaced the user's checkpoint (its architecture, recipe and metrics) by the HF weights."""
    out = tmp_path / "out"
    out.mkdir()
    ckpt = out / "model.safetensors"
    _checkpoint(ckpt, _arch())
    before = ckpt.read_bytes()
    for hf in (out, tmp_path / "link"):  # also through a link to the directory
        (tmp_path / "link").unlink(missing_ok=True)
        (tmp_path / "link").symlink_to(out)
        code, err = _export(capsys, "--checkpoint", str(ckpt), "--hf", str(hf), "--force")
        assert code == 2 and len(err) == 1 and "the checkpoint it exports" in err[0], err
        assert ckpt.read_bytes() == before and [p.name for p in out.iterdir()] == ["model.safetensors"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_search_directory_is_never_the_hf_directory_even_with_force(tmp_path, capsys) -> None:
    """--hf at the runs directory, a study's directory or its weights directory wrote the model among the
    search's files (beside its database) with --force."""
    _checkpoint(tmp_path / "m.safetensors", _arch())
    study = tmp_path / "runs" / "s"
    (study / "weights").mkdir(parents=True)
    (study / "study.db").write_bytes(b"SQLite format 3\x00" + bytes(100))
    (study / "weights" / "trial_0.safetensors").write_bytes(b"w")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    cases = [
        (tmp_path / "runs", "a runs directory"),
        (study, "a study's directory (it holds study.db)"),
        (study / "weights", "where a search keeps its trials' weights"),
    ]
    for hf, words in cases:
        code, err = _export(
            capsys, "--checkpoint", str(tmp_path / "m.safetensors"), "--hf", str(hf), "--force"
        )
        assert code == 2 and len(err) == 1 and words in err[0], err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_a_link_to_nothing_is_one_line_and_a_link_to_a_directory_is_written_through(tmp_path, capsys) -> None:
    """Both ended in a traceback (NotADirectoryError) once the model had been built."""
    _checkpoint(tmp_path / "m.safetensors", _arch())
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    code, err = _export(
        capsys, "--checkpoint", str(tmp_path / "m.safetensors"), "--hf", str(tmp_path / "dangling")
    )
    assert code == 2 and len(err) == 1 and "does not exist" in err[0], err
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    assert (
        _export(capsys, "--checkpoint", str(tmp_path / "m.safetensors"), "--hf", str(tmp_path / "link"))[0]
        == 0
    )
    assert (tmp_path / "link").is_symlink() and (tmp_path / "empty" / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "empty", "link", "m.safetensors"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--hf", "out"], "--checkpoint"),
        (["--checkpoint", "m.pt"], "--hf"),
        (["--checkpoint", "m.pt", "--hf", "out", "--best"], "--best"),
        (["--out", "x.yaml", "--best"], "--study"),
    ],
)
def test_missing_or_extra_flags_are_one_line(tmp_path, capsys, monkeypatch, argv, words) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = _export(capsys, *argv)
    assert code == 2 and len(err) == 1 and words in err[0], err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_done_when_train_transformer_pp_then_export_loads_as_llama(tmp_path, monkeypatch, capsys) -> None:
    """The issue's check: train --arch transformer_pp --budget.steps 20 --save tpp.safetensors, then
    export --checkpoint tpp.safetensors --hf out/; LlamaForCausalLM.from_pretrained("out/"), logits
    equal to 1e-5."""
    from transformers import LlamaForCausalLM

    monkeypatch.chdir(tmp_path)
    assert (
        main(["train", "--arch", "transformer_pp", "--budget.steps", "20", "--save", "tpp.safetensors"]) == 0
    )
    assert main(["export", "--checkpoint", "tpp.safetensors", "--hf", "out/"]) == 0
    hf = LlamaForCausalLM.from_pretrained("out/").eval()
    ours = nas.load_model("tpp.safetensors")
    idx = torch.randint(0, 256, (2, ours.arch.max_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (hf(input_ids=idx).logits - ours(idx)).abs().max().item() < 1e-5


def test_what_is_published_with_a_model_names_no_local_directory() -> None:
    """config.json's nas_data/nas_found and the model card carried the absolute paths of the corpus, the
    tokenizer and the study's database; each is its last name now, fingerprints kept."""
    from nas.hf.card import published, published_which

    doc = {
        "data": {
            "corpus": "/home/me/corpora/web",
            "name": "/home/me/corpora/web",
            "fingerprint": "sha256:1",
            "tokenizer": "/home/me/tok/tokenizer.json",
        },  # fmt: skip
        "metrics": {"corpus": "/home/me/corpora/web", "val_loss": 1.5},
        "found": {"study": "s", "storage": "sqlite:////home/me/runs/s/study.db", "trial": 3},
        "recipe": {"lr": 0.003},
    }
    out = published(doc)
    assert "/home/me" not in repr(out)
    assert out["data"] == {
        "corpus": "web",
        "name": "web",
        "fingerprint": "sha256:1",
        "tokenizer": "tokenizer.json",
    }
    assert out["found"]["storage"] == "sqlite:///study.db" and out["metrics"]["val_loss"] == 1.5
    assert published({"data": {"corpus": "shakespeare"}})["data"]["corpus"] == "shakespeare"  # a built-in
    assert published_which("a copy of /home/me/tok/tokenizer.json") == "a copy of tokenizer.json"
    assert doc["data"]["corpus"] == "/home/me/corpora/web"  # the checkpoint's own record is left as it is
