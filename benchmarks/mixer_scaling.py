#!/usr/bin/env python
"""Linear-time mixers against ``mha`` as T grows: training tokens/s, peak memory, generation state.

For each block (default ``mha``, ``sliding_window``, ``gated_linear``, ``hyena``) and each
sequence length T (default 512, 2048, 8192), a 2-layer LM (d_model 128, 4 heads, ReLU FFN x4,
byte vocabulary, max_len T) trains on random tokens with the same tokens per step at every T
(batch = 16384 / T): one step is ``evaluators.lm.TrainStep`` (forward, cross-entropy, backward,
clipping, fused AdamW).  Each (block, T) runs in a fresh process, so its peak resident memory
(``VmHWM``) is its own: the table gives the peak minus the resident size just before the first
step (the model, the optimizer and the batch already built), i.e. what the steps themselves took.
*state* is what one sequence keeps per layer while generating after T tokens
(``nas.compute``'s ``state_bytes``, fp32): the KV cache of ``mha``, the window of
``sliding_window``, the fixed matrix state of ``gated_linear``, the input history of ``hyena``'s
long convolution.  Run::

    .venv/bin/python benchmarks/mixer_scaling.py [--seq-lens 512,2048,8192] [--steps 3] [--threads 2]

It prints the table and replaces the ``mixer_scaling`` section of docs/BENCHMARKS.md
(``--no-write`` leaves it alone).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402

SECTION = "mixer_scaling"
TOKENS_PER_STEP = 16384
D_MODEL, N_HEADS, N_LAYERS = 128, 4, 2
BLOCKS = ("mha", "sliding_window", "gated_linear", "hyena")


def arch_dict(block: str, T: int) -> dict:
    return {
        "vocab_size": 256,
        "d_model": D_MODEL,
        "n_heads": N_HEADS,
        "max_len": T,
        "layers": {"repeat": N_LAYERS, "attention": block, "ffn": {"activation": "relu", "mult": 4}},
    }


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(block: str, T: int, steps: int, threads: int) -> dict:
    """One (block, T) in this process: median step time and the steps' peak memory."""
    import torch

    import nas
    from evaluators.lm import TrainStep
    from nas.spec.training import TrainRecipe

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    arch = nas.ArchConfig.from_dict(arch_dict(block, T))
    batch = TOKENS_PER_STEP // T
    step = TrainStep(nas.build_model(arch), TrainRecipe(batch_size=batch, seq_len=T), torch.device("cpu"))
    x = torch.randint(0, 256, (batch, T))
    y = torch.randint(0, 256, (batch, T))
    before = _status_kib("VmRSS")
    times = []
    for _ in range(steps + 1):  # the first step is a warm-up
        t0 = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - t0)
    peak = _status_kib("VmHWM")
    c = nas.compute(arch, T)
    return {
        "block": block,
        "T": T,
        "batch": batch,
        "tokens_per_s": TOKENS_PER_STEP / sorted(times[1:])[len(times[1:]) // 2],
        "peak_mib": (peak - before) / 1024,
        "state_bytes": c.state_bytes / N_LAYERS,
        "train_flops": c.train_flops_per_token,
    }


def crossing(rows: list[dict], block: str) -> str:
    """The T at which ``block`` first trains faster than ``mha`` (log-linear between measured T's)."""
    import math

    pts = sorted((r["T"], r["tokens_per_s"]) for r in rows if r["block"] == block)
    base = dict(sorted((r["T"], r["tokens_per_s"]) for r in rows if r["block"] == "mha"))
    ratio = [(T, tps / base[T]) for T, tps in pts]
    if ratio[0][1] >= 1:
        return f"at or below {ratio[0][0]}"
    for (t0, r0), (t1, r1) in zip(ratio, ratio[1:], strict=False):
        if r1 >= 1:  # interpolate log(ratio) against log(T)
            f = -math.log(r0) / (math.log(r1) - math.log(r0))
            return f"about {round(math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))):,}"
    return f"not by {ratio[-1][0]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq-lens", default="512,2048,8192")
    ap.add_argument("--blocks", default=",".join(BLOCKS))
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up (default 3)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("BLOCK", "T"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.steps, args.threads)))
        return 0
    rows = []
    for T in (int(t) for t in args.seq_lens.split(",")):
        for block in args.blocks.split(","):
            out = subprocess.run(
                [sys.executable, __file__, "--child", block, str(T), "--steps", str(args.steps),
                 "--threads", str(args.threads)], capture_output=True, text=True, check=True,
            )  # fmt: skip
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(
                f"{block:>15} T {T:>5}: {r['tokens_per_s']:,.0f} tokens/s, {r['peak_mib']:,.0f} MiB",
                file=sys.stderr,
            )
    base = {r["T"]: r for r in rows if r["block"] == "mha"}
    table = _doc.markdown_table(
        [
            "block",
            "T",
            "batch",
            "tokens/s",
            "vs mha",
            "peak MiB (steps)",
            "vs mha",
            "train MFLOPs/token",
            "state per layer and sequence",
        ],
        [
            [
                f"`{r['block']}`",
                r["T"],
                r["batch"],
                f"{r['tokens_per_s']:,.0f}",
                f"{r['tokens_per_s'] / base[r['T']]['tokens_per_s']:.2f}x" if r["T"] in base else "-",
                f"{r['peak_mib']:,.0f}",
                f"{r['peak_mib'] / base[r['T']]['peak_mib']:.2f}x" if r["T"] in base else "-",
                f"{r['train_flops'] / 1e6:.1f}",
                f"{r['state_bytes'] / 1024:,.0f} KiB",
            ]
            for r in sorted(rows, key=lambda r: (r["T"], r["block"]))
        ],
    )
    blocks = [b for b in args.blocks.split(",") if b != "mha"]
    over = "; ".join(f"`{b}` {crossing(rows, b)}" for b in blocks) if base else ""
    body = "\n".join(
        [
            "## Linear-time mixers against `mha` as T grows (`benchmarks/mixer_scaling.py`)",
            "",
            _doc.provenance(args.threads),
            "",
            f"A {N_LAYERS}-layer LM of each block (d_model {D_MODEL}, {N_HEADS} heads, ReLU FFN x4, byte "
            f"vocabulary), {TOKENS_PER_STEP} tokens per training step at every T, fp32 on the CPU; one "
            f"warm-up and the median of {args.steps} timed `TrainStep`s, each (block, T) in a fresh "
            "process. *peak MiB* is the peak resident memory during the steps above what the process held "
            "before the first (model, optimizer, batch). *state* is what one sequence keeps per layer while "
            "generating after T tokens (`nas.compute`, fp32).",
            "",
            table,
            "",
            f"Where each mixer overtakes `mha` in tokens/s: {over}." if over else "",
        ]
    )
    print(body)
    if not args.no_write:
        _doc.write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
