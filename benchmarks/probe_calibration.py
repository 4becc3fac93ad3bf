#!/usr/bin/env python
"""Does the probe suite separate mixers?  In-context recall over training steps, ``mha`` against
``synth_fixed_random`` (a mixer whose weights ignore the tokens, which cannot recall).

A 2-layer, width-64 LM of each block (4 heads, ReLU FFN) trains on the ``in_context_recall`` probe
(``evaluators.probes``) for each step count; the table gives the test accuracy.  Several minutes on
one thread; it prints the table and replaces the ``probe_calibration`` section of docs/BENCHMARKS.md
(``--no-write`` leaves it alone)::

    .venv/bin/python benchmarks/probe_calibration.py [--steps 500,1500,3000] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402
import torch  # noqa: E402

import nas  # noqa: E402
from evaluators.probes import ProbeEvaluator  # noqa: E402

BLOCKS = ("mha", "synth_fixed_random")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", default="500,1500,3000")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for steps in (int(s) for s in args.steps.split(",")):
        row: list[object] = [steps]
        for block in BLOCKS:
            layers = {"repeat": 2, "attention": block, "ffn": "relu"}
            arch = nas.ArchConfig.from_dict({"d_model": 64, "n_heads": 4, "max_len": 64, "layers": layers})
            t0 = time.perf_counter()
            ev = ProbeEvaluator("in_context_recall", steps=steps, batch_size=64, device="cpu")
            score = ev.evaluate(arch).extra["probe_in_context_recall_accuracy"]  # raw: the table's column
            row += [f"{score:.3f}", f"{time.perf_counter() - t0:.0f}"]
            print(f"{block} {steps} steps: {score:.3f}", file=sys.stderr)
        rows.append(row)
    body = "\n".join(
        [
            "## Probe calibration (`benchmarks/probe_calibration.py`)",
            "",
            _doc.provenance(args.threads),
            "",
            "In-context recall (`evaluators.probes`, batch 64) of a 2-layer, width-64 LM of each block: "
            "attention should leave the plateau of about 0.31 (the most frequent value in context), a "
            "fixed random synthesizer should not.",
            "",
            _doc.markdown_table(["steps", "mha accuracy", "s", "synth_fixed_random accuracy", "s"], rows),
        ]
    )
    print(body)
    if not args.no_write:
        _doc.write_section("probe_calibration", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
