#!/usr/bin/env python
"""The mixture's fused path (SDPA with a float mask) against its written-out logits, on CPU.

One ``mixture`` block, d_model 256, 4 heads, batch 8, T 512 (``--seq-len``), fp32, forward plus
backward, for a few component mixes, through ``Mixture.fused`` (the default whenever every
input-dependent part is a dot product) and through ``Mixture.unfused`` (``fuse = False``: the
logits summed into one (B, H, T, T) tensor, the path before).  Each (mix, path) runs in a fresh
process, ``--rounds`` times in alternating order: peak memory is the rise of the process's peak
resident set over its first step (buffers this large come from the operating system and go back
to it, so the peak resident set follows the peak of live tensors); tokens/s is the median over
every round's ``--repeats`` timed steps, after two warm-up steps.  Run::

    .venv/bin/python benchmarks/fused_mixture.py [--seq-len 512] [--threads 2]

It prints a markdown table and replaces its own section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _doc import markdown_table, median, provenance, write_section  # noqa: E402

SECTION = "fused_mixture"
BATCH, D_MODEL, HEADS = 8, 256, 4
MIXES = {
    "mha + synth_random, learned": {"components": ["mha", "synth_random"]},
    "mha + synth_fixed_random, fixed 0.5/0.5": {
        "components": ["mha", "synth_fixed_random"],
        "weights": [0.5, 0.5],
    },
    "mha + synth_dense, learned": {"components": ["mha", "synth_dense"]},
    "mdha + synth_factorized_random, learned": {"components": ["mdha", "synth_factorized_random"]},
}


def measure(mix: str, fuse: bool, T: int, repeats: int, threads: int) -> dict[str, object]:
    """Peak memory of the first step and the time of ``repeats`` more; run in a fresh process."""
    import resource
    import time

    import torch

    from nas.models.attention.base import FFNSpec
    from nas.models.attention.mixture import Mixture, MixtureOptions
    from nas.models.dims import Dims

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    block = Mixture(Dims(D_MODEL, HEADS, T), MixtureOptions.parse(MIXES[mix]), ffn=FFNSpec("relu", 4.0))
    block.fuse = fuse
    x = torch.randn(BATCH, T, D_MODEL, requires_grad=True)

    def step() -> None:
        block.zero_grad(set_to_none=True)
        x.grad = None
        block(x).square().mean().backward()

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"peak_mib": peak_kib / 1024, "times": times}


def in_child(mix: str, fuse: bool, args: argparse.Namespace) -> dict:
    code = (
        f"import json, sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'benchmarks')!r}]\n"
        "from fused_mixture import measure\n"
        f"print(json.dumps(measure({mix!r}, {fuse}, {args.seq_len}, {args.repeats}, {args.threads})))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    times: dict[tuple[str, bool], list[float]] = {}
    peaks: dict[tuple[str, bool], list[float]] = {}
    for r in range(args.rounds):
        for mix in MIXES:
            for fuse in (False, True) if r % 2 == 0 else (True, False):
                got = in_child(mix, fuse, args)
                times.setdefault((mix, fuse), []).extend(got["times"])
                peaks.setdefault((mix, fuse), []).append(got["peak_mib"])
                print(f"{mix} fuse={fuse}: {got}", file=sys.stderr, flush=True)
    rows = []
    tokens = BATCH * args.seq_len
    for mix in MIXES:
        before, after = (tokens / median(times[mix, f]) for f in (False, True))
        mem_before, mem_after = (median(peaks[mix, f]) for f in (False, True))
        rows.append([mix, f"{before:,.0f}", f"{after:,.0f}", f"{after / before:.2f}x",
                     f"{mem_before:,.0f}", f"{mem_after:,.0f}"])  # fmt: skip
    table = markdown_table(
        [
            "mixture",
            "written-out tokens/s",
            "fused tokens/s",
            "speed",
            "written-out peak MiB",
            "fused peak MiB",
        ],
        rows,
        "lrrrrr",
    )
    body = (
        "## The mixture's fused path (`benchmarks/fused_mixture.py`)\n\n"
        f"{provenance(args.threads)}\n\n"
        f"One `mixture` block, d_model {D_MODEL}, {HEADS} heads, batch {BATCH}, T {args.seq_len}, fp32, "
        "forward and backward; each row's two paths in fresh processes, alternating order, "
        f"{args.rounds} x {args.repeats} timed steps each. *Peak MiB*: the rise of the process's peak "
        "resident set over its first step.\n\n" + table
    )
    print(body)
    if not args.no_write:
        write_section(SECTION, body)


if __name__ == "__main__":
    main()
