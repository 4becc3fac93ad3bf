"""Scaling fits: the Chinchilla form per architecture, bootstrap intervals, compute-optimal predictions.

The form (Hoffmann et al. 2022, App. D.2; ``../shared/REFERENCES_SCALE.md`` §2)::

    L(N, D) = E + A / N**alpha + B / D**beta

with N the parameters (embeddings included, as Chinchilla counts them) and D the
training tokens, fitted as Chinchilla does: the Huber loss (delta 1e-3) of
``LSE(a - alpha log N, b - beta log D, e) - log L`` summed over the points, from a
grid of initialisations, the best optimum kept.  ``A, B, E = exp(a, b, e)``; the
exponents are kept in [0, MAX_EXPONENT] (a loss that grows with size or data is
no scaling law), as OLMo's ladder keeps every parameter non-negative.

Why not ``torch.optim.LBFGS`` (what Chinchilla used, via SciPy): it optimises one
problem, and a fit here is thousands of small independent ones (every start of the
grid, for every bootstrap resample), so one start at a time took seconds per fit.
Instead every problem takes Levenberg-Marquardt steps on the iteratively
reweighted form of the Huber loss (weights ``min(1, delta/|r|)``), batched as one
tensor, with an exact analytic Jacobian; each problem accepts a step only when its
own objective falls.  The ``form`` ``"shared"`` ties ``beta`` to ``alpha`` (4
parameters), a variant for ladders too small to separate the two exponents.

Intervals come from a bootstrap over **runs** (one run gives several points, its
rungs; its points move together, so resampling points would understate the
spread): each resample draws the architecture's runs with replacement and refits.
The reference documents published bootstraps over points (Chinchilla: 80%
subsamples; Epoch: 4,000 resamples of points); over runs is this tool's choice.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch

#: Chinchilla's Huber delta on log-loss (App. D.2: larger overfits the small runs)
HUBER_DELTA = 1e-3
MAX_EXPONENT = 4.0
FORMS = ("chinchilla", "shared")
#: Chinchilla's grid of starts: alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1},
#: a, b in {0, 5, ..., 25}
GRID = {
    "alpha": [0.0, 0.5, 1.0, 1.5, 2.0],
    "beta": [0.0, 0.5, 1.0, 1.5, 2.0],
    "e": [-1.0, -0.5, 0.0, 0.5, 1.0],
    "a": [0.0, 5.0, 10.0, 15.0, 20.0, 25.0],
    "b": [0.0, 5.0, 10.0, 15.0, 20.0, 25.0],
}
_SCREEN_STEPS = 15
_KEPT = 128
#: bootstrap resamples start from this many of the full fit's best distinct optima
RESAMPLE_STARTS = 16


@dataclasses.dataclass(frozen=True)
class Point:
    """One measured loss: ``params`` N, ``tokens`` D, the training FLOPs to reach it, and its run."""

    params: float
    tokens: float
    flops: float
    loss: float
    run: int


@dataclasses.dataclass(frozen=True)
class Fit:
    """Coefficients of ``L = E + A/N^alpha + B/D^beta`` and how well they fit."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float
    form: str = "chinchilla"
    points: int = 0
    runs: int = 0
    rms_log: float = 0.0  # root-mean-square residual in log loss
    share: str = "none"  # what it shares with the other architectures' fits (nas.ladder.joint)

    def loss(self, params: Any, tokens: Any) -> Any:
        return self.E + self.A / params**self.alpha + self.B / tokens**self.beta

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Layout:
    """Where each point's five coefficients (a, alpha, b, beta, e) sit in a parameter vector of ``k``.

    One family in the ``chinchilla`` form reads ``(a, alpha, b, beta, e)`` at 0..4; ``shared`` reads beta
    from alpha's place.  A joint fit of several families (:mod:`nas.ladder.joint`) points every family's e
    (and its exponents, when they are shared) at the same entry, so one objective fits them all.
    ``exponents``: the entries kept in [0, MAX_EXPONENT]."""

    def __init__(self, index: torch.Tensor, k: int, exponents: Sequence[int]) -> None:
        self.index, self.k, self.exponents = index, k, tuple(exponents)

    @classmethod
    def single(cls, form: str, n: int) -> Layout:
        """One family of ``n`` points in ``form``."""
        row = [0, 1, 2, 1, 3] if form == "shared" else [0, 1, 2, 3, 4]
        return cls(
            torch.tensor([row] * n), 4 if form == "shared" else 5, (1,) if form == "shared" else (1, 3)
        )

    def residuals(
        self,
        theta: torch.Tensor,
        logn: torch.Tensor,
        logd: torch.Tensor,
        logl: torch.Tensor,
        jacobian: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Residuals ``LSE(...) - log L`` (..., n) and their Jacobian (..., n, k) for parameters (..., k)
        (None when not ``jacobian``: the objective alone needs none)."""
        coef = theta[..., self.index]  # (..., n, 5)
        a, alpha, b, beta, e = coef.unbind(-1)
        terms = torch.stack((a - alpha * logn, b - beta * logd, e), -1)
        lse = torch.logsumexp(terms, -1)
        if not jacobian:
            return lse - logl, None
        p1, p2, p3 = torch.softmax(terms, -1).unbind(-1)  # d LSE / d term
        local = torch.stack([p1, -p1 * logn, p2, -p2 * logd, p3], -1)  # d LSE / d (a, alpha, b, beta, e)
        jac = torch.zeros(*coef.shape[:-1], self.k, dtype=theta.dtype)
        # entries read by several of a point's slots (shared: beta is alpha) sum their derivatives
        jac.scatter_add_(-1, self.index.expand_as(local), local)
        return lse - logl, jac

    def clamp(self, theta: torch.Tensor) -> torch.Tensor:
        out = theta.clone()
        for i in self.exponents:
            out[..., i] = out[..., i].clamp(0.0, MAX_EXPONENT)
        return out


def _unpack(theta: torch.Tensor, form: str) -> tuple[torch.Tensor, ...]:
    """(a, alpha, b, beta, e) from one family's parameter tensor (``shared``: beta is alpha)."""
    if form == "shared":
        a, alpha, b, e = theta.unbind(-1)
        return a, alpha, b, alpha, e
    return theta.unbind(-1)


def _huber(r: torch.Tensor, delta: float) -> torch.Tensor:
    return torch.where(r.abs() <= delta, 0.5 * r**2, delta * (r.abs() - 0.5 * delta))


def _objective(
    theta: torch.Tensor, data: tuple[torch.Tensor, ...], weights: torch.Tensor, layout: Layout, delta: float
) -> torch.Tensor:
    r, _ = layout.residuals(theta, *data, jacobian=False)
    return (weights * _huber(r, delta)).sum(-1)


def minimise(
    theta: torch.Tensor,
    data: tuple[torch.Tensor, ...],
    weights: torch.Tensor,
    layout: Layout,
    delta: float = HUBER_DELTA,
    iterations: int = 200,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched Levenberg-Marquardt on the reweighted Huber objective: every leading index of ``theta``
    (..., k) is its own problem, with ``weights`` (..., n) on the points (bootstrap counts).
    Returns the parameters and each problem's objective."""
    k = theta.shape[-1]
    eye = torch.eye(k, dtype=theta.dtype)
    theta = layout.clamp(theta)
    f = _objective(theta, data, weights, layout, delta)
    lam = torch.full(f.shape, 1e-3, dtype=theta.dtype)
    stalls = 0
    for _ in range(iterations):
        r, jac = layout.residuals(theta, *data)
        assert jac is not None
        w = weights * torch.clamp(delta / r.abs().clamp_min(1e-300), max=1.0)  # IRLS weights
        grad = torch.einsum("...n,...nk->...k", w * r, jac)
        hess = (w.unsqueeze(-1) * jac).transpose(-1, -2) @ jac
        damp = lam[..., None, None] * (torch.diagonal(hess, dim1=-2, dim2=-1).unsqueeze(-1) * eye + eye)
        step = torch.linalg.solve(hess + damp, -grad.unsqueeze(-1)).squeeze(-1)
        trial = layout.clamp(theta + step)
        f_new = _objective(trial, data, weights, layout, delta)
        better = torch.isfinite(f_new) & (f_new < f)
        theta = torch.where(better.unsqueeze(-1), trial, theta)
        gain = torch.where(better, f - f_new, torch.zeros_like(f))
        f = torch.where(better, f_new, f)
        lam = torch.where(better, lam / 3, lam * 4).clamp(1e-12, 1e12)
        moving = better & (gain > 1e-13 * (1 + f.abs()))
        stalls = 0 if bool(moving.any()) else stalls + 1
        if stalls >= 8:  # no problem improved for 8 steps (each raised its damping 4^8 times)
            break
    return theta, f


def _grid(form: str) -> torch.Tensor:
    g = GRID
    if form == "shared":
        rows = [(a, al, b, e) for a in g["a"] for al in g["alpha"] for b in g["b"] for e in g["e"]]
    else:
        rows = [
            (a, al, b, be, e)
            for a in g["a"]
            for al in g["alpha"]
            for b in g["b"]
            for be in g["beta"]
            for e in g["e"]
        ]
    return torch.tensor(rows, dtype=torch.float64)


def _data(points: Sequence[Point]) -> tuple[torch.Tensor, ...]:
    t = torch.tensor([(p.params, p.tokens, p.loss) for p in points], dtype=torch.float64)
    return t[:, 0].log(), t[:, 1].log(), t[:, 2].log()


def _to_fit(theta: torch.Tensor, form: str, points: Sequence[Point], rms: float, share: str = "none") -> Fit:
    a, alpha, b, beta, e = (float(v) for v in _unpack(theta, form))
    return Fit(
        math.exp(e),
        math.exp(a),
        alpha,
        math.exp(b),
        beta,
        form,
        len(points),
        len({p.run for p in points}),
        rms,
        share,
    )


def fit(points: Sequence[Point], form: str = "chinchilla") -> tuple[Fit, torch.Tensor]:
    """The best fit of ``points`` from every start of the grid; also the best distinct optima (the
    bootstrap's starts)."""
    if form not in FORMS:
        raise ValueError(f"unknown fit form {form!r}; valid: {', '.join(FORMS)}")
    data = _data(points)
    layout = Layout.single(form, len(points))
    starts = _grid(form)
    weights = torch.ones(len(starts), len(points), dtype=torch.float64)
    # every start a few steps, then the most promising ones to convergence (the grid is 4,500 starts)
    theta, f = minimise(starts, data, weights, layout, iterations=_SCREEN_STEPS)
    keep = torch.argsort(torch.where(torch.isfinite(f), f, torch.full_like(f, math.inf)))[:_KEPT]
    theta, f = minimise(theta[keep], data, weights[keep], layout)
    best, distinct = best_optima(theta, f)
    r, _ = layout.residuals(best, *data, jacobian=False)
    rms = float(r.pow(2).mean().sqrt())
    return _to_fit(best, form, points, rms), distinct


def best_optima(theta: torch.Tensor, f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The best of the problems ``theta`` (K, k) with objectives ``f`` (K,), and up to RESAMPLE_STARTS of
    the best that differ from each other (several basins: a bootstrap draw may fall into another)."""
    f = torch.where(torch.isfinite(f), f, torch.full_like(f, math.inf))
    order = torch.argsort(f)
    distinct: list[torch.Tensor] = []
    for i in order.tolist():
        if not math.isfinite(float(f[i])):
            break
        if all(float((theta[i] - d).abs().max()) > 1e-3 for d in distinct):
            distinct.append(theta[i])
        if len(distinct) == RESAMPLE_STARTS:
            break
    return theta[order[0]], torch.stack(distinct) if distinct else theta[order[:1]]


#: the distinct sizes a bootstrap resample must keep (all of them where the data has fewer): with one size
#: the parameter term of the form is not identified at all
RESAMPLE_SIZES = 3


def resample_weights(points: Sequence[Point], samples: int, generator: torch.Generator) -> torch.Tensor:
    """(samples, n) weights: each resample draws the runs with replacement, a point weighs its run's count.

    A resample with fewer distinct parameter counts than ``min(RESAMPLE_SIZES, distinct in the data)`` is
    drawn again (up to 20 times), then is the runs themselves.
    """
    runs = sorted({p.run for p in points})
    size_of = {p.run: p.params for p in points}
    need = min(RESAMPLE_SIZES, len({p.params for p in points}))
    index = {r: i for i, r in enumerate(runs)}
    point_run = torch.tensor([index[p.run] for p in points])
    out = torch.empty(samples, len(points), dtype=torch.float64)
    for s in range(samples):
        for _ in range(20):
            draw = torch.randint(len(runs), (len(runs),), generator=generator)
            if len({size_of[runs[int(i)]] for i in draw}) >= need:
                break
        else:  # the runs themselves, never a draw short of sizes (its fit is not identified)
            draw = torch.arange(len(runs))
        counts = torch.bincount(draw, minlength=len(runs)).to(torch.float64)
        out[s] = counts[point_run]
    return out


def resamples_vary(points: Sequence[Point]) -> bool:
    """Whether a resample that :func:`resample_weights` accepts can differ from the runs themselves.

    It cannot when there are no more runs than the sizes a resample must keep (three sizes of one seed
    each): every accepted draw is then each run once, every refit the same fit, and the percentiles
    of the draws a zero-width interval that would claim certainty where there is none."""
    return can_vary(len({p.run for p in points}), len({p.params for p in points}))


def can_vary(runs: int, sizes: int) -> bool:
    """:func:`resamples_vary` of ``runs`` runs at ``sizes`` distinct sizes, known before any run trains."""
    return runs > min(RESAMPLE_SIZES, sizes)


def bootstrap(
    points: Sequence[Point], starts: torch.Tensor, form: str = "chinchilla", samples: int = 200, seed: int = 0
) -> list[Fit]:
    """One fit per resample of the runs (seeded: the same intervals every time)."""
    generator = torch.Generator().manual_seed(seed)
    weights = resample_weights(points, samples, generator)  # (S, n)
    data = _data(points)
    theta0 = starts.unsqueeze(0).expand(samples, *starts.shape).clone()  # (S, K, k)
    layout = Layout.single(form, len(points))
    theta, f = minimise(theta0, data, weights.unsqueeze(1).expand(-1, len(starts), -1), layout)
    f = torch.where(torch.isfinite(f), f, torch.full_like(f, math.inf))
    best = theta[torch.arange(samples), torch.argmin(f, dim=1)]
    return [_to_fit(best[s], form, points, math.nan) for s in range(samples)]


@dataclasses.dataclass(frozen=True)
class CostCurve:
    """Training FLOPs per token as a power of the parameters across an architecture's sizes
    (``log c = slope * log N + intercept``, least squares; exact at the sizes measured)."""

    slope: float
    intercept: float

    @classmethod
    def through(cls, sizes: Sequence[tuple[float, float]]) -> CostCurve:
        """From (params, train FLOPs per token) pairs; one size: FLOPs per token proportional to N."""
        xs = [math.log(n) for n, _ in sizes]
        ys = [math.log(c) for _, c in sizes]
        if len(set(xs)) < 2:
            return cls(1.0, ys[0] - xs[0])
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=False)) / sum(
            (x - mx) ** 2 for x in xs
        )
        return cls(slope, my - slope * mx)

    def per_token(self, params: Any) -> Any:
        return torch.exp(
            self.slope * torch.log(torch.as_tensor(params, dtype=torch.float64)) + self.intercept
        )


#: the compute-optimal search spans parameters from 1/1000 of the smallest measured to 1e6 times the largest
#: (Family.n_range); a fit whose optimum lies at either end says so in the report
_N_GRID = 2001


def optimal(
    f: Fit, cost: CostCurve, compute: float, n_range: tuple[float, float]
) -> tuple[float, float, float]:
    """(loss, params, tokens) at training FLOPs ``compute``, the parameters chosen to minimise the fitted
    loss over a log grid of ``n_range`` (tokens = compute / FLOPs per token at that size)."""
    n = torch.logspace(math.log10(n_range[0]), math.log10(n_range[1]), _N_GRID, dtype=torch.float64)
    d = compute / cost.per_token(n)
    loss = f.loss(n, d)
    i = int(torch.argmin(loss))
    return float(loss[i]), float(n[i]), float(d[i])


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, linear between order statistics."""
    return float(torch.quantile(torch.tensor(list(values), dtype=torch.float64), q))
