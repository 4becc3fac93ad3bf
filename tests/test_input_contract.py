"""The input contract beyond the CLI cases of ``test_bad_input.py``: the shared checks themselves,
tampered checkpoints, the corpus cache, the YAML reader's bounds, and the objectives' names.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
import yaml

import nas
from nas.cli import main
from nas.errors import CheckpointError, ConfigError, UserError
from nas.files.checkpoint import FORMAT, save_checkpoint
from nas.files.yamlsafe import MAX_DEPTH, MAX_NODES, expanded_size, load_yaml
from nas.validate import check_number, check_output_file, check_writable_dir, non_finite_path
from tests.test_bad_input import BASE_FILES, BOMB, snapshot, write_files

ROOT = Path(__file__).resolve().parents[1]
ARCH = nas.ArchConfig.from_dict(
    {"d_model": 16, "n_heads": 2, "max_len": 16, "layers": [{"attention": "mha", "ffn": {"mult": 2}}]}
)


# -- numbers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, "3", None, [1]])
def test_check_number_refuses_what_is_not_a_finite_number(value: Any) -> None:
    with pytest.raises(ConfigError, match="recipe.lr"):
        check_number(value, "recipe.lr")


def test_check_number_ranges_name_the_bounds() -> None:
    assert check_number(0.0, "b", low=0, high=1, high_open=True) == 0.0
    with pytest.raises(ConfigError, match=r"b: must be a finite number in \[0, 1\), got 1"):
        check_number(1, "b", low=0, high=1, high_open=True)
    with pytest.raises(ConfigError, match=r"must be an integer in \[0, 4294967295\]"):
        check_number(2**32, "seed", integer=True, low=0, high=2**32 - 1)
    with pytest.raises(ConfigError, match="must be a positive integer, got 2.0"):
        check_number(2.0, "n", integer=True, low=1)


def test_non_finite_path_finds_the_first_and_visits_shared_values_once() -> None:
    shared = [1.0, 2.0]
    assert non_finite_path({"a": shared, "b": shared, "c": {"d": [0, math.nan]}}) == "c.d.1"
    assert non_finite_path({"a": 1e308}) is None


@pytest.mark.parametrize(
    "field,value",
    [
        ("lr", math.nan),
        ("beta1", 1.0),
        ("beta2", -0.1),
        ("seed", 2**32),
        ("batch_size", 0),
        ("min_lr_ratio", 2),
        ("lr", 1e308),
    ],
)
def test_a_recipe_built_in_python_is_held_to_the_same_rules(field: str, value: Any) -> None:
    from nas.spec.training import TrainRecipe

    with pytest.raises(ConfigError, match=f"recipe.{field}"):
        TrainRecipe(**{field: value})


def test_a_space_built_in_python_refuses_non_finite_choices() -> None:
    from nas.search.space.load import parse_space

    raw = {
        "globals": {"d_model": 16, "n_heads": 2, "n_layers": 1, "max_len": 16},
        "layers": {"attention": {"mdha": {"kernel": [2, math.inf]}}},
    }
    with pytest.raises(ConfigError, match="layers.attention.mdha.kernel"):
        parse_space(raw)


# -- the YAML reader -----------------------------------------------------------------------------


def test_the_bomb_is_measured_without_expanding_it() -> None:
    with pytest.raises(UserError, match=f"more than {MAX_NODES:,} values"):
        load_yaml(BOMB, "bomb.yaml")


def test_expanded_size_counts_aliases_as_often_as_they_are_used() -> None:
    node = yaml.compose("a: &a [1, 2, 3]\nb: [*a, *a]\n")
    assert expanded_size(node) == (1 + 2 + 4 + 1 + 2 * 4, 4)  # map, 2 keys, [1, 2, 3], [*a, *a]


def test_depth_is_bounded_at_max_depth() -> None:
    ok = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert load_yaml(ok) is not None
    with pytest.raises(UserError, match="nested more than"):
        load_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_the_reader_reads_what_safe_load_reads() -> None:
    text = (ROOT / "search_spaces" / "default.yaml").read_text()
    assert load_yaml(text) == yaml.safe_load(text)
    for path in sorted((ROOT / "examples" / "archs").glob("*.yaml")):
        assert load_yaml(path.read_text()) == yaml.safe_load(path.read_text()), path


def test_no_module_reads_yaml_but_the_one_reader() -> None:
    readers = {
        "safe_load",
        "safe_load_all",
        "load",
        "load_all",
        "full_load",
        "unsafe_load",
        "compose",
        "SafeLoader",
        "CSafeLoader",
        "BaseLoader",
    }
    found = []
    for p in sorted([*ROOT.glob("nas/**/*.py"), *ROOT.glob("evaluators/**/*.py"), ROOT / "run_search.py"]):
        for node in ast.walk(ast.parse(p.read_text())):
            is_yaml = (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "yaml"
            )
            if is_yaml and node.attr in readers:
                found.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert found == [], found


def test_export_writes_non_finite_metrics_as_null(tmp_path: Path) -> None:
    from nas.files.archfile import load_arch_file, save_arch

    path = tmp_path / "a.yaml"
    save_arch(path, ARCH, metrics={"val_bpb": math.nan, "val_loss": 2.5})
    assert load_arch_file(path)["metrics"] == {"val_bpb": None, "val_loss": 2.5}


# -- sizes ---------------------------------------------------------------------------------------


def test_check_fits_names_the_size_that_drives_the_memory() -> None:
    from nas.models.cost import check_fits, training_bytes

    check_fits(ARCH)
    with pytest.raises(ConfigError, match="^n_layers:"):
        check_fits(ARCH, n_layers=4096, limit=sum(training_bytes(ARCH).values()) * 100)
    with pytest.raises(ConfigError, match="^batch_size:"):
        check_fits(ARCH, batch_size=10**9)
    wide = nas.ArchConfig.from_dict(
        {"d_model": 2**18, "n_heads": 2, "max_len": 16, "layers": [{"attention": "mha"}]}
    )
    with pytest.raises(ConfigError, match="^d_model:"):
        check_fits(wide)


# -- checkpoints ---------------------------------------------------------------------------------


def _tamper(path: Path, change: Any) -> None:
    doc = torch.load(path, weights_only=True)
    change(doc)
    torch.save(doc, path)


TAMPERED = {
    "a-tensor-removed": lambda d: d["state_dict"].pop(next(iter(d["state_dict"]))),
    "a-tensor-reshaped": lambda d: d["state_dict"].update(
        {k: torch.zeros(3, 3) for k in list(d["state_dict"])[:1]}
    ),
    "a-tensor-not-a-tensor": lambda d: d["state_dict"].update({k: "x" for k in list(d["state_dict"])[:1]}),
    "an-extra-tensor": lambda d: d["state_dict"].update({"evil.weight": torch.zeros(1)}),
    "arch-widened": lambda d: d["arch"].update({"d_model": 32}),
    "arch-enormous": lambda d: d["arch"].update({"d_model": 2**18}),
    "arch-not-a-mapping": lambda d: d.update({"arch": [1, 2]}),
    "arch-missing": lambda d: d.pop("arch"),
    "state-dict-missing": lambda d: d.pop("state_dict"),
    "state-dict-a-list": lambda d: d.update({"state_dict": [1]}),
    "format-changed": lambda d: d.update({"format": "other/1"}),
}


@pytest.mark.parametrize("change", list(TAMPERED.values()), ids=list(TAMPERED))
def test_a_tampered_checkpoint_raises_the_librarys_error_naming_the_file(tmp_path: Path, change: Any) -> None:
    path = tmp_path / "m.pt"
    save_checkpoint(path, nas.build_model(ARCH))
    _tamper(path, change)
    with pytest.raises(UserError, match="m.pt") as info:
        nas.load_model(path)
    assert isinstance(info.value, (CheckpointError, ConfigError))


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.99])
def test_a_truncated_checkpoint_raises_checkpoint_error(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "m.pt"
    save_checkpoint(path, nas.build_model(ARCH))
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match="m.pt"):
        nas.load_model(path)


def test_a_directory_is_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="is a directory, not a file"):
        nas.load_model(tmp_path)


def test_an_untampered_checkpoint_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    model = nas.build_model(ARCH)
    save_checkpoint(path, model)
    loaded = nas.load_model(path)
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True)
    )
    assert FORMAT in str(torch.load(path, weights_only=True)["format"])


# -- output paths and the cache ------------------------------------------------------------------


def test_output_checks_create_nothing(tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    check_writable_dir(tmp_path / "a" / "b", "--logdir")
    check_output_file(tmp_path / "a" / "m.pt", "--save")
    assert snapshot(tmp_path) == before
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="--save"):
        check_output_file(tmp_path / "f" / "m.pt", "--save")
    with pytest.raises(UserError, match="is a directory"):
        check_output_file(tmp_path, "--save")


def test_an_unwritable_corpus_cache_is_one_line_before_any_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    write_files(tmp_path, BASE_FILES)
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "notes.txt" / "cache"))
    monkeypatch.setattr("nas.data.text._shakespeare_documents", lambda: pytest.fail("downloaded"))
    monkeypatch.setattr("nas.data.text._MEMO", {})  # as in a fresh process: the corpus is not loaded yet
    before = snapshot(tmp_path)
    assert main(["train", "--arch", "arch.yaml", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "NAS_CACHE_DIR" in err and len(err.strip().splitlines()) == 1
    assert snapshot(tmp_path) == before


# -- the objectives' names -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "objective,names", [("loss+flops", ["val_loss", "flops_per_token"]), ("loss", ["val_loss"])]
)
def test_a_new_study_names_its_objectives(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    objective: str,
    names: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    write_files(tmp_path, BASE_FILES)
    url = f"sqlite:///{tmp_path / 's.db'}"
    argv = ["search", "--space", "space.yaml", "--data", "corpus", "--study", "s", "--storage", url,
            "--local", "--evaluator", "proxy:params", "--trials", "2", "--objective", objective,
            "--no-tensorboard"]  # fmt: skip
    assert main(argv) == 0
    assert optuna.load_study(study_name="s", storage=url).metric_names == names
    assert main([*argv, "--trials", "4"]) == 0  # a named study continues
