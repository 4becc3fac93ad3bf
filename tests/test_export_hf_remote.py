"""``export --checkpoint FILE --hf DIR`` for architectures that are not a Llama: the directory carries
its modeling code (modeling_nas.py and the engine modules it needs, bundled by nas.hf.bundle) and
``AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`` loads it in a process where
``import nas`` fails: logits equal to the engine's to 1e-5 in float32, greedy ``generate`` gives the
engine's ``greedy_generate`` tokens, ``AutoTokenizer`` loads the byte vocabulary, config.json records
the arch, its id, the data and the metrics.  Every registered attention block goes through it (each
with another position, norm and activation), so a block whose code does not bundle fails here.

One subprocess loads every exported directory (importing torch and transformers once); the tests
read what it measured."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import nas
from nas.cli import main
from nas.files.checkpoint import save_checkpoint
from nas.models import ATTENTION, greedy_generate

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ROOT / "examples" / "archs"
BYTES = {"corpus": "shakespeare", "name": "shakespeare", "vocab_size": 256, "fingerprint": "sha256:x"}
POSITIONS = ("learned", "sinusoidal", "rope", "alibi")
NORMS = ("layernorm", "rmsnorm")
ACTIVATIONS = ("relu", "gelu", "silu", "swiglu", "geglu", "squared_relu")
PROMPT, NEW = 8, 12


def _hybrid() -> nas.ArchConfig:
    """hyena and gated_linear layers (their example options) with an mha layer, rope, rmsnorm."""
    hyena = nas.load_arch(ARCHS / "hyena.yaml").layers[0].attention.to_dict()
    gla = nas.load_arch(ARCHS / "gated_linear.yaml").layers[0].attention.to_dict()
    return nas.ArchConfig.from_dict({
        "vocab_size": 256, "d_model": 64, "n_heads": 4, "max_len": 32, "pos_encoding": "rope",
        "norm": "rmsnorm", "tie_embeddings": False,
        "layers": [
            {"attention": hyena, "ffn": {"activation": "swiglu"}},
            {"attention": gla, "ffn": {"activation": "swiglu"}},
            {"attention": {"type": "gated_linear", "gate": "fixed"}, "ffn": {"activation": "squared_relu"}},
            {"attention": "mha", "ffn": {"activation": "swiglu"}},
        ],
    })  # fmt: skip


def _one_block(i: int, name: str) -> nas.ArchConfig:
    """Two layers of block ``name`` at a small size; position, norm, activation and tying vary with
    ``i`` so that the blocks together go through every one."""
    attention = {"type": name, **ATTENTION.get(name).example_options()}
    ffn = {"activation": ACTIVATIONS[i % len(ACTIVATIONS)]}
    return nas.ArchConfig.from_dict({
        "vocab_size": 256, "d_model": 32, "n_heads": 4, "max_len": 16,
        "pos_encoding": POSITIONS[i % len(POSITIONS)], "norm": NORMS[i % len(NORMS)],
        "tie_embeddings": i % 3 != 0,
        "layers": {"repeat": 2, "attention": attention, "ffn": ffn},
    })  # fmt: skip


def _cases() -> dict[str, nas.ArchConfig]:
    cases = {
        "primer_ez": nas.load_arch(ARCHS / "primer_ez.yaml"),
        "hybrid": _hybrid(),
        "mixture": nas.load_arch(ARCHS / "mixture.yaml"),
    }
    cases.update({f"block-{name}": _one_block(i, name) for i, name in enumerate(ATTENTION.names())})
    return cases


def _trained_looking(arch: nas.ArchConfig, seed: int) -> torch.nn.Module:
    """The model with every weight moved off its initial value, so that a weight the export missed
    (a norm's ones, a bias's zeros) shows in the logits."""
    torch.manual_seed(seed)
    model = nas.build_model(arch).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


#: What the subprocess runs: nas cannot be imported there, and the repository is not on its path.
LOADER = textwrap.dedent(
    """
    import json, sys, traceback

    class NoNas:
        def find_spec(self, name, path=None, target=None):
            if name == "nas" or name.startswith("nas."):
                raise ImportError("nas-lm is not installed here")

    sys.meta_path.insert(0, NoNas())
    repo = sys.argv[2]
    # the repository itself off the path (not what lies under it: a virtual environment may, as CI's .venv)
    sys.path = [p for p in sys.path if p not in ("", ".", repo, repo + "/")]
    try:
        import nas
    except ImportError:
        pass
    else:
        raise SystemExit("import nas worked")

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)


    def check(directory):
        ref = torch.load(f"{directory}.ref.pt")
        config = AutoConfig.from_pretrained(directory, trust_remote_code=True)
        model = AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True).eval()
        with torch.no_grad():
            out = model(input_ids=ref["idx"], labels=ref["idx"])
        prompt = ref["idx"][:, : ref["prompt"]]
        tok = AutoTokenizer.from_pretrained(directory, trust_remote_code=True)
        text = "To be, or not: Ünïcødé"
        tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        return {
            "logits": out.logits,
            "loss": out.loss,
            "greedy": model.generate(prompt, max_new_tokens=ref["new"], do_sample=False),
            "class": type(model).__module__ + "." + type(model).__name__,
            "config": type(config).__name__,
            "dtype": str(model.dtype),
            "tied": tied,
            "bytes": tok(text).input_ids == list(text.encode()) and tok.decode(tok(text).input_ids) == text,
        }


    results = {}
    for case, directory in json.loads(open(sys.argv[1]).read()).items():
        try:
            results[case] = check(directory)
        except Exception:
            results[case] = {"error": traceback.format_exc()}
    results["nas modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "nas")
    torch.save(results, sys.argv[3])
    """
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case saved as a checkpoint, exported with ``export --hf``, and loaded by the subprocess."""
    tmp = tmp_path_factory.mktemp("remote")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    dirs, refs, archs = {}, {}, {}
    try:
        for seed, (case, arch) in enumerate(_cases().items()):
            model = _trained_looking(arch, seed)
            ckpt, out = tmp / f"{case}.safetensors", tmp / case
            metrics = {"val_loss": 1.75, "params": 123, "val_bpb": float("inf")}
            extra = {"recipe": {"lr": 0.003}, "budget": {"steps": 3}, "metrics": metrics, "data": BYTES}
            save_checkpoint(ckpt, model, **extra)
            assert main(["export", "--checkpoint", str(ckpt), "--hf", str(out)]) == 0, case
            prompt, new = (PROMPT, NEW) if arch.max_len <= 16 else (PROMPT, 24)
            idx = torch.randint(0, 256, (2, arch.max_len), generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                logits = model(idx)
            greedy = greedy_generate(model, idx[:, :prompt], new)
            # the mean next-token cross-entropy: what labels=idx must give
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten())
            torch.save({"idx": idx, "prompt": prompt, "new": new}, f"{out}.ref.pt")
            dirs[case], refs[case], archs[case] = str(out), (logits, greedy, loss), arch
    finally:
        torch.set_num_threads(threads)
    (tmp / "cases.json").write_text(json.dumps(dirs))
    (tmp / "loader.py").write_text(LOADER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(tmp / "modules"), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    run = subprocess.run(
        [sys.executable, str(tmp / "loader.py"), str(tmp / "cases.json"), str(ROOT), str(tmp / "results.pt")],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return {"dirs": dirs, "refs": refs, "archs": archs, "results": torch.load(tmp / "results.pt")}


@pytest.mark.parametrize("case", list(_cases()))
def test_transformers_loads_it_without_nas_with_the_same_logits_and_greedy_tokens(exported, case) -> None:
    got = exported["results"][case]
    assert "error" not in got, got.get("error")
    logits, greedy, loss = exported["refs"][case]
    assert got["class"].endswith("modeling_nas.NasForCausalLM") and got["config"] == "NasConfig"
    assert got["dtype"] == "torch.float32"
    assert (got["logits"] - logits).abs().max().item() < 1e-5
    assert torch.equal(got["greedy"], greedy)
    assert got["loss"] is not None and abs(got["loss"].item() - loss.item()) < 1e-5
    assert got["tied"] == exported["archs"][case].tie_embeddings
    assert got["bytes"]
    assert exported["results"]["nas modules"] == []


def test_every_attention_block_is_a_case() -> None:
    """A new block joins the round trip by being registered (the cases come from the registry)."""
    assert {f"block-{name}" for name in ATTENTION.names()} <= set(_cases())
    archs = [_cases()[f"block-{name}"] for name in ATTENTION.names()]
    assert {a.pos_encoding for a in archs} == set(POSITIONS) and {a.norm for a in archs} == set(NORMS)
    assert {a.layers[0].ffn.activation for a in archs} == set(nas.ACTIVATIONS.names())


@pytest.mark.parametrize("case", ["primer_ez", "hybrid", "mixture"])
def test_config_json_records_the_arch_data_and_metrics_and_names_the_code(exported, case) -> None:
    out, arch = Path(exported["dirs"][case]), exported["archs"][case]
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "nas_lm" and config["architectures"] == ["NasForCausalLM"]
    assert config["auto_map"] == {
        "AutoConfig": "modeling_nas.NasConfig",
        "AutoModelForCausalLM": "modeling_nas.NasForCausalLM",
    }
    assert config["nas_arch"] == arch.to_dict() and config["nas_arch_id"] == arch.arch_id
    assert config["nas_data"]["fingerprint"] == "sha256:x" and config["nas_metrics"]["val_loss"] == 1.75
    assert config["nas_metrics"]["val_bpb"] is None  # inf is not JSON
    assert config["tie_word_embeddings"] == arch.tie_embeddings and config["vocab_size"] == 256
    card = (out / "README.md").read_text()
    assert arch.arch_id in card and "1.7500" in card and "trust_remote_code=True" in card
    assert "no key/value cache" in card
    from nas.files.archfile import load_arch  # and --arch takes the export's config.json as the architecture

    assert load_arch(out / "config.json").arch_id == arch.arch_id


def _imports(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


@pytest.mark.parametrize("case", list(_cases()))
def test_the_bundled_files_import_only_torch_transformers_stdlib_and_each_other(exported, case) -> None:
    from transformers.dynamic_module_utils import get_relative_import_files

    out = Path(exported["dirs"][case])
    files = {p.name for p in out.glob("*.py")}
    for name in files:
        for level, module in _imports((out / name).read_text()):
            if level == 0:
                top = module.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("torch", "transformers"), (name, module)
            else:
                assert level == 1 and f"{module}.py" in files, (name, level, module)
    copied = {Path(f).name for f in get_relative_import_files(str(out / "modeling_nas.py"))}
    assert copied | {"modeling_nas.py"} == files  # transformers copies every file, and no other is there
    # transformers before 5.10 copies from a local directory only what modeling_nas.py itself imports
    direct = {f"{module}.py" for level, module in _imports((out / "modeling_nas.py").read_text()) if level}
    assert direct | {"modeling_nas.py"} == files


def test_modules_the_model_does_not_need_stay_out(exported) -> None:
    primer = {p.name for p in Path(exported["dirs"]["primer_ez"]).glob("*.py")}
    assert {"modeling_nas.py", "nas_models_attention_mdha.py", "nas_models_model.py"} <= primer
    for absent in ("seq2seq", "build", "sizes", "hyena", "gated_linear", "mixture", "synth", "checkpoint"):
        assert not [f for f in primer if absent in f], absent
    assert "nas_models_attention.py" not in primer and "nas_models.py" not in primer  # package inits
    mixture = {p.name for p in Path(exported["dirs"]["mixture"]).glob("*.py")}
    assert {"nas_models_attention_mixture.py", "nas_models_attention_synth_random.py"} <= mixture


def test_an_encoder_decoder_is_refused_in_one_line(tmp_path, capsys) -> None:
    arch = nas.load_arch(ARCHS / "seq2seq.yaml")
    save_checkpoint(tmp_path / "s.safetensors", nas.build_model(arch))
    capsys.readouterr()
    code = main(["export", "--checkpoint", str(tmp_path / "s.safetensors"), "--hf", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "seq2seq (encoder-decoder)" in err[0], err
    assert [p.name for p in tmp_path.iterdir()] == ["s.safetensors"]


def test_a_missing_tokenizer_writes_nothing(tmp_path, capsys) -> None:
    arch = _one_block(0, "mdha")
    data = {**BYTES, "vocab_size": 256, "tokenizer": str(tmp_path / "gone.json")}
    save_checkpoint(tmp_path / "m.safetensors", nas.build_model(arch), data=data)
    capsys.readouterr()
    code = main(["export", "--checkpoint", str(tmp_path / "m.safetensors"), "--hf", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "gone.json" in err[0], err
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


# -- the bundler's rewriting ------------------------------------------------------------------------
def test_nas_imports_become_imports_of_the_flat_files_inside_functions_too() -> None:
    from nas.hf.bundle import rewrite

    source = textwrap.dedent(
        """
        from nas.models import ArchConfig, TransformerLM as LM
        from nas.models.attention import (
            ATTENTION,
        )


        def f():
            from nas.models.ffn import ffn_width  # a comment stays out

            return ffn_width
        """
    )
    text, deps = rewrite("nas.models.model", source)
    assert "from .nas_models_config import ArchConfig\n" in text
    assert "from .nas_models_model import TransformerLM as LM\n" in text
    assert "from .nas_models_attention_base import ATTENTION\n" in text
    assert "    from .nas_models_ffn import ffn_width\n" in text
    assert "nas." not in text.replace("nas_", "")
    assert deps == {"nas.models.config", "nas.models.model", "nas.models.attention.base", "nas.models.ffn"}
    compile(text, "x", "exec")


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("import nas.models.ffn\n", "import nas.models.ffn"),
        ("from nas.models.ffn import *\n", "star import"),
        ("from nas.models import attention\n", "imports a module"),
        ("from nas.models import FFN\n", "defined in the package's __init__"),
        ("x = 1; from nas.models.ffn import GATED\n", "shares its line"),
    ],
)
def test_imports_that_do_not_bundle_are_refused_by_name(source, words) -> None:
    from nas.hf.bundle import BundleError, rewrite

    with pytest.raises(BundleError, match=words):
        rewrite("nas.models.model", source)


@pytest.mark.slow
def test_done_when_train_primer_ez_then_export_loads_with_remote_code(tmp_path, monkeypatch) -> None:
    """The issue's check for a non-Llama architecture: train --arch primer_ez --budget.steps 3 --save,
    export --hf, AutoModelForCausalLM with trust_remote_code (in this process), logits to 1e-5."""
    monkeypatch.chdir(tmp_path)
    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader adds its cache to the path
    args = ["--arch", "primer_ez", "--budget.steps", "3", "--save", "w.safetensors", "--threads", "1"]
    assert main(["train", *args]) == 0
    assert main(["export", "--checkpoint", "w.safetensors", "--hf", "out"]) == 0
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained("out", trust_remote_code=True).eval()
    ours = nas.load_model("w.safetensors")
    idx = torch.randint(0, 256, (2, ours.arch.max_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (hf(input_ids=idx).logits - ours(idx)).abs().max().item() < 1e-5
