"""The statistics of a confirmation: summaries over seeds, paired differences, rank correlations, power laws.

Plain Python on purpose: SciPy is not a dependency, and these are a few lines
each (tested against hand computations in ``tests/confirm/test_stats.py``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class Spread:
    """Mean, sample standard deviation (0 for one value), min and max of some numbers."""

    n: int
    mean: float
    std: float
    min: float
    max: float


def spread(values: Sequence[float]) -> Spread:
    """:class:`Spread` of ``values`` (at least one)."""
    if not values:
        raise ValueError("spread of no values")
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return Spread(n, mean, math.sqrt(var), min(values), max(values))


@dataclasses.dataclass(frozen=True)
class Paired:
    """Differences ``a - b`` seed by seed over the seeds both have; ``lower`` counts a < b."""

    seeds: tuple[int, ...]
    deltas: tuple[float, ...]
    mean: float
    min: float
    max: float
    lower: int

    @property
    def n(self) -> int:
        return len(self.deltas)


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> Paired | None:
    """``a`` minus ``b`` on each seed both measured (None when they share no seed)."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        return None
    deltas = tuple(a[s] - b[s] for s in seeds)
    return Paired(
        seeds, deltas, sum(deltas) / len(deltas), min(deltas), max(deltas), sum(d < 0 for d in deltas)
    )


def ranks(values: Sequence[float]) -> list[float]:
    """Ranks starting at 1, ties given the average of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def _pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None  # a constant ranking says nothing about order
    return sxy / math.sqrt(sxx * syy)


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho: the Pearson correlation of the average ranks (None below 2 points or if constant)."""
    _check_pairs(x, y)
    return _pearson(ranks(x), ranks(y)) if len(x) >= 2 else None


def kendall(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b (ties counted as SciPy's default does); None below 2 points or if constant."""
    _check_pairs(x, y)
    n = len(x)
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue  # tied in both: counts in neither denominator term (tau-b)
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denom if denom else None


def _check_pairs(x: Sequence[float], y: Sequence[float]) -> None:
    if len(x) != len(y):
        raise ValueError(f"rank correlation of {len(x)} and {len(y)} values")


@dataclasses.dataclass(frozen=True)
class PowerLaw:
    """``loss = a * compute ** -b``, fitted by least squares on log loss against log compute (no floor)."""

    a: float
    b: float
    compute_min: float
    compute_max: float

    def __call__(self, compute: float) -> float:
        return self.a * compute**-self.b


def fit_power_law(compute: Sequence[float], loss: Sequence[float]) -> PowerLaw | None:
    """The fit through (compute, loss) points (None with fewer than 2 distinct computes or a loss <= 0)."""
    pts = [(c, v) for c, v in zip(compute, loss, strict=False) if c > 0 and v > 0]
    if len(pts) != len(compute) or len({c for c, _ in pts}) < 2:
        return None
    xs = [math.log(c) for c, _ in pts]
    ys = [math.log(v) for _, v in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return PowerLaw(math.exp(my - slope * mx), -slope, min(c for c, _ in pts), max(c for c, _ in pts))


def crossing(f: PowerLaw, g: PowerLaw) -> float | None:
    """The compute where the two fitted curves meet (None when they are parallel)."""
    if f.b == g.b:
        return None
    # a_f C^-b_f = a_g C^-b_g  =>  log C = (log a_f - log a_g) / (b_f - b_g)
    log_c = (math.log(f.a) - math.log(g.a)) / (f.b - g.b)
    return math.exp(log_c) if abs(log_c) < 700 else None
