"""Transformer++'s missing MFU: the rotary embedding's backward under torch.compile, form by form.

On the H200 (docs/BENCHMARKS.md, "The second H200 session") one fused Triton kernel, the rotary
backward fused with the concatenation of the Q, K and V gradients, takes 7.2 ms of a 53.4 ms
Transformer++ step, where vanilla's kernel that only concatenates the three gradients takes 0.85 ms
over the same bytes: closing it alone would bring Transformer++ from 40% to about 45% MFU.  This
script times the attention half of one Transformer++ layer (QKV projection, rotation of Q and K,
causal SDPA, output projection; bf16 autocast, fp32 weights, as the trainer runs it) compiled as
one function, forward and backward, for each form of the rotation:

- ``none``: no rotation (the floor: vanilla's attention half)
- ``tokens``: ``nas.models.rotary.rotate_tokens`` as the model runs it (token-major, the float64
  tables cast on every call)
- ``heads``: the same rotation on the (B, H, T, dh) view (the form before ``rotate_tokens``)
- ``tables``: ``tokens`` with the tables cast to the compute dtype once, outside the graph
- ``inverse``: a ``torch.autograd.Function`` whose backward is the inverse rotation written out
  (the gradient turned by -angle), so the backward graph holds no ``slice_scatter`` of zeros

Per form: milliseconds per forward and backward (median of three runs of ``--steps``), the three
largest GPU kernels of a profiled step, and the largest difference of output and gradients from
``tokens``.  ``--code FILE`` writes inductor's generated code (forward and backward) of every form.  On a
CPU only ``--check`` runs (eager, small): every form against ``tokens``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import Tensor  # noqa: E402

from nas.models.rotary import rotary_tables, rotate, rotate_tokens  # noqa: E402


class InverseTurn(torch.autograd.Function):
    """The rotation with its backward written out: for y = x cos + R(x) sin (R(x) = [-x2, x1], and
    sin equal on both halves) the gradient is g cos - R(g) sin, the same rotation by -angle.  The
    tables are (T, dh), already in the input's dtype (``rotate_tokens``' cast is then no copy)."""

    @staticmethod
    def forward(ctx, x: Tensor, c: Tensor, s: Tensor, d_head: int) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(c, s)
        ctx.d_head = d_head
        return rotate_tokens(x, c, s, d_head)

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        c, s = ctx.saved_tensors
        return rotate_tokens(g, c, -s, ctx.d_head), None, None, None


FORMS = ("none", "tokens", "heads", "tables", "inverse")


def attention_half(form: str, d_head: int, cos: Tensor, sin: Tensor) -> Callable[..., Tensor]:
    """x, W_qkv, W_out -> the attention half of a Transformer++ layer with the rotation ``form``."""

    def run(x: Tensor, w_qkv: Tensor, w_out: Tensor, cast: tuple[Tensor, Tensor]) -> Tensor:
        B, T, C = x.shape
        q, k, v = F.linear(x, w_qkv).split(C, dim=-1)
        if form in ("tokens", "tables", "inverse"):
            if form == "tokens":
                q, k = rotate_tokens(q, cos, sin, d_head), rotate_tokens(k, cos, sin, d_head)
            elif form == "tables":
                q, k = rotate_tokens(q, *cast, d_head), rotate_tokens(k, *cast, d_head)
            else:
                q, k = InverseTurn.apply(q, *cast, d_head), InverseTurn.apply(k, *cast, d_head)
        heads = [t.view(B, T, C // d_head, d_head).transpose(1, 2) for t in (q, k, v)]
        if form == "heads":
            heads[0], heads[1] = rotate(heads[0], cos, sin), rotate(heads[1], cos, sin)
        y = F.scaled_dot_product_attention(*heads, is_causal=True)
        return F.linear(y.transpose(1, 2).reshape(B, T, C), w_out)

    return run


def setup(B: int, T: int, d: int, heads: int, device: str, dtype: torch.dtype) -> dict:
    g = torch.Generator(device=device).manual_seed(0)
    d_head = d // heads
    cos, sin = (t.to(device) for t in rotary_tables(T, d_head, 10000.0))
    return {
        "x": torch.randn(B, T, d, device=device, generator=g).requires_grad_(),
        "w_qkv": (torch.randn(3 * d, d, device=device, generator=g) / d**0.5).requires_grad_(),
        "w_out": (torch.randn(d, d, device=device, generator=g) / d**0.5).requires_grad_(),
        "grad": torch.randn(B, T, d, device=device, generator=g),
        "cast": (cos.to(dtype), sin.to(dtype)),  # the tables cast once, outside the graph
        "cos": cos,
        "sin": sin,
        "d_head": d_head,
        "device": device,
        "dtype": dtype,
    }


def one_step(fn: Callable[..., Tensor], s: dict) -> tuple[Tensor, list[Tensor]]:
    """One forward and backward; the output and the gradients of x and both weights."""
    leaves = [s["x"], s["w_qkv"], s["w_out"]]
    for t in leaves:
        t.grad = None
    with torch.autocast(s["device"], dtype=s["dtype"], enabled=s["dtype"] != torch.float32):
        y = fn(s["x"], s["w_qkv"], s["w_out"], s["cast"])
    y.backward(s["grad"].to(y.dtype))
    return y.detach().float(), [t.grad.detach().float().clone() for t in leaves]  # type: ignore[union-attr]


def differences(fn: Callable[..., Tensor], ref: tuple[Tensor, list[Tensor]], s: dict) -> float:
    """The largest difference from the reference, relative to the reference's largest magnitude."""
    y, grads = one_step(fn, s)
    worst = 0.0
    for a, b in zip([y, *grads], [ref[0], *ref[1]], strict=True):
        worst = max(worst, float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)))
    return worst


def check(s: dict, forms: list[str], compile_: bool) -> dict[str, float]:
    """Every rotating form against ``tokens``, eager or compiled."""
    ref = one_step(attention_half("tokens", s["d_head"], s["cos"], s["sin"]), s)
    out = {}
    for form in forms:
        if form == "none":
            continue
        fn = attention_half(form, s["d_head"], s["cos"], s["sin"])
        out[form] = differences(torch.compile(fn) if compile_ else fn, ref, s)
    return out


def timed_ms(fn: Callable[..., Tensor], s: dict, steps: int) -> float:
    for _ in range(3):
        one_step(fn, s)
    torch.cuda.synchronize()
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            one_step(fn, s)
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0) / steps * 1e3)
    return statistics.median(runs)


def top_kernels(fn: Callable[..., Tensor], s: dict, n: int = 3) -> list[tuple[str, float]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            one_step(fn, s)
        torch.cuda.synchronize()
    rows = []
    for evt in prof.key_averages():
        us = getattr(evt, "self_device_time_total", 0) or getattr(evt, "self_cuda_time_total", 0)
        if us and evt.device_type == torch.autograd.DeviceType.CUDA:
            rows.append((evt.key, us / 3e3))
    return sorted(rows, key=lambda r: -r[1])[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forms", default=",".join(FORMS), help=f"comma-separated, of {', '.join(FORMS)}")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per run")
    ap.add_argument("--code", type=Path, default=None, help="append every form's inductor code here")
    ap.add_argument("--check", action="store_true", help="only compare the forms (runs on a CPU, small)")
    args = ap.parse_args()
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    if not forms or any(f not in FORMS for f in forms):
        print(f"--forms takes {', '.join(FORMS)}; got {args.forms!r}", file=sys.stderr)
        return 2
    if args.check:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        s = setup(2, 64, 128, 4, device, torch.float32)
        for form, diff in check(s, forms, compile_=False).items():
            print(f"{form}: largest relative difference from tokens {diff:.2e} (eager, float32, {device})")
        return 0
    if not torch.cuda.is_available():
        print("gpu_rotary.py times CUDA kernels; none is visible (--check runs on a CPU)", file=sys.stderr)
        return 2
    s = setup(args.batch, args.seq, args.d_model, args.heads, "cuda", torch.bfloat16)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; B {args.batch}, T {args.seq}, "
          f"d {args.d_model}, {args.heads} heads, bf16 autocast; compiled forward and backward")  # fmt: skip
    print("\n| form | ms per step | vs tokens | largest difference from tokens | largest kernels (ms) |")
    print("| --- | ---: | ---: | ---: | --- |")
    diffs = check(s, forms, compile_=True)
    rows = {}
    for form in forms:
        torch.compiler.reset()
        fn = torch.compile(attention_half(form, s["d_head"], s["cos"], s["sin"]))
        if args.code is not None:
            from torch._inductor.utils import run_and_get_code

            _, code = run_and_get_code(lambda fn=fn: one_step(fn, s))
            args.code.parent.mkdir(parents=True, exist_ok=True)
            with args.code.open("a") as f:  # one file (a device call brings back few)
                f.write("".join(f"\n\n# ==== form {form}, graph {i} ====\n\n{c}" for i, c in enumerate(code)))
        rows[form] = (timed_ms(fn, s, args.steps), top_kernels(fn, s))
    base = rows.get("tokens", (None,))[0]
    for form, (ms, kernels) in rows.items():
        ratio = f"{ms / base:.2f}x" if base else "-"
        diff = f"{diffs[form]:.1e}" if form in diffs else "-"
        names = "; ".join(f"`{k[:60]}` {v:.3f}" for k, v in kernels)
        print(f"| {form} | {ms:.3f} | {ratio} | {diff} | {names} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
