"""Rank statistics for the benchmark scripts (numpy only; SciPy is not a dependency)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def ranks(x: Sequence[float]) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank (as Spearman's rho needs)."""
    a = np.asarray(x, dtype=float)
    order = np.argsort(a, kind="mergesort")
    r = np.empty(len(a))
    r[order] = np.arange(1, len(a) + 1)
    for value in np.unique(a):
        tied = a == value
        r[tied] = r[tied].mean()
    return r


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's r of the ranks."""
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def spearman_ci(
    x: Sequence[float], y: Sequence[float], n_boot: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of Spearman's rho (resampling the pairs)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rng = np.random.default_rng(seed)
    rhos = []
    for _ in range(n_boot):
        i = rng.integers(0, len(xa), len(xa))
        rho = spearman(xa[i], ya[i])
        if np.isfinite(rho):
            rhos.append(rho)
    lo, hi = np.percentile(rhos, [2.5, 97.5])
    return float(lo), float(hi)
