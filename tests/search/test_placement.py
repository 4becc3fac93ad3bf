"""Menus per layer position (``layers.at``): pinned layers, ranges, shares of the depth, and a real search."""

from __future__ import annotations

import copy
import random
import struct
from typing import Any

import optuna
import pytest
import yaml

from nas.cli import main
from nas.errors import ConfigError
from nas.search.space.load import load_space, parse_space
from nas.shipped import shipped_space

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

LINEAR = {"gated_linear", "hyena", "sliding_window"}
RAW: dict[str, Any] = {
    "globals": {"d_model": 32, "n_heads": 2, "n_layers": [3, 4, 6], "max_len": 16},
    "layers": {
        "attention": {
            "mha": {},
            "mdha": {"kernel": [2, 3]},
            "gated_linear": {},
            "hyena": {},
            "sliding_window": {},
        },
        "ffn": {"activation": "relu", "mult": 2},
        "at": [
            {"layers": -1, "attention": "mha"},
            {"layers": {"to": "50%"}, "attention": ["gated_linear", "hyena", "sliding_window"]},
            {"layers": {"from": "50%"}, "ffn": {"activation": ["relu", "squared_relu"], "mult": 2}},
        ],
    },
}


def _space(**at_override: Any) -> Any:
    raw = copy.deepcopy(RAW)
    raw["layers"].update(at_override)
    return parse_space(raw)


def test_each_position_draws_from_its_own_menu_at_every_depth() -> None:
    space, rng = _space(), random.Random(0)
    seen_depths, seen_middle = set(), set()
    for _ in range(200):
        arch = space.random_arch(rng)
        n = len(arch.layers)
        seen_depths.add(n)
        for i, layer in enumerate(arch.layers):
            block, act = layer.attention.type, layer.ffn.activation
            if i == n - 1:
                assert block == "mha"  # pinned
            elif i < n / 2:
                assert block in LINEAR
            else:
                seen_middle.add(block)
            if i < n / 2:
                assert act == "relu"  # squared ReLU only in the top half
    assert seen_depths == {3, 4, 6}
    assert {"mha", "mdha"} <= seen_middle  # the layers between keep the whole menu


def test_an_optuna_study_over_changing_depths_never_sees_one_name_with_two_menus() -> None:
    """A position's menu changes with the depth (the last layer moves): its parameters are named by entry."""
    space = _space()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: float(len(space.suggest(t).layers)), n_trials=30)  # raises on a clash
    names = {name for t in study.trials for name in t.params}
    assert "layers.0.at1.attention" in names and "layers.3.at2.ffn.activation" in names
    assert not any(name.startswith("layers.5.") and name.endswith(".attention") for name in names)  # pinned


def test_a_seed_that_fits_every_menu_is_enqueued_and_one_that_does_not_is_left_out() -> None:
    raw = copy.deepcopy(RAW)
    raw["layers"]["at"] = [{"layers": -1, "attention": ["mha", "mdha"]}]
    space = parse_space(raw)
    params = space.seed_params("vanilla")
    assert params is not None
    for n in (3, 4, 6):
        arch = space.suggest(optuna.trial.FixedTrial({**params, "n_layers": n}))
        assert [layer.attention.type for layer in arch.layers] == ["mha"] * n
    assert _space().seed_params("vanilla") is None  # the bottom half may not be mha


@pytest.mark.parametrize(
    "at, message",
    [
        ([{"layers": 7, "attention": "mha"}], "names no layer of a stack of 3 to 6 layers"),
        ([{"layers": [-1, -1], "attention": "mha"}], "twice"),
        ([{"layers": {"from": "120%"}, "attention": "mha"}], "between 0% and 100%"),
        ([{"layers": "50%", "attention": "mha"}], "must be an index"),
        ([{"layers": {"from": 1, "upto": 2}, "attention": "mha"}], "unknown key"),
        ([{"layers": 0}], "gives nothing"),
        ([{"attention": "mha"}], "is required"),
        ([{"layers": 0, "attention": "flash"}], "flash"),
        ([], "must be a list"),
    ],
)
def test_a_bad_entry_is_refused_naming_where(at: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _space(at=at)
    assert err.value.path.startswith("layers.at")


def test_share_and_at_are_refused_together() -> None:
    with pytest.raises(ConfigError, match="use one or the other"):
        _space(share=True)


def test_the_shipped_hybrid_space_pins_its_last_layer() -> None:
    space = load_space(shipped_space("hybrid"))
    rng = random.Random(1)
    for _ in range(50):
        arch = space.random_arch(rng)
        assert arch.layers[-1].attention.type == "mha"
        assert all(layer.attention.type in LINEAR for layer in arch.layers[: len(arch.layers) // 2])


@pytest.mark.usefixtures("ray_cluster")
def test_a_search_with_a_pinned_layer_finishes_and_by_layer_shows_it_fixed(
    tmp_path, text_corpus, capsys
) -> None:
    raw = copy.deepcopy(RAW)
    raw["globals"]["n_layers"] = 3
    raw.update(recipe={"batch_size": 4, "eval_batches": 2, "log_every": 2}, budget={"steps": 4})
    space = tmp_path / "placed.yaml"
    space.write_text(yaml.safe_dump(raw))
    storage = f"sqlite:///{tmp_path}/p.db"
    args = ["--study", "p", "--storage", storage]
    assert main(["search", "--space", str(space), *args, "--runs-dir", str(tmp_path / "runs"), "--data",
                 str(text_corpus), "--trials", "4", "--workers", "2", "--no-tensorboard"]) == 0  # fmt: skip
    study = optuna.load_study(study_name="p", storage=storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 4
    assert {t.user_attrs["arch"]["layers"][2]["attention"]["type"] for t in done} == {"mha"}
    capsys.readouterr()
    assert main(["best", *args, "--by-layer"]) == 0
    out = capsys.readouterr().out
    rows = {
        tuple(line.split()[:2]): line.split()[2:] for line in out.splitlines() if line.startswith("attention")
    }
    assert rows[("attention", "2")] == ["mha", "4", "mha", "4"], out  # the pinned layer never varies
    assert rows[("attention", "0")][0] in LINEAR, out


@pytest.mark.usefixtures("ray_cluster")
def test_the_state_objective_puts_the_inference_state_on_the_pareto_front(
    tmp_path, text_corpus, capsys
) -> None:
    """``--objective loss+flops+state``: a third value per trial, the bytes a sequence keeps while
    generating."""
    raw = copy.deepcopy(RAW)
    raw["globals"]["n_layers"] = 2
    raw["layers"].pop("at")
    raw.update(
        recipe={"batch_size": 4, "eval_batches": 2, "log_every": 2}, budget={"steps": 4}, seed_archs=[]
    )
    space = tmp_path / "state.yaml"
    space.write_text(yaml.safe_dump(raw))
    storage = f"sqlite:///{tmp_path}/st.db"
    args = ["--study", "st", "--storage", storage]
    assert main(["search", "--space", str(space), *args, "--runs-dir", str(tmp_path / "runs"), "--data",
                 str(text_corpus), "--trials", "5", "--workers", "2", "--no-tensorboard",
                 "--objective", "loss+flops+state"]) == 0  # fmt: skip
    assert "and state" in capsys.readouterr().out
    study = optuna.load_study(study_name="st", storage=storage)
    assert study.metric_names == ["val_loss", "flops_per_token", "state_bytes"]
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done and all(len(t.values) == 3 and t.values[2] == t.user_attrs["state_bytes"] > 0 for t in done)
    assert main(["best", *args]) == 0
    out = capsys.readouterr().out
    assert "vs FLOPs/token and state" in out and "state B" in out
    # pareto.png gets a second panel, loss against the state, with the three-way front in both
    assert main(["plot", *args, "--out", str(tmp_path / "figs")]) == 0
    png = (tmp_path / "figs" / "pareto.png").read_bytes()
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert width > 1.8 * height, (width, height)
