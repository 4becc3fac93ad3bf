"""A real (tiny) search, inspected and exported, then retrained from the exported file.

The driver, the worker's ``run_trial`` and the trainer are the real ones; only
Ray is replaced by an in-process pool that runs each payload on one CPU thread,
as a Ray actor with one CPU does.  ``train --arch`` on the exported file must
give the trial's validation loss back.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from nas.cli import main
from nas.execution.pool import PoolBase
from nas.execution.ray_pool import Finished
from nas.execution.worker import run_trial
from nas.files.archfile import load_arch_file
from nas.search.driver.context import RunContext
from nas.search.driver.loop import Driver
from nas.search.space.load import load_spec
from nas.search.storage.urls import default_storage
from nas.spec.training import Budget

SPACE = Path(__file__).resolve().parents[1] / "search" / "tiny_space.yaml"


class InlinePool(PoolBase):
    """The pool interface of ``RayPool``, one trial at a time in this process."""

    def __init__(self, run: RunContext) -> None:
        self.done: list[Finished] = []

    def has_idle(self) -> bool:
        return not self.done

    def submit(self, tag: Any, payload: dict[str, Any]) -> None:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            self.done.append(Finished(tag, run_trial(payload)))
        finally:
            torch.set_num_threads(threads)

    def wait(self, timeout: float) -> list[Finished]:
        out, self.done = self.done, []
        return out

    def shutdown(self) -> None:
        pass


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    rng = random.Random(0)
    words = "the king and queen of a castle went to see what every lord would say in spring".split()
    for i in range(6):
        (root / f"doc{i}.txt").write_text(
            "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(200))
        )
    return root


@pytest.mark.timeout(180)
def test_search_inspect_export_retrain(tmp_path: Path, corpus: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default layout: runs/<study>/...
    runs = Path("runs")
    spec, space = load_spec(SPACE)
    spec = spec.replace(recipe={"seed": 3}, budget=Budget("steps", 8), resources={"device": "cpu"},
                        search={"trials": 5, "sampler": "random", "seed": 3, "hurdles": (0.5,),
                                "hurdle_min_trials": 2})  # fmt: skip
    settings = RunContext(spec, space, study="tiny", storage=default_storage(runs, "tiny"), data=str(corpus),
                          runs_dir=str(runs))  # fmt: skip
    assert settings.tb_dir == str(runs / "tiny" / "tb")
    Driver(settings, pool_factory=InlinePool, out=open("search.log", "w")).run()  # noqa: SIM115
    capsys.readouterr()

    assert main(["best", "--study", "tiny", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["pareto"] for r in rows)
    best = rows[0]

    assert main(["show", "--study", "tiny", "--trial", str(best["trial"])]) == 0
    out = capsys.readouterr().out
    assert f"trial {best['trial']}: COMPLETE" in out and f"{best['val_loss']:.4f}" in out
    tb = runs / "tiny" / "tb" / f"trial_{best['trial']:05d}"
    assert f"TensorBoard run: {tb}" in out and any(tb.iterdir())

    assert main(["plot", "--study", "tiny", "--out", "plots"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3

    assert main(["export", "--study", "tiny", "--best", "--out", "best.yaml"]) == 0
    capsys.readouterr()
    doc = load_arch_file("best.yaml")
    assert doc["recipe"]["seed"] == 3 and doc["budget"] == {"steps": 8}
    assert doc["data"]["corpus"] == str(corpus.resolve()) and doc["data"]["vocab_size"] == 256

    # Retrain from the file alone, no flags: train reuses the recorded device and thread count.
    assert main(["train", "--arch", "best.yaml", "--json"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["arch_id"] == best["arch_id"]
    assert again["steps"] == doc["metrics"]["steps"] and again["tokens"] == doc["metrics"]["tokens"]
    assert abs(again["val_loss"] - best["val_loss"]) < 1e-4, (again["val_loss"], best["val_loss"])
