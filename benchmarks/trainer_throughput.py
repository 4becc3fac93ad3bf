#!/usr/bin/env python
"""Training throughput of the vanilla candidate through the evaluator, against a plain minimal GPT.

Three contenders train the same shape (d_model 128, 4 layers, 4 heads, T 128,
batch 16, byte vocabulary) on the same corpus, with the same threads:

* ``minimal GPT, plain loop``: ``benchmarks/minimal_gpt.py`` with nanoGPT's
  inner loop (AdamW with torch's default implementation, clip, step);
* ``minimal GPT, evaluator step``: the same model through
  ``evaluators.lm.TrainStep`` (what ``train_lm`` runs every step);
* ``nas vanilla, evaluator step``: ``nas.build_model(examples/archs/vanilla.yaml)``
  through ``TrainStep``: the engine as a search uses it.

Every timed step includes drawing its batch.  The contenders take turns
(interleaved repeats, rotating order) so machine noise hits them alike; the
table reports the median and best tokens/s, and the ratio of medians against
the plain loop.  Run::

    .venv/bin/python benchmarks/trainer_throughput.py [--repeats 7] [--steps 15] [--no-write]

It prints a markdown table and replaces its own section of docs/BENCHMARKS.md
(between the ``trainer_throughput`` HTML comments; other sections are left alone).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _doc import write_section  # noqa: E402
from minimal_gpt import GPTConfig, MinimalGPT, plain_train_step  # noqa: E402

import nas  # noqa: E402
from evaluators.lm import TrainStep, train_lm  # noqa: E402
from nas.data import get_batch, load_corpus  # noqa: E402
from nas.spec.training import Budget, TrainRecipe  # noqa: E402

SECTION = "trainer_throughput"
B, T = 16, 128


def contenders(recipe: TrainRecipe) -> dict[str, Callable[[torch.Tensor, torch.Tensor], object]]:
    torch.manual_seed(0)
    plain_model = MinimalGPT(GPTConfig())
    plain_opt = torch.optim.AdamW(plain_model.parameters(), lr=recipe.lr, betas=(0.9, 0.95), weight_decay=0.1)
    torch.manual_seed(0)
    minimal_step = TrainStep(MinimalGPT(GPTConfig()), recipe, torch.device("cpu"))
    torch.manual_seed(0)
    arch = nas.load_arch(ROOT / "examples" / "archs" / "vanilla.yaml")
    nas_step = TrainStep(nas.build_model(arch), recipe, torch.device("cpu"))
    return {
        "minimal GPT, plain loop": lambda x, y: plain_train_step(plain_model, plain_opt, x, y),
        "minimal GPT, evaluator step": minimal_step,
        "nas vanilla, evaluator step": nas_step,
    }


def measure(step: Callable, data: torch.Tensor, gen: torch.Generator, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        x, y = get_batch(data, B, T, gen)
        step(x, y)
    return steps * B * T / (time.perf_counter() - t0)


def run(repeats: int, steps: int, warmup: int) -> tuple[dict[str, list[float]], str]:
    recipe = TrainRecipe(batch_size=B, seq_len=T)
    corpus = load_corpus(None)
    runs = contenders(recipe)
    gen = torch.Generator().manual_seed(0)
    for step in runs.values():
        measure(step, corpus.train, gen, warmup)
    names = list(runs)
    results: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            results[name].append(measure(runs[name], corpus.train, gen, steps))
        print(
            f"repeat {r + 1}/{repeats}: " + ", ".join(f"{results[n][-1]:,.0f}" for n in names),
            file=sys.stderr,
        )
    return results, corpus.name


def table(results: dict[str, list[float]]) -> str:
    base = results["minimal GPT, plain loop"]
    base_med, base_best = statistics.median(base), max(base)
    lines = [
        "| contender | median tokens/s | best tokens/s | ratio (median) | ratio (best) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, values in results.items():
        med, best = statistics.median(values), max(values)
        lines.append(
            f"| {name} | {med:,.0f} | {best:,.0f} | {med / base_med:.2f}x | {best / base_best:.2f}x |"
        )
    return "\n".join(lines)


def load_average() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=15, help="timed steps per contender per repeat")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = load_average()
    results, corpus = run(args.repeats, args.steps, args.warmup)
    md = table(results)
    vanilla = nas.load_arch(ROOT / "examples" / "archs" / "vanilla.yaml")
    end_to_end = train_lm(vanilla, TrainRecipe(batch_size=B), Budget("steps", 60), None, device="cpu")
    md += (
        f"\n\n`train_lm` on the same candidate, 60 steps end to end (learning-rate schedule, batch "
        f"sampling, loss read-back every 10 steps; evaluation excluded): "
        f"{end_to_end.tokens_per_s:,.0f} tokens/s."
    )
    print(md)
    cpu = platform.processor() or platform.machine()
    body = (
        "## Trainer throughput (`benchmarks/trainer_throughput.py`)\n\n"
        f"Vanilla candidate (d_model 128, 4 layers, 4 heads, T {T}, batch {B}, byte vocabulary), "
        f"one training step per batch drawn from the `{corpus}` corpus, fp32 on the CPU "
        f"({torch.get_num_threads()} threads, {cpu}, torch {torch.__version__}); "
        f"{args.repeats} interleaved repeats of {args.steps} steps each, {args.warmup} warm-up steps. "
        f"Measured {datetime.date.today().isoformat()}; 1-minute load average {load_before} before, "
        f"{load_average()} after (other work on the machine shows up as low medians).\n\n"
        f"{md}\n\n"
        "*plain loop*: nanoGPT's inner loop with torch's default AdamW; *evaluator step*: "
        "`evaluators.lm.TrainStep`, which `train_lm` runs (fused AdamW, foreach clipping). "
        "The model rows compare the engine's registry-built `TransformerLM` with a hand-written GPT "
        "of the same shape. Wall-clock numbers on a shared two-core machine are noisy: compare "
        "within one run, not across runs; when the load average is high, *best* is the better estimate.\n"
    )
    if not args.no_write:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
