"""GPU efficiency: training MFU of GPT-2-small-sized candidates, where a step's time goes, every block's cost.

Run on a CUDA machine::

    python3 benchmarks/gpu_mfu.py                  # all parts; writes the gpu section of docs/BENCHMARKS.md
    python3 benchmarks/gpu_mfu.py --parts mfu --out /tmp/prof   # the MFU rows and the profile only

1. ``mfu``: vanilla (d_model 768, 12 layers, 12 heads, T 1024, ReLU FFN x4) and
   Transformer++ at the same shape (rotary, RMSNorm, SwiGLU, no biases, tied
   embeddings), byte vocabulary, bf16 autocast, the evaluator's own training step
   (``evaluators.step.TrainStep``: forward, cross-entropy, backward, clipping,
   fused AdamW).  Modes: ``eager``; ``compile model`` (``torch.compile`` of the
   model alone, the loss and the optimizer eager); ``compile step`` (the forward
   and the loss compiled as one function, as ``--compile`` trains); ``+ cudnn``
   (the same with SDPA limited to cuDNN's attention kernel).  tokens/s is the
   median of three timed runs of ``--steps`` steps after warm-up (compilation
   included in the warm-up, never in the timing).  MFU = analytic training FLOPs
   per token (``nas.compute``: 6 x matmul FLOPs of the forward pass, attention
   counted as the full T x T products as PaLM's MFU does) x tokens/s / the
   GPU's dense bf16 peak from its datasheet (``--peak`` overrides).  A large bf16
   matrix product is timed too: its share says how far the step is from what
   the GPU's matrix units give any real kernel.
2. ``profile``: ``torch.profiler`` over three steps of the compiled vanilla step
   (the best batch size above); the GPU time by kind of kernel (matrix products,
   attention forward and backward, fused pointwise/normalisation kernels,
   optimizer, other) and the ten largest kernels, written to ``--out``.
3. ``blocks``: every attention block at T 1024 and 2048 (d_model 768, 4 layers,
   12 heads, batch 8, eager), training tokens/s relative to ``mha`` in the same
   run; each block is timed for about a second per repetition.

Without CUDA it says so and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import nas  # noqa: E402
from benchmarks._doc import command, write_section  # noqa: E402
from evaluators.step import TrainStep  # noqa: E402
from nas.spec.training import TrainRecipe  # noqa: E402

PEAKS = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12}
PARTS = ("mfu", "profile", "blocks")


def peak_flops(name: str) -> float | None:
    for key, value in PEAKS.items():
        if key in name:
            return value
    return None


def arch_for(block: str, d: int, layers: int, heads: int, T: int, **top: Any) -> nas.ArchConfig:
    att: dict = {"type": block}
    if block == "mixture":
        att["components"] = ["mha", "synth_random"]
    if block == "synth_factorized_dense":
        att.update(a=32, b=(T + 31) // 32)
    ffn = top.pop("ffn", "relu")
    layer = {"repeat": layers, "attention": att, "ffn": ffn}
    return nas.ArchConfig.from_dict({"d_model": d, "n_heads": heads, "max_len": T, "layers": layer, **top})


def vanilla() -> nas.ArchConfig:
    return arch_for("mha", 768, 12, 12, 1024)


def transformer_pp() -> nas.ArchConfig:
    return arch_for(
        "mha", 768, 12, 12, 1024, pos_encoding="rope", norm="rmsnorm", tie_embeddings=True,
        ffn={"activation": "swiglu", "mult": 4},
    )  # fmt: skip


MODELS = {"vanilla": vanilla, "transformer_pp": transformer_pp}
MODES = ("eager", "compile model", "compile step", "compile step + cudnn")
ROWS = (
    "vanilla:eager:32,vanilla:compile model:32,vanilla:compile step:32,transformer_pp:compile step:32,"
    "vanilla:compile step:64,transformer_pp:compile step:64,vanilla:compile step + cudnn:32,"
    "transformer_pp:compile step + cudnn:32,transformer_pp:eager:32"
)


def parse_rows(text: str) -> list[tuple[str, str, int]]:
    """``model:mode:batch,...`` -> rows; raises ValueError naming what is wrong and what is valid."""
    rows = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        parts = item.split(":")
        if (
            len(parts) != 3
            or parts[0] not in MODELS
            or parts[1] not in MODES
            or not parts[2].isdigit()
            or int(parts[2]) < 1
        ):
            raise ValueError(
                f"--rows item {item!r}: want model:mode:batch, model one of {', '.join(MODELS)}, "
                f"mode one of {', '.join(MODES)}, batch a positive integer"
            )
        rows.append((parts[0], parts[1], int(parts[2])))
    return rows


def gemm_flops_per_s(n: int = 8192, reps: int = 20) -> float:
    """What this GPU reaches on one large bf16 matrix product (random data): the practical ceiling."""
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


def make_step(arch: nas.ArchConfig, batch: int, mode: str) -> TrainStep:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    torch.compiler.reset()  # each configuration compiles its own graph: no dynamic-shape recompiles
    model = nas.build_model(arch).to(dev)
    if mode == "compile model":
        return TrainStep(torch.compile(model), TrainRecipe(batch_size=batch), dev)
    return TrainStep(model, TrainRecipe(batch_size=batch), dev, compile=mode.startswith("compile step"))


def attention_backend(mode: str) -> contextlib.AbstractContextManager[Any]:
    if mode.endswith("+ cudnn"):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([SDPBackend.CUDNN_ATTENTION])
    return contextlib.nullcontext()


def timed(
    step: Callable[[torch.Tensor, torch.Tensor], Any],
    x: torch.Tensor,
    y: torch.Tensor,
    steps: int | None,
    warmup: int,
    seconds: float = 1.0,
    reps: int = 3,
) -> float:
    """Median seconds per step: ``steps`` per repetition, or as many as fill about ``seconds``."""
    for _ in range(warmup):
        step(x, y)
    torch.cuda.synchronize()
    if steps is None:
        t0 = time.perf_counter()
        step(x, y)
        torch.cuda.synchronize()
        steps = max(1, int(seconds / max(time.perf_counter() - t0, 1e-4)))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(x, y)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def batch_of(arch: nas.ArchConfig, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randint(0, arch.vocab_size, (batch, arch.max_len + 1), device="cuda", generator=g)
    return x[:, :-1].contiguous(), x[:, 1:].contiguous()


def mfu_rows(args: argparse.Namespace, peak: float | None, gemm: float, lines: list[str]) -> None:
    """Measure every (model, mode, batch) row of ``--rows``, and profile each compiled step at batch 32."""
    found: list[str] = []
    for name, mode, batch in args.rows:
        arch = MODELS[name]()
        flops = nas.compute(arch).train_flops_per_token
        t0 = time.perf_counter()
        try:
            with attention_backend(mode):
                step = make_step(arch, batch, mode)
                x, y = batch_of(arch, batch)
                per_step = timed(step, x, y, args.steps, warmup=3 if mode == "eager" else 6)
        except Exception as err:  # noqa: BLE001 - a row that cannot run says why and the table goes on
            lines.append(f"| {name} | {mode} | {batch} | failed: {type(err).__name__}: {str(err)[:80]} | | |")
            print(lines[-1], flush=True)
            continue
        tps = batch * arch.max_len / per_step
        mfu = f"{tps * flops / peak:.1%}" if peak else "-"
        lines.append(f"| {name} | {mode} | {batch} | {tps:,.0f} | {mfu} | {tps * flops / gemm:.1%} |")
        print(lines[-1], f"({time.perf_counter() - t0:.0f} s with compilation)", flush=True)
        if args.profile and (mode, batch) == ("compile step", 32):
            profiled = {"name": name, "mode": mode, "batch": batch, "step": step, "x": x, "y": y}
            try:  # at once: a stage cut short by its time limit still has it
                profile(profiled, args, found)
            except Exception as err:  # noqa: BLE001 - the MFU rows go on without the profile
                found.append(f"profile failed: {type(err).__name__}: {err}")
                print(found[-1], flush=True)
            profiled.clear()
        del step
        torch.cuda.empty_cache()
    lines += found


KINDS = (
    ("attention backward", ("flash_bwd", "attention_backward", "fmha_bwd", "dgrad", "bprop", "_bwd_")),
    ("attention forward", ("flash_fwd", "fmha", "attention", "cudnn", "flash")),
    ("matrix products", ("gemm", "cutlass", "xmma", "nvjet", "sm90_", "wgmma", "cublas")),
    ("optimizer and clipping", ("adam", "multi_tensor", "foreach", "norm_kernel")),
    ("fused pointwise/norm (Triton)", ("triton_",)),
)


def kind_of(kernel: str) -> str:
    low = kernel.lower()
    for kind, keys in KINDS:
        if any(k in low for k in keys):
            return kind
    return "other (eager pointwise, copies, loss)"


def profile(best: dict, args: argparse.Namespace, lines: list[str]) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    step, x, y = best["step"], best["x"], best["y"]
    with attention_backend(best["mode"]):
        for _ in range(2):
            step(x, y)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step(x, y)
            torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / 3
    kernels: dict[str, list[float]] = {}
    for evt in prof.key_averages():
        gpu_us = getattr(evt, "self_device_time_total", None) or getattr(evt, "self_cuda_time_total", 0)
        if gpu_us and evt.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(evt.key, [0.0, 0])
            kernels[evt.key][0] += gpu_us
            kernels[evt.key][1] += evt.count
    total = sum(v[0] for v in kernels.values())
    by_kind: dict[str, float] = {}
    for key, (us, _) in kernels.items():
        by_kind[kind_of(key)] = by_kind.get(kind_of(key), 0.0) + us
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / f"profile_table_{best['name']}.txt").write_text(
        prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=60)
    )
    if args.trace:  # tens of MB: only when asked
        prof.export_chrome_trace(str(out / f"profile_trace_{best['name']}.json"))
    lines += [
        "",
        f"Where the time of one step goes: `torch.profiler` over 3 steps of {best['name']}, {best['mode']}, "
        f"batch {best['batch']}: {wall * 1e3:.1f} ms per step on the wall clock, {total / 3e3:.1f} ms of GPU "
        f"kernels ({total / 3e3 / (wall * 1e3):.0%} busy).",
        "",
        "| kernels | GPU ms per step | share |",
        "| --- | ---: | ---: |",
    ]
    for kind, us in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {kind} | {us / 3e3:.2f} | {us / total:.1%} |")
    lines += [
        "",
        "The ten largest kernels:",
        "",
        "| kernel | calls per step | GPU ms per step | share |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, (us, count) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:10]:
        lines.append(f"| `{key[:90]}` | {count / 3:.0f} | {us / 3e3:.2f} | {us / total:.1%} |")
    print("\n".join(lines[-22:]), flush=True)


def block_rows(args: argparse.Namespace, lines: list[str]) -> None:
    lines += ["", "Every block, d_model 768, 4 layers, 12 heads, batch 8, bf16, eager, relative to `mha` "
              "in the same run:", "", "| block | T 1024 tokens/s | vs mha | T 2048 tokens/s | vs mha |",
              "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    results: dict[int, dict[str, float | str]] = {}
    names = [b for b in nas.ATTENTION.names() if b in args.blocks or b == "mha"]
    for T in (1024, 2048):
        results[T] = {}
        for b in names:
            arch = arch_for(b, 768, 4, 12, T)
            try:
                step = make_step(arch, 8, "eager")
                x, y = batch_of(arch, 8)
                per_step = timed(step, x, y, None, warmup=2, seconds=args.block_seconds)
                results[T][b] = 8 * T / per_step
            except Exception as err:  # noqa: BLE001
                results[T][b] = f"failed: {type(err).__name__}"
            print(T, b, results[T][b], flush=True)
            step = None  # type: ignore[assignment]
            torch.cuda.empty_cache()
    for b in names:
        row = [b]
        for T in (1024, 2048):
            v, ref = results[T][b], results[T]["mha"]
            ok = isinstance(v, float) and isinstance(ref, float)
            row += [f"{v:,.0f}" if ok else str(v), f"{v / ref:.2f}x" if ok else "-"]  # type: ignore[operator]
        lines.append("| " + " | ".join(row) + " |")
    print("\n".join(lines[-len(names) - 2 :]), flush=True)
    if "sliding_window" in names:
        attention_alone(lines)


def attention_alone(lines: list[str]) -> None:
    """The attention op by itself, forward and backward, bf16 (8 x 12 heads x 64 channels): cuDNN's
    causal SDPA (``mha``) against FlexAttention's band of 64 (``sliding_window``), so the block table's
    ratio can be split into the kernel's part and the rest of the layer's."""
    lines += [
        "",
        "The attention op alone (B 8, 12 heads, dh 64, bf16, forward + backward):",
        "",
        "| T | causal SDPA ms | band-64 FlexAttention ms | SDPA / Flex |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for T in (1024, 2048, 4096):
        sdpa, flex = (op_ms(kind, T) for kind in ("sdpa", "flex"))
        lines.append(f"| {T} | {sdpa:.3f} | {flex:.3f} | {sdpa / flex:.2f}x |")
        print(lines[-1], flush=True)


def op_ms(kind: str, T: int) -> float:
    """Milliseconds of one forward and backward of the attention op alone (see attention_alone)."""
    from nas.models.attention.sliding_window import band_block_mask, flex_attention

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(8, 12, T, 64, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        for _ in range(3)
    )
    mask = band_block_mask(64, T, True, q.device)

    def step(_x: Any, _y: Any) -> None:
        if kind == "sdpa":
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = flex_attention(q, k, v, mask, False)
        out.sum().backward()

    return timed(step, q, q, 20, warmup=3) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peak", type=float, default=None, help="peak dense bf16 FLOP/s of the GPU")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per repetition of an MFU row")
    ap.add_argument("--block-seconds", type=float, default=0.7, help="seconds per repetition of a block")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--out", type=Path, default=Path("gpu_profile"), help="where the profile's files go")
    ap.add_argument("--trace", action="store_true", help="also write the profile's Chrome trace")
    ap.add_argument("--doc", type=Path, default=None, help="write the section into this file instead")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--rows", default=ROWS, help="the MFU rows, model:mode:batch, comma-separated")
    ap.add_argument("--blocks", default=",".join(nas.ATTENTION.names()), help="blocks of the block table")
    args = ap.parse_args()
    try:
        args.rows = parse_rows(args.rows)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    args.blocks = [b.strip() for b in args.blocks.split(",") if b.strip()]
    unknown = [b for b in args.blocks if b not in nas.ATTENTION.names()]
    if unknown:
        known = ", ".join(nas.ATTENTION.names())
        print(f"--blocks: unknown {', '.join(unknown)}; known: {known}", file=sys.stderr)
        return 2
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if any(p not in PARTS for p in parts):
        print(f"--parts takes {', '.join(PARTS)}; got {args.parts!r}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_mfu.py needs a CUDA GPU; none is visible here", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    peak = args.peak or peak_flops(name)
    gemm = gemm_flops_per_s()
    lines = [
        "## GPU (`benchmarks/gpu_mfu.py`)",
        "",
        f"{name}, torch {torch.__version__}, CUDA {torch.version.cuda}; measured "
        f"{datetime.date.today().isoformat()}; command `{command()}`. bf16 autocast, the evaluator's "
        "training step (forward, cross-entropy, backward, clipping, fused AdamW); MFU = analytic training "
        "FLOPs per token (`nas.compute`: 6 x the forward's matmul FLOPs, full T x T attention) x tokens/s / "
        + (
            f"the datasheet's dense bf16 peak ({peak:.3g} FLOP/s)."
            if peak
            else "an unknown peak (pass --peak)."
        ),
        "",
        f"An 8192^3 bf16 matrix product on this GPU reaches {gemm / 1e12:.0f} TFLOP/s (random data); the "
        "last column is the share of that.",
    ]
    if "mfu" in parts or "profile" in parts:
        lines += [
            "",
            "| model, d768 L12 T1024 | mode | batch | tokens/s | MFU | of GEMM |",
            "| --- | --- | ---: | ---: | ---: | ---: |",
        ]
        args.profile = "profile" in parts
        mfu_rows(args, peak, gemm, lines)
    if "blocks" in parts:
        block_rows(args, lines)
    body = "\n".join(lines)
    print(body)
    if args.doc is not None:
        write_section("gpu", body, args.doc)
    elif not args.no_write:
        write_section("gpu", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
