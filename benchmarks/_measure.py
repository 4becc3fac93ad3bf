"""Real losses of architectures drawn uniformly from a search space: the measured tables of the benchmarks.

``search_efficiency.py --measure`` (the default space, behind its stand-in
objective) and ``proxies.py --measure`` (the full space, a second set to rank
the proxies on) both train seeded uniform draws of a space with ``train_lm``
for a fixed FLOPs budget and write the same JSON table, one row per
architecture.
"""

from __future__ import annotations

import datetime
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import _doc

ROOT = _doc.ROOT


def measure(
    space_path: Path, table_path: Path, n_archs: int, budget_flops: float, threads: int, seed: int
) -> None:
    """Train ``n_archs`` architectures drawn uniformly (within the caps) from a space; write the table."""
    import torch

    from evaluators.lm import train_lm
    from nas.data import load_corpus
    from nas.models.cost import compute
    from nas.search.space.load import load_space
    from nas.spec.training import Budget, TrainRecipe

    torch.set_num_threads(threads)
    space = load_space(space_path)
    corpus = load_corpus(None)
    recipe = TrainRecipe.from_dict({**space.recipe, "seed": 0})
    rng = random.Random(seed)
    archs: dict[str, Any] = {}
    while len(archs) < n_archs:
        arch = space.random_arch(rng)
        if compute(arch, recipe.seq_len).params > space.constraints.get("max_params", math.inf):
            continue
        archs.setdefault(arch.arch_id, arch)
    rows = []
    for i, arch in enumerate(archs.values()):
        t0 = time.perf_counter()
        m = train_lm(arch, recipe, Budget("flops", budget_flops), corpus, device="cpu", threads=threads)
        rows.append(
            {
                "arch_id": arch.arch_id,
                "summary": arch.summary(),
                "val_loss": m.val_loss,
                "arch": arch.to_dict(),
            }
        )
        took = time.perf_counter() - t0
        print(f"{i + 1}/{len(archs)} {arch.summary()}: {m.val_loss:.4f} ({took:.0f} s)", file=sys.stderr)
    table_path.parent.mkdir(parents=True, exist_ok=True)
    table_path.write_text(
        json.dumps(
            {
                "what": (
                    f"validation loss (nats/token) of architectures drawn uniformly from the {space.name} "
                    "space"
                ),
                "space": str(space_path.relative_to(ROOT)),
                "space_fingerprint": space.fingerprint,
                "budget": {"flops": budget_flops},
                "recipe": recipe.to_dict(),
                "corpus": corpus.name,
                "threads": threads,
                "draw_seed": seed,
                "command": _doc.command(),
                "measured": datetime.date.today().isoformat(),
                "machine": _doc.machine(threads),
                "archs": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {table_path.relative_to(ROOT)} ({len(rows)} architectures)", file=sys.stderr)
