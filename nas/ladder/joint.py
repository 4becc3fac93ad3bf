"""Joint fits: several architectures fitted as one problem, sharing what the data fixes.

``--share E``: every architecture of a ladder has its own ``A, alpha, B, beta``
and one loss floor ``E`` for all (E is a property of the data and the tokenizer:
architectures trained on one corpus share it; ``../shared/REFERENCES_TRANSFER.md``
§2).  ``--share E,exponents``: the exponents are shared too, each architecture
keeping its own ``A`` and ``B`` (its efficiency).  One objective, the Chinchilla
Huber loss summed over every architecture's points, is minimised over one
parameter vector (:class:`nas.ladder.fit.Layout` says which entry each point
reads), with the same batched Levenberg-Marquardt as a single fit.

A joint problem has no grid of starts of its own (Chinchilla's grid is 4,500
starts per architecture; its product over architectures is out of reach): the
starts are each architecture's own best fit, combined with a grid of floors (and,
sharing the exponents, each architecture's exponents and their median).  The
bootstrap draws the runs of **every** architecture in each draw and refits them
jointly, so draw ``i`` of each architecture comes from one joint fit and
p(best) compares architectures within the same draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from nas.ladder.fit import (
    _SCREEN_STEPS,
    Fit,
    Layout,
    Point,
    _data,
    _to_fit,
    best_optima,
    fit,
    minimise,
    resample_weights,
)

#: what ``--share`` may tie across a ladder's architectures
SHARES = ("none", "E", "E,exponents")
#: the floors every joint fit also starts from (log E), beside each architecture's own
_E_GRID = (-1.0, -0.5, 0.0, 0.5, 1.0)
#: fractions of the lowest measured loss tried as a start for the shared floor
_E_FRACTIONS = (0.25, 0.5, 0.75, 0.9)
_KEPT = 32
#: the bootstrap refits this many draws at once: a (draws x starts x points x parameters) Jacobian
_CHUNK_BYTES = 64 * 2**20


def own_width(form: str, share: str) -> int:
    """Free parameters each architecture keeps for itself."""
    if share == "E,exponents":
        return 2  # a, b
    return 3 if form == "shared" else 4  # a, alpha, b (and beta)


def shared_width(form: str, share: str) -> int:
    """Free parameters all architectures share (none for ``share="none"``, fitted one by one)."""
    if share == "none":
        return 0
    if share == "E":
        return 1
    return 2 if form == "shared" else 3  # e, alpha (and beta)


def free_parameters(families: int, form: str, share: str) -> int:
    """The free parameters of a ladder's fits: each architecture's own and the shared ones."""
    if share == "none":
        return families * (4 if form == "shared" else 5)
    return shared_width(form, share) + families * own_width(form, share)


def layout(counts: Sequence[int], form: str, share: str) -> Layout:
    """The joint layout of families with ``counts`` points each (in that order, concatenated)."""
    if share not in SHARES[1:]:
        raise ValueError(f"unknown share {share!r}; valid: {', '.join(SHARES[1:])}")
    s, w = shared_width(form, share), own_width(form, share)
    rows: list[list[int]] = []
    for f, n in enumerate(counts):
        o = s + f * w  # this family's first own entry
        if share == "E":  # own (a, alpha, b[, beta]); shared e at 0
            row = [o, o + 1, o + 2, o + 1 if form == "shared" else o + 3, 0]
        else:  # own (a, b); shared (e, alpha[, beta])
            row = [o, 1, o + 1, 1 if form == "shared" else 2, 0]
        rows += [row] * n
    exponents = [i for i in {r[1] for r in rows} | {r[3] for r in rows}]
    return Layout(torch.tensor(rows), s + w * len(counts), sorted(exponents))


def _single(theta: torch.Tensor, form: str) -> tuple[float, float, float, float, float]:
    """(a, alpha, b, beta, e) of one family's own fit in :func:`nas.ladder.fit.fit`'s order."""
    v = [float(x) for x in theta]
    return (v[0], v[1], v[2], v[1], v[3]) if form == "shared" else (v[0], v[1], v[2], v[3], v[4])


def _starts(own: Sequence[tuple[float, ...]], low: float, form: str, share: str) -> torch.Tensor:
    """Joint starts from each family's own best (a, alpha, b, beta, e): shared floors from a grid, the
    families' own and fractions of the lowest loss; shared exponents from each family's and the median."""
    floors = sorted({*_E_GRID, *(o[4] for o in own), *(math.log(q * low) for q in _E_FRACTIONS)})
    if share == "E,exponents":
        mid = sorted(own, key=lambda o: o[1])[len(own) // 2]
        exps = {(o[1], o[3]) for o in own} | {(mid[1], mid[3])}
    else:
        exps = {(math.nan, math.nan)}
    rows = []
    for e in floors:
        for alpha, beta in sorted(exps):
            row = [e]
            if share == "E,exponents":
                row += [alpha] if form == "shared" else [alpha, beta]
                for a, _, b, _, _ in own:
                    row += [a, b]
            else:
                for a, al, b, be, _ in own:
                    row += [a, al, b] if form == "shared" else [a, al, b, be]
            rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def _fits(
    theta: torch.Tensor, lay: Layout, groups: Sequence[Sequence[Point]], form: str, share: str, rms: bool
) -> list[Fit]:
    """Each family's coefficients read out of one joint parameter vector."""
    out, start = [], 0
    data = _data([p for g in groups for p in g]) if rms else None
    r = lay.residuals(theta, *data, jacobian=False)[0] if data is not None else None
    for g in groups:
        row = lay.index[start]
        a, alpha, b, beta, e = (theta[int(i)] for i in row)
        vec = torch.stack([a, alpha, b, e] if form == "shared" else [a, alpha, b, beta, e])
        res = math.nan if r is None else float(r[start : start + len(g)].pow(2).mean().sqrt())
        out.append(_to_fit(vec, form, g, res, share))
        start += len(g)
    return out


def joint_fit(groups: Sequence[Sequence[Point]], form: str, share: str) -> tuple[list[Fit], torch.Tensor]:
    """One fit of every family's points (``groups``, one list per family) sharing ``share``: each
    family's fit (the shared coefficients equal in all), and the best distinct joint optima (the
    bootstrap's starts)."""
    own = [_single(fit(g, form)[1][0], form) for g in groups]  # each family's own best optimum
    lay = layout([len(g) for g in groups], form, share)
    points = [p for g in groups for p in g]
    data = _data(points)
    starts = _starts(own, min(p.loss for p in points), form, share)
    weights = torch.ones(len(starts), len(points), dtype=torch.float64)
    theta, f = minimise(starts, data, weights, lay, iterations=_SCREEN_STEPS)
    keep = torch.argsort(torch.where(torch.isfinite(f), f, torch.full_like(f, math.inf)))[:_KEPT]
    theta, f = minimise(theta[keep], data, weights[keep], lay)
    best, distinct = best_optima(theta, f)
    return _fits(best, lay, groups, form, share, rms=True), distinct


def joint_bootstrap(
    groups: Sequence[Sequence[Point]],
    starts: torch.Tensor,
    form: str,
    share: str,
    samples: int = 200,
    seed: int = 0,
) -> list[list[Fit]]:
    """Per family, one fit per draw; each draw resamples the runs of every family (each family's runs
    with replacement, as :func:`nas.ladder.fit.resample_weights` does) and refits them jointly."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.cat([resample_weights(g, samples, generator) for g in groups], dim=1)  # (S, n)
    lay = layout([len(g) for g in groups], form, share)
    data = _data([p for g in groups for p in g])
    n, k = weights.shape[1], starts.shape[1]
    chunk = max(1, _CHUNK_BYTES // (8 * len(starts) * n * k))
    best = []
    for lo in range(0, samples, chunk):
        w = weights[lo : lo + chunk]
        theta0 = starts.unsqueeze(0).expand(len(w), *starts.shape).clone()
        theta, f = minimise(theta0, data, w.unsqueeze(1).expand(-1, len(starts), -1), lay)
        f = torch.where(torch.isfinite(f), f, torch.full_like(f, math.inf))
        best.append(theta[torch.arange(len(w)), torch.argmin(f, dim=1)])
    draws = [_fits(t, lay, groups, form, share, rms=False) for t in torch.cat(best)]
    return [[d[i] for d in draws] for i in range(len(groups))]
