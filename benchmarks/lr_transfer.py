#!/usr/bin/env python
"""Does the best learning rate stay put as a model grows?  standard against completep.

For each architecture (vanilla, Transformer++, a GLA hybrid: gated_linear and mha layers
alternating) and each size M (``nas.models.sizes.resize``: width and depth x M^(1/3)),
it trains one run per learning rate of a x2 grid under each parametrization, with
``completep`` relative to the architecture at size 1 (its default base shape).  It
reports each size's best rate on the grid and the loss lost by training that size at
size 1's best rate instead (0 where the two coincide).  The hope (issue 44): under
completep the best rate moves at most one grid step across the sizes and the loss lost
stays under 0.01 nats.

The architectures are trained at a reduced context and batch (``--seq-len``, ``--batch``)
for ``--steps`` steps: the full study (sizes 1/8 to 8, seven or more rates, three
architectures, hundreds of steps) is hours on two cores.  Results are cached per run in
``--cache`` (JSON), so a stopped run continues.  Run::

    .venv/bin/python benchmarks/lr_transfer.py --archs vanilla --sizes 0.125,1,8 --steps 100

It prints a markdown table and replaces its own section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _doc import markdown_table, provenance, write_section  # noqa: E402

import nas  # noqa: E402
from evaluators.base import Diverged  # noqa: E402
from evaluators.lm import train_lm  # noqa: E402
from nas.data import load_corpus  # noqa: E402
from nas.models.cost import compute  # noqa: E402
from nas.models.sizes import resize  # noqa: E402
from nas.spec.training import Budget, TrainRecipe  # noqa: E402

SECTION = "lr_transfer"


def gla_hybrid() -> nas.ArchConfig:
    """vanilla's shape with GLA (gated_linear, data gate) and mha layers alternating."""
    raw = nas.load_arch(ROOT / "examples/archs/vanilla.yaml").to_dict()
    gla = {"attention": {"type": "gated_linear", "gate": "data"}, "ffn": {"activation": "relu", "mult": 4}}
    mha = {"attention": "mha", "ffn": {"activation": "relu", "mult": 4}}
    raw["layers"] = [gla, mha, gla, mha]
    return nas.ArchConfig.from_dict(raw)


ARCHS = {
    "vanilla": lambda: nas.load_arch(ROOT / "examples/archs/vanilla.yaml"),
    "transformer_pp": lambda: nas.load_arch(ROOT / "examples/archs/transformer_pp.yaml"),
    "gla_hybrid": gla_hybrid,
}


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    return str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)


def lr_grid(centre: float, n: int) -> list[float]:
    """``n`` rates a factor 2 apart around ``centre``."""
    return [centre * 2.0 ** (k - n // 2) for k in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="vanilla,transformer_pp,gla_hybrid")
    parser.add_argument("--sizes", default="0.125,0.35,1,2.8,8")
    parser.add_argument("--lr-centre", type=float, default=4e-3)
    parser.add_argument("--lrs", type=int, default=7, help="rates on the x2 grid")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--parametrizations", default="standard,completep")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache", default=str(ROOT / "benchmarks" / "data" / "lr_transfer.json"))
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="train nothing: report what --cache holds (partial rows say so)",
    )
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes.split(",")]
    lrs = lr_grid(args.lr_centre, args.lrs)
    cache_path = Path(args.cache)
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    corpus = load_corpus(None)
    budget = Budget("steps", args.steps)
    rows = []
    dropped: list[str] = []  # sizes whose layers lack a block of the pattern (the size rule's rounding)
    for arch_name in args.archs.split(","):
        base = ARCHS[arch_name]()
        for par in args.parametrizations.split(","):
            losses: dict[float, dict[float, float]] = {}
            for size in sizes:
                arch = resize(base, size) if size != 1 else base
                for lr in lrs:
                    key = f"{arch_name}|{par}|{size:g}|{lr:.6g}|{args.steps}|{args.batch}|{args.seq_len}"
                    if key not in cache and args.cached_only:
                        continue
                    if key not in cache:
                        recipe = TrainRecipe(
                            batch_size=args.batch, seq_len=args.seq_len, lr=lr, seed=0, parametrization=par,
                            **({"base_width": base.d_model, "base_depth": len(base.layers)}
                               if par == "completep" else {}),
                        )  # fmt: skip
                        t0 = time.perf_counter()
                        try:
                            loss = train_lm(
                                arch, recipe, budget, corpus, device="cpu", threads=args.threads
                            ).val_loss
                        except Diverged:
                            loss = math.inf
                        cache[key] = loss
                        cache_path.parent.mkdir(parents=True, exist_ok=True)
                        cache_path.write_text(json.dumps(cache, indent=0))
                        took = time.perf_counter() - t0
                        print(f"{key}: {loss:.4f} ({took:.0f} s)", file=sys.stderr)
                    losses.setdefault(size, {})[lr] = cache[key]
            done = {s: at for s, at in losses.items() if len(at) == len(lrs)}  # whole sweeps only
            best = {s: min(at, key=at.get) for s, at in done.items()}
            lr1 = best.get(1.0)
            for size in sizes:
                arch = resize(base, size) if size != 1 else base
                c = compute(arch, args.seq_len)
                at = losses.get(size, {})
                kinds = {layer.attention.type for layer in arch.layers}
                first = par == args.parametrizations.split(",")[0]  # said once per architecture and size
                if first and kinds != {layer.attention.type for layer in base.layers}:
                    dropped.append(f"{arch_name} at size {size:g} has only {', '.join(sorted(kinds))} layers")
                if len(at) < len(lrs):  # --cached-only: a size whose sweep is not finished is not reported
                    rows.append([arch_name, par, f"{size:g}", f"{arch.d_model}x{len(arch.layers)}",
                                 f"{c.non_embedding_params:,}", *["not measured"] * 5])  # fmt: skip
                    continue
                lost = "-" if lr1 is None else f"{at[lr1] - at[best[size]]:.4f}"
                steps_off = "-" if lr1 is None else f"{round(math.log2(best[size] / lr1)):+d}"
                rows.append([
                    arch_name, par, f"{size:g}", f"{arch.d_model}x{len(arch.layers)}",
                    f"{c.non_embedding_params:,}", f"{best[size]:.3g}", steps_off, f"{at[best[size]]:.4f}",
                    lost, " ".join("inf" if math.isinf(at[lr]) else f"{at[lr]:.3f}" for lr in lrs),
                ])  # fmt: skip
    header = [
        "arch", "parametrization", "size", "d_model x layers", "non-emb params", "best lr",
        "grid steps from size 1's", "best loss", "loss lost at size 1's lr", "loss per lr (grid order)",
    ]  # fmt: skip
    table = markdown_table(header, rows, align="llllrrrrrl")
    print(table)
    if not args.no_write:
        body = (
            "## Learning-rate transfer across sizes (`benchmarks/lr_transfer.py`)\n\n"
            f"{provenance(args.threads)}\n\n"
            f"**Reduced run**: {args.steps} steps, batch {args.batch}, context {args.seq_len}, one seed (0), "
            f"sizes {', '.join(f'{s:g}' for s in sizes)}, rates {', '.join(f'{lr:.3g}' for lr in lrs)} "
            "(x2 grid), cosine schedule, default corpus; completep relative to each architecture at size 1. "
            "Validation loss in nats per byte-token; `inf`: diverged. *Grid steps*: how many x2 steps the "
            "size's best rate is from size 1's; *loss lost*: the size's loss at size 1's best rate minus its "
            "best loss on the grid. Not measured: seeds (one each, so differences of a few hundredths "
            "between neighbouring rates may be noise), longer runs, and the full context and batch. "
            f"Every run's loss is kept in `{_shown(cache_path)}`: the command retrains only what it "
            "lacks.\n\n"
            f"{table}\n"
        )
        if dropped:
            body += (
                "\nThe size rule (nas.models.sizes) keeps the layer at each new layer's relative depth, so a "
                f"small size can lose a block of the pattern: {'; '.join(dropped)} (that row measures a "
                "different architecture).\n"
            )
        write_section(SECTION, body)


if __name__ == "__main__":
    main()
