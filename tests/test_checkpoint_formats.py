"""Checkpoints in both formats: ``train --save x.safetensors`` (tied weight stored once, the
architecture, recipe, budget, metrics and data as JSON metadata) and the torch ``.pt`` file;
both load through ``nas.load_model`` to the same logits; ``--save`` never replaces a file silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open

import nas
from nas.cli import main
from nas.files.checkpoint import FORMAT, load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("single_thread")

ARCH = nas.ArchConfig.from_dict({
    "vocab_size": 256, "d_model": 32, "n_heads": 4, "max_len": 16, "pos_encoding": "rope", "norm": "rmsnorm",
    "tie_embeddings": True,
    "layers": {"repeat": 2, "attention": {"type": "mha", "kv_heads": 2}, "ffn": "swiglu"},
})  # fmt: skip


@pytest.mark.parametrize("name", ["m.safetensors", "m.pt"])
@pytest.mark.parametrize("tied", [True, False])
def test_round_trip_gives_the_same_logits(tmp_path: Path, name: str, tied: bool) -> None:
    torch.manual_seed(0)
    arch = nas.ArchConfig.from_dict({**ARCH.to_dict(), "tie_embeddings": tied})
    model = nas.build_model(arch).eval()
    save_checkpoint(tmp_path / name, model, metrics={"val_loss": 1.5, "val_bpb": float("nan")})
    loaded = load_checkpoint(tmp_path / name)
    idx = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        assert torch.equal(model(idx), loaded["model"](idx))
    assert loaded["arch"] == arch and loaded["metrics"]["val_loss"] == 1.5
    got = loaded["model"]
    assert (got.lm_head.weight is got.tok_emb.weight) == tied  # tied again on load


def test_the_tied_weight_is_stored_once_and_the_metadata_is_readable_json(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, nas.build_model(ARCH), recipe={"lr": 0.003}, metrics={"val_loss": 2.0})
    with safe_open(str(path), framework="pt") as f:
        names, meta = set(f.keys()), f.metadata()
    assert "tok_emb.weight" in names and "lm_head.weight" not in names
    assert len(names) == len(nas.build_model(ARCH).state_dict()) - 1
    assert json.loads(meta["tied"]) == {"tok_emb.weight": ["lm_head.weight"]}
    assert json.loads(meta["format"]) == FORMAT and json.loads(meta["arch"]) == ARCH.to_dict()
    assert json.loads(meta["recipe"]) == {"lr": 0.003} and json.loads(meta["metrics"]) == {"val_loss": 2.0}


@pytest.mark.parametrize("damage", ["truncate", "tied-unknown"])
def test_a_damaged_safetensors_checkpoint_is_the_librarys_error(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "m.safetensors"
    if damage == "truncate":
        save_checkpoint(path, nas.build_model(ARCH))
        path.write_bytes(path.read_bytes()[:200])
    else:
        from safetensors.torch import save_file

        meta = {"format": json.dumps(FORMAT), "arch": json.dumps(ARCH.to_dict()), "tied": '{"x": ["y"]}'}
        save_file({"a": torch.zeros(1)}, str(path), metadata=meta)
    with pytest.raises(nas.CheckpointError, match="m.safetensors"):
        nas.load_model(path)


@pytest.mark.parametrize(
    "key,value,expected",
    [  # each was a traceback: json's RecursionError, or export's .get on a list or a string
        ("arch", "[" * 100_000 + "]" * 100_000, "its metadata 'arch' is not JSON (edited?)"),
        ("tied", "[" * 50_000 + "]" * 50_000, "its metadata 'tied' is not JSON (edited?)"),
        ("data", "[1]", "its 'data' is a list, not a mapping (edited?)"),
        ("metrics", '"fine"', "its 'metrics' is a str, not a mapping (edited?)"),
    ],
    ids=["arch-nested-deep", "tied-nested-deep", "data-a-list", "metrics-a-string"],
)
def test_edited_safetensors_metadata_is_one_line(
    tmp_path: Path, key: str, value: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "m.safetensors"
    save_checkpoint(path, nas.build_model(ARCH), metrics={"val_loss": 2.0}, data={"corpus": "shakespeare"})
    with safe_open(str(path), framework="pt") as f:
        meta, state = f.metadata(), {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    save_file(state, str(path), metadata={**meta, key: value})
    assert main(["export", "--checkpoint", str(path), "--hf", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == f"error: {path}: {expected}", err
    assert not (tmp_path / "out").exists()


def test_train_save_safetensors_records_the_run_and_refuses_a_second_save(
    tmp_path: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"arch": ARCH.to_dict(), "recipe": {"batch_size": 2}}))
    save = tmp_path / "w.safetensors"
    argv = ["train", "--arch", str(tmp_path / "a.yaml"), "--data", str(corpus_dir), "--budget.steps", "1",
            "--save", str(save)]  # fmt: skip
    assert main(argv) == 0
    doc = load_checkpoint(save)
    assert doc["budget"]["steps"] == 1 and doc["recipe"]["batch_size"] == 2
    assert doc["data"]["fingerprint"] and doc["metrics"]["arch_id"] == ARCH.arch_id
    before = save.read_bytes()
    capsys.readouterr()
    assert main(argv) == 2  # the tool's own, unchanged checkpoint: still a trained model someone keeps
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--force" in err[0] and "--save" in err[0], err
    assert save.read_bytes() == before
    assert main([*argv, "--force"]) == 0


def _edited(tmp_path: Path, case: str) -> Path:
    """A checkpoint of ARCH changed as a hostile user (or another tool) would: see the cases below."""
    from safetensors.torch import load_file, save_file

    model = nas.build_model(ARCH)
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, model, metrics={"val_loss": 1.5, "arch_id": ARCH.arch_id})
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata())
    tensors = load_file(str(path))
    if case == "integer-weight":
        tensors["layers.0.ffn.fc_in.weight"] = tensors["layers.0.ffn.fc_in.weight"].round().to(torch.int32)
    elif case == "alias-over-a-stored-tensor":
        tensors["lm_head.weight"] = torch.zeros_like(tensors["tok_emb.weight"])
    elif case == "edited-architecture":  # still builds and loads (same shapes): a deeper rope base
        arch = json.loads(meta["arch"])
        arch["rope_base"] = 500_000.0 if arch.get("rope_base") != 500_000.0 else 10_000.0
        meta["arch"] = json.dumps(arch)
    elif case == "hugging-face-weights":
        meta = {"format": "pt"}
    save_file(tensors, str(path), metadata=meta)
    return path


@pytest.mark.parametrize(
    "case, said",
    [
        ("integer-weight", "'layers.0.ffn.fc_in.weight' is int32, where the model holds float32"),
        (
            "alias-over-a-stored-tensor",
            "makes 'lm_head.weight' an alias of 'tok_emb.weight', but the file also",
        ),
        ("edited-architecture", "is not the one it was trained as (recorded"),
        ("hugging-face-weights", "safetensors weights without nas-lm's metadata (a Hugging Face"),
    ],
)
def test_the_loader_does_not_trust_the_file(tmp_path: Path, capsys, case: str, said: str) -> None:
    """Each loaded silently before: integers cast to floats, a tied alias over a stored tensor, an edited
    architecture whose recorded loss belongs to another model, and a Hugging Face weights file was "not
    JSON (edited?)"."""
    path = _edited(tmp_path, case)
    with pytest.raises(nas.CheckpointError, match=None) as caught:
        load_checkpoint(path)
    assert said in str(caught.value) and "\n" not in str(caught.value)
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(path), "--hf", str(out)]) == 2  # as the export meets it
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and not out.exists()


def test_the_format_is_chosen_by_the_suffix_whatever_its_case_and_read_by_content(tmp_path: Path) -> None:
    model = nas.build_model(ARCH)
    upper = tmp_path / "m.SAFETENSORS"
    save_checkpoint(upper, model)
    with safe_open(str(upper), framework="pt") as f:  # safetensors, as the name says (a torch zip before)
        assert "tok_emb.weight" in set(f.keys())
    torch_file = tmp_path / "torch.safetensors"  # a torch file under a safetensors name: read by content
    save_checkpoint(tmp_path / "m.pt", model)
    torch_file.write_bytes((tmp_path / "m.pt").read_bytes())
    for p in (upper, torch_file):
        assert load_checkpoint(p)["arch"] == ARCH


def test_a_checkpoint_with_a_nan_weight_is_refused_by_the_export_in_one_line(tmp_path: Path, capsys) -> None:
    """The export's self-check compared NaN logits and raised a RuntimeError traceback."""
    model = nas.build_model(ARCH)
    with torch.no_grad():
        model.state_dict()["layers.1.attn.qkv.weight"][0, :3] = float("nan")
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, model, metrics={"val_loss": 1.5})
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(path), "--hf", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'layers.1.attn.qkv.weight' holds 3 NaN or infinite value(s)" in err
    assert not out.exists()
