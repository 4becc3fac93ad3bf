"""search_spaces/gpu.yaml loads and samples on a CPU (scored by a proxy: no GPU-sized training here)."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from nas.cli import main

GPU_SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "gpu.yaml"


def test_gpu_space_searches_with_a_proxy(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path}/gpu.db"
    argv = [
        "search", "--space", str(GPU_SPACE), "--study", "gpu", "--storage", storage, "--trials", "16",
        "--sampler", "random", "--evaluator", "proxy:params", "--local", "--no-tensorboard",
        "--runs-dir", str(tmp_path / "runs"),
    ]  # fmt: skip
    assert main(argv) == 0
    trials = optuna.load_study(study_name="gpu", storage=storage).trials
    assert len(trials) == 16
    complete = [t for t in trials if t.state == TrialState.COMPLETE and "infeasible" not in t.user_attrs]
    assert complete
    for t in trials:
        if t not in complete:  # over the cap: told COMPLETE for the sampler, never trained
            assert t.state == TrialState.COMPLETE, t.state
            assert t.user_attrs["infeasible"].startswith("over cap: params"), t.user_attrs
    for t in complete:
        arch = t.user_attrs["arch"]
        assert arch["max_len"] == 1024 and 640 <= arch["d_model"] <= 1024
        assert 25e6 <= t.user_attrs["params"] <= 150e6
    blocks = {layer["attention"]["type"] for t in trials for layer in t.user_attrs["arch"]["layers"]}
    assert len(blocks) >= 5  # the space offers every block; 16 random candidates meet most of them
