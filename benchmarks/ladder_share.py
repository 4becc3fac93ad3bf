#!/usr/bin/env python
"""What sharing coefficients across a ladder's architectures buys, on synthetic ladders of known laws.

``ladder --share none | E | E,exponents`` (docs/ladder.md).  No measured ladder of this tool is large
enough to tell the modes apart (the issue's measured ladder needs a GPU), so this measures them where
the truth is known: four architectures whose losses follow known Chinchilla laws, five sizes spanning
64x in parameters at 20 tokens per parameter (rungs at a quarter and half of each run), two seeds, each
run's losses moved together by a seed effect (``--seed-noise``, log-normal) plus a small per-point noise.
Each ladder is fitted on its three smallest sizes and predicts the two larger ones (4x and 8x beyond in
parameters), as ``--check rollout`` does, under each ``--share`` mode.  Three truths:

* ``E shared``: one floor, each architecture its own exponents (what ``--share E`` assumes);
* ``E and exponents shared``: one floor and one pair of exponents (``--share E,exponents`` assumes it);
* ``E not shared``: floors 0.3 nats apart (every sharing mode is then wrong about the data).

Per truth and mode: the mean absolute error of the held-out points, the coverage of the 5-95%
intervals (share of held-out points inside; an honest interval covers about 90%), Spearman of the
predicted ranking of the largest size's end losses against the true one, and the share of fits whose E
went to its bound (under 1% of the lowest loss).  Written to the ``ladder-share`` section of
docs/BENCHMARKS.md.

Run::

    .venv/bin/python benchmarks/ladder_share.py --ladders 6
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402

from nas.confirm.stats import spearman  # noqa: E402
from nas.ladder.fit import Fit, Point, bootstrap, fit  # noqa: E402
from nas.ladder.joint import SHARES, joint_bootstrap, joint_fit  # noqa: E402
from nas.ladder.report import interval  # noqa: E402

SIZES = (1.25e5, 3.5e5, 1e6, 2.8e6, 8e6)
FITTED = 3
TRUTHS = ("E shared", "E and exponents shared", "E not shared")


def laws(truth: str, g: torch.Generator) -> list[Fit]:
    """Four architectures' true laws: terms of about 1 nat at 1e6 parameters and 2e7 tokens."""
    out = []
    for i in range(4):
        u = torch.rand(4, generator=g).tolist()
        alpha, beta = (
            (0.33, 0.3) if truth == "E and exponents shared" else (0.25 + 0.15 * u[0], 0.25 + 0.1 * u[1])
        )
        a_term, b_term = 0.8 + 0.4 * u[2], 0.6 + 0.4 * u[3]
        e = 1.5 + (0.1 * i if truth == "E not shared" else 0.0)
        out.append(Fit(e, a_term * 1e6**alpha, alpha, b_term * 2e7**beta, beta))
    return out


def ladder(law: Fit, g: torch.Generator, run0: int, seed_noise: float, point_noise: float) -> list[Point]:
    points, run = [], run0
    for n in SIZES:
        for _ in range(2):
            seed = seed_noise * float(torch.randn(1, generator=g))
            for f in (0.25, 0.5, 1.0):
                d = 20 * n * f
                noise = seed + point_noise * float(torch.randn(1, generator=g))
                points.append(Point(n, d, 6 * n * d, law.loss(n, d) * math.exp(noise), run))
            run += 1
    return points


def fits(groups: list[list[Point]], share: str, samples: int) -> tuple[list[Fit], list[list[Fit]]]:
    if share == "none":
        out, draws = [], []
        for g in groups:
            best, starts = fit(g)
            out.append(best)
            draws.append(bootstrap(g, starts, samples=samples))
        return out, draws
    best, starts = joint_fit(groups, "chinchilla", share)
    return best, joint_bootstrap(groups, starts, "chinchilla", share, samples)


def measure(truth: str, share: str, reps: int, samples: int, seed_noise: float) -> dict[str, float]:
    errors, inside, rhos, bound = [], [], [], []
    for r in range(reps):
        g = torch.Generator().manual_seed(1000 * r + TRUTHS.index(truth))
        true = laws(truth, g)
        groups = [ladder(law, g, 100 * i, seed_noise, seed_noise / 4) for i, law in enumerate(true)]
        fitted = [[p for p in grp if p.params <= SIZES[FITTED - 1]] for grp in groups]
        best, draws = fits(fitted, share, samples)
        for f, grp, ds in zip(best, groups, draws, strict=True):
            bound.append(f.E < 0.01 * min(p.loss for p in grp))
            for p in grp:
                if p.params <= SIZES[FITTED - 1]:
                    continue
                predicted = float(f.loss(p.params, p.tokens))
                errors.append(abs(predicted - p.loss))
                low, high = interval([float(d.loss(p.params, p.tokens)) for d in ds])
                inside.append(low is not None and low <= p.loss <= high)
        top = SIZES[-1]
        pred = [float(f.loss(top, 20 * top)) for f in best]
        real = [float(law.loss(top, 20 * top)) for law in true]
        rhos.append(spearman(pred, real))
    return {
        "error": sum(errors) / len(errors),
        "coverage": sum(inside) / len(inside),
        "spearman": sum(rhos) / len(rhos),
        "bound": sum(bound) / len(bound),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ladders", type=int, default=6, help="synthetic ladders per truth (default 6)")
    ap.add_argument("--samples", type=int, default=100, help="bootstrap draws per fit (default 100)")
    ap.add_argument("--seed-noise", type=float, default=0.005, help="log-normal seed effect (default 0.005)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for truth in TRUTHS:
        for share in SHARES:
            m = measure(truth, share, args.ladders, args.samples, args.seed_noise)
            rows.append(
                [
                    truth,
                    share,
                    f"{m['error']:.4f}",
                    f"{100 * m['coverage']:.0f}%",
                    f"{m['spearman']:.2f}",
                    f"{100 * m['bound']:.0f}%",
                ]
            )
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    table = _doc.markdown_table(
        ["truth", "--share", "mean abs error", "coverage 5-95%", "Spearman", "E at bound"], rows, "llrrrr"
    )
    body = (
        "## Sharing coefficients across a ladder (synthetic, known laws)\n\n"
        f"Four architectures, sizes {', '.join(f'{s:.3g}' for s in SIZES)} parameters at 20 tokens per "
        f"parameter, rungs 0.25 and 0.5, two seeds (seed effect {args.seed_noise:g} in log loss, points "
        f"{args.seed_noise / 4:g}); fitted on the {FITTED} smallest sizes, predicting the two larger (4x and "
        f"8x in parameters); {args.ladders} ladders per truth, {args.samples} bootstrap draws. Spearman: "
        "the predicted order of the largest size's end losses against the true order (four "
        "architectures).\n\n" + table + "\n\n" + _doc.provenance(args.threads)
    )
    print(body)
    if not args.no_write:
        _doc.write_section("ladder-share", body)


if __name__ == "__main__":
    main()
