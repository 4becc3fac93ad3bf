#!/usr/bin/env python
"""How fast random training windows come out of a memory-mapped token file.

Writes a uint16 token file of ``--mb`` MB (random ids below 50,257, GPT-2's
vocabulary) with ``nas.data.write_token_dir``, opens it with ``load_corpus``
(memory-mapped; the load time and the resident memory it adds show that it is
not read whole), then times ``get_batch`` for batches of 16, 32 and 64 windows
of T 1024, against the gather ``get_batch`` used before (B x (T + 1) single
indices).  Every batch is what the trainer gets: x and y, int64, contiguous.
The file was just written, so its pages are in the page cache: the numbers are
the sampler's, not the disk's.  The target is 10M tokens/s (a 125M-parameter
model on an H100 trains on about 1M tokens/s).  Run::

    .venv/bin/python benchmarks/data_throughput.py [--mb 300] [--batches 200] [--no-write]

It prints a markdown table and replaces its own section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _doc import markdown_table, median, provenance, write_section  # noqa: E402

from nas.data import get_batch, load_corpus, write_token_dir  # noqa: E402

SECTION = "data_throughput"
T = 1024
BATCHES = (16, 32, 64)
VOCAB = 50_257
TARGET = 10e6


def previous_gather(data: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator):
    """``get_batch`` before token files: one index per token of every window."""
    starts = torch.randint(len(data) - seq_len, (batch_size,), generator=generator)
    window = data[starts[:, None] + torch.arange(seq_len + 1)].long()
    return window[:, :-1].contiguous(), window[:, 1:].contiguous()


def tokens_per_s(sample, data: torch.Tensor, batch: int, n: int, repeats: int) -> list[float]:
    rates = []
    gen = torch.Generator().manual_seed(0)
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            x, _ = sample(data, batch, T, gen)
        rates.append(n * x.numel() / (time.perf_counter() - t0))
    return rates


def anonymous_mb() -> float:
    """Private memory of this process (RssAnon): what reading a file into memory would grow.

    Mapped file pages that batches touch show up in RssFile instead: page cache,
    shared and reclaimable.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1e3
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=300, help="size of train.bin in MB (default 300)")
    ap.add_argument("--batches", type=int, default=200, help="batches per timed repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = ap.parse_args()
    torch.set_num_threads(1)  # what one trial's data loading has; the sampler is memory-bound anyway
    with tempfile.TemporaryDirectory(prefix="nas-data-bench-") as tmp:
        n = args.mb * 1_000_000 // 2
        rng = np.random.default_rng(0)
        write_token_dir(
            Path(tmp) / "tok",
            rng.integers(0, VOCAB, n, dtype=np.uint16),
            rng.integers(0, VOCAB, 100_000, dtype=np.uint16),
            VOCAB,
        )
        before = anonymous_mb()
        t0 = time.perf_counter()
        corpus = load_corpus(Path(tmp) / "tok")
        load_s = time.perf_counter() - t0
        added = anonymous_mb() - before
        rows, results = [], {}
        for batch in BATCHES:
            for name, fn in (("get_batch", get_batch), ("previous gather", previous_gather)):
                rates = tokens_per_s(fn, corpus.train, batch, args.batches, args.repeats)
                results[(batch, name)] = rates
                rows.append(
                    (f"{batch} x {T}", name, f"{median(rates) / 1e6:,.1f}M", f"{max(rates) / 1e6:,.1f}M")
                )
        del corpus
    table = markdown_table(("batch", "sampler", "median tokens/s", "best tokens/s"), rows, "llrr")
    worst = min(median(results[(b, "get_batch")]) for b in BATCHES)
    verdict = "meets" if worst >= TARGET else "misses"
    body = "\n\n".join(
        [
            "## Data loading: windows from a memory-mapped token file (`benchmarks/data_throughput.py`)",
            f"A {args.mb} MB uint16 `train.bin` ({n:,} random ids, vocabulary {VOCAB:,}), opened with "
            f"`load_corpus` in {load_s * 1e3:.0f} ms (meta checks, id sample, fingerprint), adding "
            f"{added:.0f} MB of private memory (RssAnon): the file is mapped, not read. Random windows of T "
            f"{T} drawn with `get_batch` (x and y, int64) on one thread, {args.repeats} repeats of "
            f"{args.batches} batches; the file's pages are in the page cache (it was just written). "
            f"{provenance(threads=1)}",
            table,
            f"The slowest batch size gives {worst / 1e6:,.0f}M tokens/s: it {verdict} the 10M tokens/s "
            "target (a 125M-parameter model on an H100 trains on about 1M tokens/s). *previous gather* is "
            "the sampler before token files (one index per token); `get_batch` now copies whole rows of an "
            "`unfold` view with one `index_select`, and gives the same batches.",
        ]
    )
    print(body)
    if not args.no_write:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
