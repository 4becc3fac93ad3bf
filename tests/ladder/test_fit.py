"""The scaling fit recovers known coefficients, its bootstrap resamples runs, its allocation is optimal."""

from __future__ import annotations

import math

import pytest
import torch

from nas.files.outputs import plan_output
from nas.ladder.fit import CostCurve, Fit, Point, bootstrap, fit, optimal, resample_weights, resamples_vary
from nas.ladder.markdown import plot, prediction_table
from nas.ladder.report import Family, _curve, _p_best, _prediction

#: Chinchilla's published fit (Eq. 10)
TRUE = Fit(E=1.69, A=406.4, alpha=0.34, B=410.7, beta=0.28)


def _ladder(law: Fit, noise: float = 0.0, seeds: int = 2, seed: int = 0) -> list[Point]:
    """Five sizes, each run giving three rungs (a quarter, half and all of 20 tokens per parameter)."""
    g = torch.Generator().manual_seed(seed)
    points, run = [], 0
    for n in (1e7, 3e7, 1e8, 3e8, 1e9):
        for _ in range(seeds):
            for f in (0.25, 0.5, 1.0):
                d = 20 * n * f
                loss = law.loss(n, d) * math.exp(noise * float(torch.randn(1, generator=g)))
                points.append(Point(n, d, 6 * n * d, loss, run))
            run += 1
    return points


def test_recovers_the_coefficients_of_noiseless_points() -> None:
    got, _ = fit(_ladder(TRUE))
    assert got.alpha == pytest.approx(TRUE.alpha, abs=0.02)
    assert got.beta == pytest.approx(TRUE.beta, abs=0.02)
    assert got.E == pytest.approx(TRUE.E, abs=0.05)
    assert got.rms_log < 1e-4
    # and it predicts beyond the points: 10x the largest model at 20 tokens per parameter
    assert got.loss(1e10, 2e11) == pytest.approx(TRUE.loss(1e10, 2e11), rel=1e-3)


def test_the_shared_form_ties_the_exponents() -> None:
    law = Fit(E=2.0, A=300.0, alpha=0.3, B=500.0, beta=0.3)
    got, _ = fit(_ladder(law), form="shared")
    assert got.alpha == got.beta == pytest.approx(0.3, abs=0.02)
    assert got.form == "shared"
    with pytest.raises(ValueError, match="unknown fit form"):
        fit(_ladder(law), form="kaplan")


def test_exponents_stay_non_negative() -> None:
    """Losses that grow with size are no scaling law: alpha is held at 0, not fitted negative."""
    points = [
        Point(n, 1e6 * f, 1.0, 2.0 + 1e-8 * n - 0.1 * f, run)
        for run, n in enumerate((1e6, 1e7, 1e8))
        for f in (0.5, 1.0)
    ]
    got, _ = fit(points)
    assert got.alpha >= 0 and got.beta >= 0


def test_the_bootstrap_resamples_whole_runs_and_repeats_itself() -> None:
    points = _ladder(TRUE, noise=0.01)
    weights = resample_weights(points, 50, torch.Generator().manual_seed(3))
    for row in weights:
        by_run: dict[int, set[float]] = {}
        for p, w in zip(points, row.tolist(), strict=True):
            by_run.setdefault(p.run, set()).add(w)
        assert all(len(ws) == 1 for ws in by_run.values())  # a run's points move together
        assert sum(ws.pop() for ws in by_run.values()) == 10  # ten runs drawn with replacement
        sizes = {p.params for p, w in zip(points, row.tolist(), strict=True) if w > 0}
        assert len(sizes) >= 3
    best, starts = fit(points)
    one = bootstrap(points, starts, samples=40, seed=0)
    two = bootstrap(points, starts, samples=40, seed=0)
    assert [f.alpha for f in one] == [f.alpha for f in two]
    predictions = sorted(f.loss(1e10, 2e11) for f in one)
    # the draws spread around the truth (1% noise per point)
    assert predictions[1] < TRUE.loss(1e10, 2e11) * 1.02 and predictions[-2] > TRUE.loss(1e10, 2e11) * 0.98
    assert len({round(p, 6) for p in predictions}) > 10


def test_compute_optimal_allocation_matches_chinchillas_closed_form() -> None:
    """With 6N FLOPs per token, N_opt = G (C/6)^(beta/(alpha+beta)),
    G = (alpha A / (beta B))^(1/(alpha+beta))."""
    c = 1e21
    curve = CostCurve.through([(1e7, 6e7), (1e9, 6e9)])
    assert curve.slope == pytest.approx(1.0) and float(curve.per_token(3e8)) == pytest.approx(1.8e9)
    loss, n, d = optimal(TRUE, curve, c, (1e6, 1e13))
    a, b = TRUE.alpha, TRUE.beta
    g = (a * TRUE.A / (b * TRUE.B)) ** (1 / (a + b))
    n_opt = g * (c / 6) ** (b / (a + b))
    assert n == pytest.approx(n_opt, rel=0.02)  # the grid's step is 0.35% of N
    assert d == pytest.approx(c / (6 * n), rel=1e-9)
    assert loss == pytest.approx(TRUE.loss(n_opt, c / (6 * n_opt)), rel=1e-5)


def test_cost_curve_is_exact_at_two_sizes_and_one_size_is_proportional() -> None:
    curve = CostCurve.through([(1e5, 7e5), (4e5, 2.3e6)])
    assert float(curve.per_token(1e5)) == pytest.approx(7e5)
    assert float(curve.per_token(4e5)) == pytest.approx(2.3e6)
    one = CostCurve.through([(1e5, 7e5)])
    assert float(one.per_token(2e5)) == pytest.approx(1.4e6)


def test_a_compute_optimal_size_at_the_edge_of_the_sizes_searched_is_said_to_be_there() -> None:
    """A fit whose loss keeps falling with N (no data term) has no compute-optimal size inside the sizes
    searched; the prediction is at the edge, and the report says so instead of calling it optimal."""

    def family(fit: Fit) -> Family:
        fam = Family.__new__(Family)
        fam.name, fam.role, fam.label = "a", "finalist", "a"
        fam.points = [Point(n, 1e6, 6 * n * 1e6, 2.0, i) for i, n in enumerate((1e5, 2e5, 4e5))]
        fam.sizes = [1e5, 2e5, 4e5]
        fam.curve = CostCurve(1.0, math.log(6.0))  # 6N FLOPs per token
        fam.fit, fam.draws = fit, [fit]
        return fam

    chinchilla = Fit(E=1.69, A=406.4, alpha=0.34, B=410.7, beta=0.28)
    inside = _prediction(family(chinchilla), 1e18, None)
    assert inside["edge"] is None and 4e5 < inside["params"] < 4e11
    no_data_term = Fit(E=1.0, A=400.0, alpha=0.3, B=0.0, beta=0.3)
    edge = _prediction(family(no_data_term), 1e18, None)
    assert edge["edge"] == "largest" and edge["params"] == pytest.approx(4e5 * 1e6, rel=1e-6)
    report = {
        "target": {"flops": 1e18, "size": None, "given": True},
        "interval": (0.05, 0.95),
        "samples": 200,
        "ranking": ["a"],
        "families": [{"name": "a", "role": "finalist", "fit": {}, "prediction": {**edge, "p_best": 1.0}}],
    }
    assert any("still falls at the largest size searched" in line for line in prediction_table(report))


def _one_seed(sizes: tuple[float, ...]) -> list[Point]:
    """One run per size, three rungs each."""
    return [
        Point(n, 20 * n * f, 120 * n * n * f, TRUE.loss(n, 20 * n * f), run)
        for run, n in enumerate(sizes)
        for f in (0.25, 0.5, 1.0)
    ]


def test_three_sizes_of_one_seed_cannot_vary_and_no_draw_is_short_of_sizes() -> None:
    """Every resample keeping three sizes of three runs is the runs themselves: a bootstrap's spread
    would be zero, an interval claiming certainty.  A draw that found no three sizes in its tries
    used to stand as drawn (a fit of fewer sizes, not identified); it is now the runs themselves."""
    three = _one_seed((1e7, 1e8, 1e9))
    assert not resamples_vary(three)
    assert resamples_vary(_one_seed((1e7, 3e7, 1e8, 1e9)))
    assert resamples_vary([*three, *(Point(p.params, p.tokens, p.flops, p.loss, p.run + 3) for p in three)])
    weights = resample_weights(three, 3000, torch.Generator().manual_seed(0))
    assert bool((weights == 1).all())  # (7/9)^20 of draws failed 20 tries: about 20 of these 3000


def test_a_family_without_an_interval_says_so_everywhere_it_is_reported(tmp_path) -> None:
    fam = Family.__new__(Family)
    fam.name, fam.role, fam.label = "a", "finalist", "a"
    fam.points = _one_seed((1e5, 2e5, 4e5))
    fam.sizes = [1e5, 2e5, 4e5]
    fam.curve = CostCurve(1.0, math.log(6.0))
    fam.fit, fam.draws = fit(fam.points)[0], []
    pred = _prediction(fam, 1e16, None)
    assert pred["low"] is None and pred["high"] is None
    preds = {"a": pred}
    _p_best([fam], preds)
    assert pred["p_best"] is None
    assert "3 runs at 3 sizes" in (fam.no_interval or "")
    curve = _curve(fam, 1e12, 1e16)
    assert curve["low"] is None and curve["high"] is None and len(curve["loss"]) == 25
    family = {
        "name": "a",
        "role": "finalist",
        "fit": {},
        "no_interval": fam.no_interval,
        "prediction": {k: v for k, v in pred.items() if k != "draws"},
        "measured": [{"flops": p.flops, "loss": p.loss} for p in fam.points],
        "curve": curve,
    }
    # a second family whose fit's own prediction lies outside its percentile interval (a bootstrap
    # allows it): the plot drew that as an errorbar of negative length and crashed
    outside = {**family, "name": "b", "no_interval": None}
    outside["prediction"] = {**family["prediction"], "low": pred["loss"] + 0.1, "high": pred["loss"] + 0.2}
    report = {
        "study": "s",
        "target": {"flops": 1e16, "size": None, "given": True},
        "interval": (0.05, 0.95),
        "samples": 200,
        "ranking": ["a", "b"],
        "families": [family, outside],
    }
    text = "\n".join(prediction_table(report))
    assert "| 1 | a | finalist |" in text and "| none | - |" in text
    assert "a: no interval and no p(best): 3 runs at 3 sizes" in text
    png = tmp_path / "ladder.png"
    plot(report, plan_output(str(png), "--report"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_too_few_draws_give_no_interval_and_no_p_best_rather_than_a_zero_width_one() -> None:
    """`--samples 1` printed "5th to 95th percentile" intervals of zero width that excluded their own
    prediction, and p(best) 1.00 for an architecture ranked second: below MIN_DRAWS there is neither."""
    from nas.ladder.report import MIN_DRAWS, _p_best, interval

    assert interval([2.0]) == (None, None)
    assert interval([2.0 + i / 100 for i in range(MIN_DRAWS - 1)]) == (None, None)
    low, high = interval([2.0 + i / 100 for i in range(MIN_DRAWS)])
    assert low is not None and high is not None and 2.0 < low < high < 2.0 + (MIN_DRAWS - 1) / 100
    # non-finite draws (a failed refit) do not count towards the minimum
    assert interval([math.inf] * 5 + [2.0] * (MIN_DRAWS - 1)) == (None, None)

    def fam(name: str) -> Family:
        f = Family.__new__(Family)
        f.name = name
        return f

    few = {"a": {"draws": [2.0]}, "b": {"draws": [1.9]}}
    _p_best([fam("a"), fam("b")], few)
    assert few["a"]["p_best"] is None and few["b"]["p_best"] is None
    enough = {"a": {"draws": [2.0] * MIN_DRAWS}, "b": {"draws": [1.9] * MIN_DRAWS}}
    _p_best([fam("a"), fam("b")], enough)
    assert enough["a"]["p_best"] == 0.0 and enough["b"]["p_best"] == 1.0
