"""A Hugging Face Llama config.json as --arch: the engine's Transformer++ at that shape (issue 35, item 3)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import nas
from nas.cli import main
from nas.files.archfile import load_arch

ROOT = Path(__file__).resolve().parents[1]

LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
    "rope_scaling": None,
}


def _write(tmp_path: Path, **changes: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **changes}))
    return path


def _write_without(tmp_path: Path, key: str, **changes: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in {**LLAMA, **changes}.items() if k != key}))
    return path


def test_a_llama_config_is_the_transformer_pp_at_its_shape(tmp_path: Path) -> None:
    arch = load_arch(_write(tmp_path))
    assert (arch.d_model, arch.n_heads, len(arch.layers), arch.max_len) == (64, 4, 3, 64)
    assert (arch.pos_encoding, arch.norm, arch.rope_base, arch.tie_embeddings) == (
        "rope",
        "rmsnorm",
        5e5,
        True,
    )
    for layer in arch.layers:
        assert layer.attention.type == "mha" and layer.attention.options.kv_heads == 2
        assert layer.ffn.activation == "swiglu"
    model = nas.build_model(arch)
    assert model.layers[0].ffn.fc_out.in_features == 128  # the config's intermediate_size


def test_what_export_writes_reads_back_as_the_same_architecture() -> None:
    pytest.importorskip("transformers")
    from nas.hf.config import arch_from_llama_config
    from nas.hf.llama import llama_config
    from nas.models.sizes import resize

    tpp = load_arch(ROOT / "examples" / "archs" / "transformer_pp.yaml")
    # a base other than the default too: transformers 5 writes it under rope_parameters only
    for arch in (tpp, resize(tpp, 8), dataclasses.replace(tpp, rope_base=500000.0)):
        config = llama_config(arch).to_dict()
        assert nas.ArchConfig.from_dict(arch_from_llama_config(config)).arch_id == arch.arch_id


def test_transformers_5s_rope_parameters_give_the_base(tmp_path: Path) -> None:
    """A config.json written by transformers 5 holds ``rope_parameters: {rope_theta, rope_type}`` and no
    ``rope_theta``: read as base 10000, a Llama 3 (500000) became another model without a word."""
    rope = {"rope_type": "default", "rope_theta": 5e5}
    arch = load_arch(_write_without(tmp_path, "rope_theta", rope_parameters=rope))
    assert arch.rope_base == 5e5


def test_train_takes_a_config_json(
    tmp_path: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path)
    argv = ["train", "--arch", str(path), "--budget.steps", "2", "--threads", "1", "--data", str(corpus_dir)]
    assert main([*argv, "--recipe.batch_size", "2", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert metrics["arch_id"] == load_arch(path).arch_id


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"model_type": "mistral"}, "model_type"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
        ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}}, "rope_parameters"),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}, "rope_parameters"),  # 2 bases
        ({"attention_bias": True}, "attention_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"head_dim": 32}, "head_dim"),
        ({"rms_norm_eps": 1e-6}, "rms_norm_eps"),
        ({"intermediate_size": 0}, "intermediate_size"),
        ({"hidden_size": "wide"}, "hidden_size"),
    ],
)
def test_what_the_engine_cannot_build_is_one_line_naming_the_key(
    changes: dict, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, **changes)
    assert main(["train", "--arch", str(path), "--budget.steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0] and str(path) in err[0], err


def test_an_export_of_the_engines_own_model_reads_back_as_its_architecture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`export --hf` of a non-Llama architecture writes model_type nas_lm and the arch under nas_arch;
    `--arch out/config.json` refused it ("only Llama configs") though the file holds the architecture."""
    arch = load_arch(ROOT / "examples" / "archs" / "primer_ez.yaml")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "nas_lm", "nas_arch": arch.to_dict(), "vocab_size": 256}))
    assert load_arch(path).arch_id == arch.arch_id
    path.write_text(json.dumps({"model_type": "nas_lm", "nas_arch": [1, 2]}))
    assert main(["train", "--arch", str(path), "--budget.steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nas_arch" in err[0] and str(path) in err[0], err


def test_the_engines_model_type_is_what_the_remote_code_export_writes() -> None:
    pytest.importorskip("transformers")
    from nas.hf.config import NAS_MODEL_TYPE
    from nas.hf.modeling import MODEL_TYPE

    assert NAS_MODEL_TYPE == MODEL_TYPE


@pytest.mark.parametrize(
    ("changes", "key", "said"),
    [
        # values were coerced: "false" became true, 32.7 became 32
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings", "must be true or false, got 'false'"),
        ({"attention_bias": "no"}, "attention_bias", "must be true or false"),
        ({"hidden_size": 64.5}, "hidden_size", "must be a whole number, got 64.5"),
        ({"num_hidden_layers": 2.7}, "num_hidden_layers", "must be a whole number"),
        # keys the engine cannot build were dropped silently
        ({"sliding_window": 16}, "sliding_window", "attends over all of its context"),
        ({"use_sliding_window": True}, "use_sliding_window", "attends over all of its context"),
        ({"attention_dropout": 0.1}, "attention_dropout", "trains without dropout"),
        ({"layer_types": ["full_attention", "sliding_attention", "full_attention"]}, "layer_types", "full"),
        ({"quantization_config": {"bits": 4}}, "quantization_config", "full-precision"),
        ({"moe_num_experts": 8}, "moe_num_experts", "a key the engine cannot build nor knows to be harmless"),
    ],
)
def test_config_values_are_checked_not_coerced_and_unbuildable_keys_refused(
    changes: dict, key: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, **changes)
    assert main(["train", "--arch", str(path), "--budget.steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0] and said in err[0] and str(path) in err[0], err


def test_values_transformers_reads_as_the_same_are_taken(tmp_path: Path) -> None:
    """32.0 is 32 to transformers; false ids, dtypes and bookkeeping change nothing built."""
    same = load_arch(_write(tmp_path, hidden_size=64.0, num_hidden_layers=3.0, attention_dropout=0.0,
                            sliding_window=None, layer_types=["full_attention"] * 3, pretraining_tp=1,
                            torch_dtype="bfloat16", transformers_version="4.57.6",
                            hidden_act="swish"))  # fmt: skip
    assert same.arch_id == load_arch(_write(tmp_path)).arch_id


@pytest.mark.parametrize("model_type", ["nas_lm", "llama"])
def test_an_exports_config_whose_sizes_disagree_with_its_nas_arch_is_refused(
    model_type: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An edited width in an export's own config.json was dropped silently (nas_lm read nas_arch only)."""
    arch = load_arch(_write(tmp_path))
    doc = {**LLAMA, "model_type": model_type, "nas_arch": arch.to_dict()}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    assert load_arch(path).arch_id == arch.arch_id  # agreeing: read
    path.write_text(json.dumps({**doc, "hidden_size": 128, "intermediate_size": 256}))
    assert main(["train", "--arch", str(path), "--budget.steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "hidden_size" in err[0] and "nas_arch it was exported with has d_model 64" in err[0]
    )
