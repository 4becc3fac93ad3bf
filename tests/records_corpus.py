"""Records corpora for tests, written by the libraries users' corpora come from: JSON Lines (plain, gzip,
zstandard), Parquet (pyarrow) and ``save_to_disk`` directories (datasets)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from synthetic_text import synthetic_text


def documents(n: int, n_words: int = 120) -> list[str]:
    """``n`` synthetic documents; a few non-ASCII characters so byte ends and UTF-8 are exercised."""
    return [synthetic_text(i, n_words) + ("Ça va, naïve café ☕.\n" if i % 3 == 0 else "") for i in range(n)]


def jsonl_bytes(records: list[Any]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def write_jsonl(path: Path, records: list[Any], compression: str = "") -> Path:
    """``records`` as JSON Lines in ``path``, compressed with ``gzip`` or ``zst`` when asked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = jsonl_bytes(records)
    if compression == "gzip":
        raw = gzip.compress(raw, mtime=0)  # the same records, the same bytes
    elif compression == "zst":
        import zstandard

        raw = zstandard.ZstdCompressor(level=3).compress(raw)
    path.write_bytes(raw)
    return path


def write_zst_shards(root: Path, texts: list[str], n_shards: int = 3, field: str = "text") -> Path:
    """``texts`` as ``n_shards`` zstd-compressed JSON Lines shards (record order kept across shards)."""
    per = -(-len(texts) // n_shards)
    for k in range(n_shards):
        part = [{"id": i, field: t} for i, t in enumerate(texts[k * per : (k + 1) * per], start=k * per)]
        write_jsonl(root / f"shard-{k:03d}.jsonl.zst", part, "zst")
    return root


def write_parquet(path: Path, columns: dict[str, Any], row_group_size: int | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def write_hf(path: Path, texts: list[str], field: str = "text") -> Path:
    """A ``datasets`` ``save_to_disk`` directory of ``texts`` (two shards: its files are read in order)."""
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_dict({field: texts, "n": list(range(len(texts)))}).save_to_disk(
        str(path), num_shards=2
    )
    return path
