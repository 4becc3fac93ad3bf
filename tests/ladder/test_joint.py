"""Joint fits share what the data fixes; checks hold sizes out; a check that fails leads the report."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from nas.ladder.check import held_out, verdict, warnings
from nas.ladder.fit import CostCurve, Fit, Point
from nas.ladder.joint import free_parameters, joint_bootstrap, joint_fit, layout
from nas.ladder.markdown import prediction_table, render
from nas.ladder.report import Family, fit_families, fit_summary

#: three architectures on one corpus: one floor, their own efficiencies and exponents
LAWS = [
    Fit(E=1.8, A=400.0, alpha=0.34, B=400.0, beta=0.28),
    Fit(E=1.8, A=300.0, alpha=0.30, B=600.0, beta=0.30),
    Fit(E=1.8, A=500.0, alpha=0.36, B=300.0, beta=0.26),
]
SIZES = (1e7, 2e7, 4e7, 8e7, 1.6e8)


def _points(law: Fit, run0: int, noise: float = 0.0, seeds: int = 2, seed: int = 0) -> list[Point]:
    g = torch.Generator().manual_seed(seed)
    out, run = [], run0
    for n in SIZES:
        for _ in range(seeds):
            for f in (0.25, 0.5, 1.0):
                d = 20 * n * f
                loss = law.loss(n, d) * math.exp(noise * float(torch.randn(1, generator=g)))
                out.append(Point(n, d, 6 * n * d, loss, run))
            run += 1
    return out


def test_a_shared_floor_is_one_value_fitted_from_every_architecture() -> None:
    groups = [_points(law, 100 * i) for i, law in enumerate(LAWS)]
    fits, starts = joint_fit(groups, "chinchilla", "E")
    assert len({f.E for f in fits}) == 1 and fits[0].E == pytest.approx(1.8, abs=0.05)
    for got, law in zip(fits, LAWS, strict=True):
        assert got.share == "E" and got.rms_log < 1e-3
        assert got.alpha == pytest.approx(law.alpha, abs=0.03) and got.beta == pytest.approx(
            law.beta, abs=0.03
        )
        assert got.loss(1e9, 2e10) == pytest.approx(law.loss(1e9, 2e10), rel=2e-3)  # 6x past the largest
    # the exponents shared too: each architecture keeps only its own A and B
    tied, _ = joint_fit(groups, "chinchilla", "E,exponents")
    assert len({(f.E, f.alpha, f.beta) for f in tied}) == 1 and len({f.A for f in tied}) == 3
    assert free_parameters(3, "chinchilla", "E") == 1 + 3 * 4
    assert free_parameters(3, "chinchilla", "E,exponents") == 3 + 3 * 2
    assert free_parameters(3, "shared", "E,exponents") == 2 + 3 * 2
    assert free_parameters(3, "chinchilla", "none") == 15
    assert layout([2, 1], "shared", "E").index.tolist() == [[1, 2, 3, 2, 0]] * 2 + [[4, 5, 6, 5, 0]]
    with pytest.raises(ValueError, match="unknown share"):
        layout([2], "chinchilla", "A")


def test_joint_draws_resample_every_architecture_and_share_their_floor() -> None:
    groups = [_points(law, 100 * i, noise=0.005, seed=i) for i, law in enumerate(LAWS)]
    _, starts = joint_fit(groups, "chinchilla", "E")
    draws = joint_bootstrap(groups, starts, "chinchilla", "E", samples=30)
    assert [len(d) for d in draws] == [30, 30, 30]
    for i in range(30):  # draw i of every architecture is one joint refit: one floor
        assert draws[0][i].E == draws[1][i].E == draws[2][i].E
    assert len({round(d.E, 6) for d in draws[0]}) > 5  # and the draws differ from each other
    again = joint_bootstrap(groups, starts, "chinchilla", "E", samples=30)
    assert [d.E for d in again[0]] == [d.E for d in draws[0]]  # seeded


def _family(name: str, points: list[Point]) -> Family:
    return Family(name, "finalist", name, points, CostCurve(1.0, math.log(6.0)), None, 16)


def _rows(groups: dict[str, list[Point]], shift: float = 0.0) -> list[dict]:
    """Run rows as nas.ladder.report.run_rows gives them (each size's multiplier: its params / 1e7)."""
    out = []
    for name, points in groups.items():
        for run in sorted({p.run for p in points}):
            mine = [p for p in points if p.run == run]
            out.append(
                {
                    "family": name,
                    "size": mine[0].params / 1e7,
                    "params": mine[0].params,
                    "trial": run,
                    "points": [
                        {"tokens": p.tokens, "flops": p.flops, "val_loss": p.loss + shift, "rung": f}
                        for p, f in zip(mine, (0.25, 0.5, 1.0), strict=True)
                    ],
                }
            )
    return out


def test_a_held_out_size_is_predicted_with_its_coverage_and_the_no_fit_orders() -> None:
    groups = {f"a{i}": _points(law, 100 * i, noise=0.003, seed=i) for i, law in enumerate(LAWS)}
    fitted = [1.0, 2.0, 4.0, 8.0]
    fams = [_family(k, [p for p in v if p.params / 1e7 in fitted]) for k, v in groups.items()]
    fit_families(fams, "chinchilla", "E", 40)
    check = held_out(fams, _rows(groups), 16.0, fitted)
    assert check is not None and check["held_out_size"] == 16.0
    assert check["beyond"]["params"] == pytest.approx(2.0)
    assert check["coverage"]["points"] == 3 * 2 * 3  # every rung and end of both seeds, per architecture
    assert check["mean_abs_error"] < 0.02
    assert set(check["rank_correlation"]) >= {"fit", "largest fitted size", "size 1"}
    summary = fit_summary(fams, "chinchilla", "E")
    assert summary["free_parameters"] == 13 and summary["points"] == 3 * 4 * 2 * 3
    assert summary["shared"] == {"E": fams[0].fit.E}
    # measured losses 0.3 nats above what the same ladder predicts: the check says so
    bad = held_out(fams, _rows(groups, shift=0.3), 16.0, fitted)
    assert bad is not None and bad["coverage"]["inside"] == 0
    v = verdict("heldout", bad, [])
    assert v["status"] == "not supported"
    assert any("exceeds the seed-to-seed spread" in r for r in v["reasons"])
    assert any("cover 0 of 18 held-out losses" in r for r in v["reasons"])
    assert verdict("heldout", check, [])["status"] in ("supported", "not supported")
    assert verdict(None, None, [])["status"] == "unchecked"


def _report(status: str) -> dict:
    fam = {
        "name": "a",
        "role": "finalist",
        "fit": {
            "E": 1e-9,
            "A": 1.0,
            "alpha": 0.3,
            "B": 1.0,
            "beta": 0.0,
            "runs": 3,
            "points": 9,
            "rms_log": 0.01,
        },
        "measured": [{"loss": 2.0}],
        "prediction": {
            "loss": 2.1,
            "low": 2.0,
            "high": 2.2,
            "p_best": 0.89,
            "params": 1e6,
            "tokens": 1e8,
            "beyond": {"compute": 10.0},
            "edge": "largest",
            "verdict": status,
        },
    }
    v = verdict("rollout", None, [fam])
    v = {
        **v,
        "status": status,
        "reasons": ["the held-out error (0.2) exceeds the seed-to-seed spread (0.01)"],
    }
    return {
        "study": "s",
        "ladder_study": "s-ladder",
        "verdict": v,
        "target": {"flops": 1e16, "size": None, "given": True},
        "interval": (0.05, 0.95),
        "samples": 200,
        "sizes": [1.0, 2.0, 4.0],
        "seeds": [0],
        "scale": 1.0,
        "tokens": "same",
        "runs": {"complete": 3, "planned": 3},
        "ranking": ["a"],
        "families": [{**fam, "runs": 3, "points": 9}],
        "crossovers": [],
        "form": "chinchilla",
        "check": None,
    }


def test_a_prediction_its_check_contradicts_says_so_first_and_marks_its_p_best() -> None:
    report = _report("not supported")
    text = render(report)
    lines = text.splitlines()
    assert lines[2].startswith(
        "**Prediction NOT SUPPORTED by this ladder (rollout check): the held-out error"
    )
    assert "| 0.89 (not supported) |" in "\n".join(prediction_table(report))
    # the fits' own faults are named: E at its bound, an optimum at the grid's edge, an exponent at 0
    assert any("a: E at its bound" in line for line in lines[:8])
    assert any("a: the compute-optimal size is at the largest edge" in line for line in lines[:8])
    assert any("a: beta at its bound" in line for line in lines[:8])
    fine = render(_report("supported"))
    assert "(not supported)" not in fine and "| 0.89 |" in fine
    assert warnings([{"name": "b", "fit": None}]) == []
    # a floor shared at its bound is one fault of every architecture: said once, naming them all
    fam = report["families"][0]
    both = warnings([fam, {**fam, "name": "b", "prediction": None}])
    assert sum("E at its bound" in w for w in both) == 1 and both[0].startswith("a, b: E at its bound")


def test_one_architecture_fitted_under_a_share_is_its_own_fit() -> None:
    points = _points(LAWS[0], 0)
    alone, shared = _family("a", points), _family("a", points)
    fit_families([alone], "chinchilla", "none", 20)
    fit_families([shared, _family("b", points[:6])], "chinchilla", "E", 20)  # b: one size, not fitted
    assert dataclasses.replace(shared.fit, share="none") == alone.fit
    assert fit_summary([shared], "chinchilla", "E")["free_parameters"] == 5
