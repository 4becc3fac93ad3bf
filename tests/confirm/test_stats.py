"""The confirmation's statistics against hand computations."""

from __future__ import annotations

import math

import pytest

from nas.confirm.stats import crossing, fit_power_law, kendall, paired, ranks, spearman, spread


def test_spread_is_mean_sample_sd_min_max():
    s = spread([2.0, 4.0, 9.0])
    assert (s.n, s.mean, s.min, s.max) == (3, 5.0, 2.0, 9.0)
    # deviations -3, -1, 4: squares 9 + 1 + 16 = 26, over n - 1 = 2
    assert s.std == pytest.approx(math.sqrt(13))
    assert spread([1.5]).std == 0.0


def test_paired_differences_use_common_seeds_only():
    p = paired({0: 2.0, 1: 2.5, 2: 3.0, 7: 9.0}, {0: 2.1, 1: 2.4, 2: 3.3})
    assert p.seeds == (0, 1, 2)
    assert p.deltas == pytest.approx((-0.1, 0.1, -0.3))
    assert (p.mean, p.min, p.max) == pytest.approx((-0.1, -0.3, 0.1))
    assert (p.lower, p.n) == (2, 3)
    assert paired({0: 1.0}, {1: 1.0}) is None


def test_ranks_average_ties():
    assert ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]


def test_spearman_and_kendall_by_hand():
    x, y = [1, 2, 3, 4], [1, 3, 2, 4]
    # rho = 1 - 6 * sum d^2 / (n (n^2 - 1)) = 1 - 6 * 2 / 60
    assert spearman(x, y) == pytest.approx(0.8)
    # 5 concordant pairs, 1 discordant (2, 3): (5 - 1) / 6
    assert kendall(x, y) == pytest.approx(4 / 6)
    assert spearman(x, [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert kendall(x, [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_rank_correlations_with_ties_by_hand():
    x, y = [1, 1, 2], [1, 2, 3]
    # ranks (1.5, 1.5, 3) vs (1, 2, 3): covariance 1.5, variances 1.5 and 2
    assert spearman(x, y) == pytest.approx(1.5 / math.sqrt(1.5 * 2))
    # tau-b: 2 concordant, 0 discordant, 1 pair tied in x only: 2 / sqrt(3 * 2)
    assert kendall(x, y) == pytest.approx(2 / math.sqrt(6))


def test_rank_correlation_needs_two_ordered_points():
    assert spearman([1.0], [2.0]) is None and kendall([1.0], [2.0]) is None
    assert spearman([1.0, 1.0], [1.0, 2.0]) is None and kendall([1.0, 1.0], [1.0, 2.0]) is None
    with pytest.raises(ValueError):
        spearman([1.0, 2.0], [1.0])


def test_power_law_fit_recovers_exact_data_and_crossing():
    f = fit_power_law([1.0, 4.0, 16.0], [2.0, 1.0, 0.5])  # 2 * C^-0.5
    assert (f.a, f.b) == pytest.approx((2.0, 0.5))
    assert (f.compute_min, f.compute_max) == (1.0, 16.0)
    assert f(64.0) == pytest.approx(0.25)
    g = fit_power_law([1.0, 16.0, 256.0], [1.0, 0.5, 0.25])  # C^-0.25
    # 2 C^-0.5 = C^-0.25  =>  C^0.25 = 2  =>  C = 16
    assert crossing(f, g) == pytest.approx(16.0)
    assert crossing(f, f) is None
    assert fit_power_law([4.0, 4.0], [1.0, 2.0]) is None  # one compute: no slope
    assert fit_power_law([1.0, 2.0], [1.0, 0.0]) is None  # log of a zero loss
