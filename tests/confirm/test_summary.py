"""Summaries, paired deltas, the search gap, rank correlations and verdicts from hand-made runs."""

from __future__ import annotations

import math

import pytest

from nas.confirm.markdown import cost_table
from nas.confirm.plan import Entry
from nas.confirm.summary import power_laws, rank_correlation, summarize, verdicts
from nas.models import ArchConfig, AttentionSpec, FFNSpec, LayerConfig


def _arch(d_model: int) -> ArchConfig:
    layer = LayerConfig(AttentionSpec.from_raw({"type": "mha"}), FFNSpec("relu", 2.0))
    return ArchConfig(layers=(layer,), d_model=d_model, n_heads=2, max_len=16)


A = Entry(0, _arch(16), "trial 3", "finalist", 3, 1.90)
B = Entry(1, _arch(32), "trial 8", "finalist", 8, 1.95)
V = Entry(2, _arch(48), "vanilla", "baseline", 0, 2.00)

LOSSES = {  # (entry, scale) -> losses of seeds 0, 1, 2
    (A, 1): [1.95, 2.00, 1.98],
    (B, 1): [1.99, 1.97, 2.03],
    (V, 1): [2.00, 2.04, 2.02],
    (A, 4): [1.50, 1.56, 1.52],
    (B, 4): [1.49, 1.53, 1.50],
    (V, 4): [1.52, 1.55, 1.50],
    (A, 16): [1.20, 1.22, 1.21],
    (B, 16): [1.18, 1.19, 1.17],
    (V, 16): [1.25, 1.24, 1.26],
}


def _runs():
    rows = []
    for (e, scale), losses in LOSSES.items():
        for seed, loss in enumerate(losses):
            rows.append(
                {
                    "arch_id": e.arch_id,
                    "name": e.name,
                    "role": e.role,
                    "scale": scale,
                    "seed": seed,
                    "lr": 3e-3,
                    "state": "COMPLETE",
                    "val_loss": loss,
                    "train_flops": 1e9 * scale,
                }
            )
    return rows


def test_summary_rows_by_hand():
    rows = summarize(_runs(), [A, B, V], [V], [1, 4, 16], [0, 1, 2])
    a1 = next(r for r in rows if r["arch_id"] == A.arch_id and r["scale"] == 1)
    assert a1["mean"] == pytest.approx((1.95 + 2.00 + 1.98) / 3)
    assert a1["std"] == pytest.approx(0.025166, abs=1e-6)  # sqrt(((-.0267)^2 + .0233^2 + .0033^2) / 2)
    assert (a1["min"], a1["max"], a1["n"]) == (1.95, 2.00, 3)
    d = a1["delta_vs_baseline"]["vanilla"]
    assert d["deltas"] == pytest.approx([-0.05, -0.04, -0.04])
    assert (d["mean"], d["min"], d["max"]) == pytest.approx((-0.13 / 3, -0.05, -0.04))
    assert a1["lower_on"] == {"vanilla": "3/3"}
    assert a1["search_gap"] == pytest.approx(a1["mean"] - 1.90)  # the winner's curse, at 1x only
    a4 = next(r for r in rows if r["arch_id"] == A.arch_id and r["scale"] == 4)
    assert a4["search_gap"] is None
    assert a4["lower_on"] == {"vanilla": "1/3"}  # -0.02 +0.01 +0.02
    v1 = next(r for r in rows if r["arch_id"] == V.arch_id and r["scale"] == 1)
    assert v1["delta_vs_baseline"] == {}


def test_cost_columns_are_means_over_the_finished_seeds():
    runs = [r for r in _runs() if r["scale"] == 1]
    for r in runs:  # seed s: bpb = loss / ln 2, 100 + s steps at 1000 * (s + 1) tokens/s
        r.update(val_bpb=r["val_loss"] / math.log(2), steps=100 + r["seed"])
        r.update(tokens_per_s=1e3 * (r["seed"] + 1), params=5000, flops_per_token=2e4)
    # A's seed 2 failed: not counted
    runs = [r for r in runs if not (r["arch_id"] == A.arch_id and r["seed"] == 2)]
    runs.append(dict(runs[0], seed=2, state="FAIL", val_loss=None, steps=7, val_bpb=None))
    a1 = next(r for r in summarize(runs, [A, V], [V], [1], [0, 1, 2]) if r["arch_id"] == A.arch_id)
    assert a1["n"] == 2 and a1["failed"] == 1
    assert a1["bpb_mean"] == pytest.approx((1.95 + 2.00) / 2 / math.log(2))
    assert a1["bpb_std"] == pytest.approx(0.05 / math.sqrt(2) / math.log(2))
    assert (a1["steps"], a1["tokens_per_s"]) == (100.5, 1500.0)
    assert (a1["params"], a1["flops_per_token"]) == (5000, 2e4)
    text = "\n".join(cost_table([a1]))
    assert "| trial 3 | 2.8493 ± 0.0510 | 5.00k | 20.0k | 100 | 1.50k |" in text


def test_compute_of_a_run_with_rungs_leaves_their_cooldown_branches_out():
    # A wsd run with rungs spends its rungs' cooldowns beside the run (train_flops counts them, for
    # --max-flops); its final loss was reached with the run's own compute, the x of the loss-vs-compute
    # points and power laws (they were placed, and fitted, 15% to the right here).
    runs = _runs()
    for r in runs:
        r.update(train_flops=1.15e9 * r["scale"], rung_flops=0.15e9 * r["scale"])
    rows = summarize(runs, [A, B, V], [V], [1, 4, 16], [0, 1, 2])
    assert {(r["scale"], r["train_flops"]) for r in rows} == {(1, 1e9), (4, 4e9), (16, 16e9)}
    fit = power_laws(rows, [A, B, V], [V], [1, 4, 16])["fits"]["trial 3"]
    assert (fit["compute_min"], fit["compute_max"]) == (1e9, 16e9)
    plain = power_laws(summarize(_runs(), [A, B, V], [V], [1, 4, 16], [0, 1, 2]), [A, B, V], [V], [1, 4, 16])
    assert fit["a"] == pytest.approx(plain["fits"]["trial 3"]["a"])


def test_verdicts_group_scales_in_plain_words():
    rows = summarize(_runs(), [A, B, V], [V], [1, 4, 16], [0, 1, 2])
    v = verdicts(rows, [A, B, V], [V], [1, 4, 16])
    assert v == {
        "trial 3": "beats vanilla on 3/3 seeds at 1x; within noise of vanilla (lower on 1/3 seeds) at 4x; "
        "beats vanilla on 3/3 seeds at 16x",
        "trial 8": "within noise of vanilla (lower on 2/3 seeds) at 1x and 4x; "
        "beats vanilla on 3/3 seeds at 16x",
    }


def test_rank_correlation_between_search_and_scales():
    rows = summarize(_runs(), [A, B, V], [V], [1, 4, 16], [0, 1, 2])
    rc = rank_correlation(rows, [1, 4, 16])
    # search order A < B < V; at 1x the means order A (1.977) < B (1.997) < V (2.02): identical
    assert rc["search_vs_confirmed"]["1x"] == {
        "n": 3,
        "spearman": pytest.approx(1.0),
        "kendall": pytest.approx(1.0),
    }
    # at 16x: B (1.18) < A (1.21) < V (1.25): one swap, rho = 1 - 6 * 2 / 24 = 0.5, tau = 1/3
    assert rc["search_vs_confirmed"]["16x"]["spearman"] == pytest.approx(0.5)
    assert rc["search_vs_confirmed"]["16x"]["kendall"] == pytest.approx(1 / 3)
    assert set(rc["between_scales"]) == {"1x-4x", "1x-16x", "4x-16x"}


def test_power_laws_only_with_three_scales():
    rows = summarize(_runs(), [A, B, V], [V], [1, 4, 16], [0, 1, 2])
    assert power_laws(rows, [A, B, V], [V], [1, 4]) is None
    pl = power_laws(rows, [A, B, V], [V], [1, 4, 16])
    assert set(pl["fits"]) == {"trial 3", "trial 8", "vanilla"}
    assert all(f["b"] > 0 for f in pl["fits"].values())  # loss falls with compute
    assert {(c["finalist"], c["baseline"]) for c in pl["crossings"]} == {
        ("trial 3", "vanilla"),
        ("trial 8", "vanilla"),
    }


def test_over_cap_candidates_are_never_finalists():
    import optuna
    import pytest
    from optuna.trial import create_trial

    from nas.confirm.plan import finalists
    from nas.errors import UserError
    from nas.search.storage.records import INFEASIBLE

    study = optuna.create_study(directions=["minimize"])
    arch = _arch(16)
    attrs = {"arch": arch.to_dict(), "arch_id": arch.arch_id}
    study.add_trial(create_trial(values=[2.0], user_attrs=attrs))
    big = _arch(32)
    over = {"arch": big.to_dict(), "arch_id": big.arch_id, INFEASIBLE: True}
    study.add_trial(create_trial(values=[float("inf")], user_attrs=over))
    assert [t.number for t in finalists(study, top=5, trials=None)] == [0]
    with pytest.raises(UserError, match="trial 1 .* INFEASIBLE"):
        finalists(study, top=None, trials=[1])
