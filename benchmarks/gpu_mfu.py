"""GPU efficiency: training MFU of a GPT-2-small-sized vanilla candidate, and every block's cost.

Run on a CUDA machine::

    .venv/bin/python benchmarks/gpu_mfu.py            # writes the gpu section of docs/BENCHMARKS.md

1. Vanilla (d_model 768, 12 layers, 12 heads, T 1024, byte vocabulary), bf16
   autocast, the evaluator's own training step (``evaluators.lm.TrainStep``),
   eager and under ``torch.compile``: tokens/s and model FLOPs utilisation
   (analytic training FLOPs per token from ``nas.compute`` x tokens/s / peak).
2. Every attention block at T 1024 and 2048 (d_model 768, 4 layers, batch 8):
   training tokens/s relative to ``mha`` in the same run.

Peak bf16 dense FLOP/s: H100 SXM 989e12, H100 PCIe 756e12, H200 989e12, A100 312e12
(``--peak`` overrides).  Without CUDA it says so and exits 2.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import nas  # noqa: E402
from benchmarks._doc import command, write_section  # noqa: E402
from evaluators.lm import TrainStep  # noqa: E402
from nas.spec.training import TrainRecipe  # noqa: E402

PEAKS = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12}


def peak_flops(name: str) -> float | None:
    for key, value in PEAKS.items():
        if key in name:
            return value
    return None


def arch_for(block: str, d: int, layers: int, heads: int, T: int) -> nas.ArchConfig:
    att: dict = {"type": block}
    if block == "mixture":
        att["components"] = ["mha", "synth_random"]
    if block == "synth_factorized_dense":
        att.update(a=32, b=(T + 31) // 32)
    layer = {"repeat": layers, "attention": att, "ffn": "relu"}
    return nas.ArchConfig.from_dict({"d_model": d, "n_heads": heads, "max_len": T, "layers": layer})


def gemm_flops_per_s(n: int = 8192, reps: int = 10) -> float:
    """What this GPU reaches on one large bf16 matrix product: the practical ceiling of any MFU."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def tokens_per_s(arch: nas.ArchConfig, batch: int, steps: int, compile_model: bool = False) -> float:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = nas.build_model(arch).to(dev)
    if compile_model:
        model = torch.compile(model)
    step = TrainStep(model, TrainRecipe(batch_size=batch), dev)
    x = torch.randint(0, 256, (batch, arch.max_len), device=dev)
    y = torch.randint(0, 256, (batch, arch.max_len), device=dev)
    for _ in range(5 if not compile_model else 8):  # warm-up (and compilation)
        step(x, y)
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(x, y)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    del model, step
    torch.cuda.empty_cache()
    return steps * batch * arch.max_len / statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peak", type=float, default=None, help="peak bf16 FLOP/s of the GPU")
    ap.add_argument("--batches", default="16,32", help="batch sizes of the vanilla rows (default 16,32)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_mfu.py needs a CUDA GPU; none is visible here", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True
    name = torch.cuda.get_device_name()
    peak = args.peak or peak_flops(name)
    gemm = gemm_flops_per_s()
    lines = [
        "## GPU (`benchmarks/gpu_mfu.py`)",
        "",
        f"{name}, torch {torch.__version__}, CUDA {torch.version.cuda}; measured "
        f"{datetime.date.today().isoformat()}; command `{command()}`. bf16 autocast, the evaluator's "
        "training step (forward, backward, clipping, fused AdamW); MFU = analytic training FLOPs per token "
        f"(`nas.compute`, full T x T attention) x tokens/s / peak ({peak:.3g} FLOP/s dense bf16)."
        if peak
        else f"{name}: unknown peak, pass --peak.",
        "",
        "",
        f"A {8192}^3 bf16 matrix product on this GPU reaches {gemm / 1e12:.0f} TFLOP/s; the last column is "
        "the share of that.",
        "",
        "| vanilla d768 L12 T1024 | batch | tokens/s | MFU | of GEMM peak |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    vanilla = arch_for("mha", 768, 12, 12, 1024)
    flops = nas.compute(vanilla).train_flops_per_token
    modes = [("eager", False)] + ([] if args.skip_compile else [("torch.compile", True)])
    for label, comp in modes:
        for batch in (int(b) for b in args.batches.split(",")):
            tps = tokens_per_s(vanilla, batch, args.steps, comp)
            mfu = f"{tps * flops / peak:.1%}" if peak else "-"
            lines.append(f"| {label} | {batch} | {tps:,.0f} | {mfu} | {tps * flops / gemm:.1%} |")
            print(lines[-1], flush=True)
    lines += ["", "Every block, d_model 768, 4 layers, 12 heads, batch 8, eager, relative to `mha` "
              "in the same run:", "", "| block | T 1024 tokens/s | vs mha | T 2048 tokens/s | vs mha |",
              "| --- | ---: | ---: | ---: | ---: |"]
    results: dict[int, dict[str, float]] = {}
    for T in (1024, 2048):
        results[T] = {b: tokens_per_s(arch_for(b, 768, 4, 12, T), 8, args.steps)
                      for b in nas.ATTENTION.names()}
    for b in nas.ATTENTION.names():
        row = [b]
        for T in (1024, 2048):
            row += [f"{results[T][b]:,.0f}", f"{results[T][b] / results[T]['mha']:.2f}x"]
        lines.append("| " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("gpu", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
