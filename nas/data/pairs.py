"""Storage for aligned (source, target) examples, and their padded rows for a batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


@dataclasses.dataclass(frozen=True, eq=False)
class Pairs:
    """The aligned examples of one split: each side's ids end to end, and where each example starts.

    Example ``i``'s source is ``src[src_offsets[i]:src_offsets[i + 1]]`` (and the
    same for the target).  Ids are uint8 for bytes, int32 for tokenizer ids: one
    tensor per side instead of a tensor per example, so a corpus of millions of
    lines is four tensors and batches gather their rows in one indexing call.
    """

    src: Tensor  # (n_src_tokens,)
    src_offsets: Tensor  # (N + 1,) int64
    tgt: Tensor  # (n_tgt_tokens,)
    tgt_offsets: Tensor  # (N + 1,) int64

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @classmethod
    def from_sequences(
        cls, srcs: Sequence[Sequence[int] | bytes], tgts: Sequence[Sequence[int] | bytes], dtype: torch.dtype
    ) -> Pairs:
        """Pairs from per-example id sequences (bytes objects for byte corpora)."""
        if len(srcs) != len(tgts):
            raise ValueError(f"{len(srcs)} sources but {len(tgts)} targets")
        return cls(*_flatten(srcs, dtype), *_flatten(tgts, dtype))

    def longest(self) -> tuple[int, int]:
        """The longest source and target in ids (a seq_len below them truncates some examples)."""
        if len(self) == 0:
            return 0, 0
        return int(self.src_offsets.diff().max()), int(self.tgt_offsets.diff().max())

    def source(self, i: int) -> list[int]:
        return self.src[self.src_offsets[i] : self.src_offsets[i + 1]].tolist()

    def target(self, i: int) -> list[int]:
        return self.tgt[self.tgt_offsets[i] : self.tgt_offsets[i + 1]].tolist()

    def fingerprint_into(self, h: Any) -> None:
        for part in (self.src_offsets, self.src, self.tgt_offsets, self.tgt):
            h.update(f"{part.dtype}:{len(part)}\n".encode())
            if len(part):
                h.update(memoryview(part.contiguous().numpy()))


def _flatten(seqs: Sequence[Sequence[int] | bytes], dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    if seqs and isinstance(seqs[0], (bytes, bytearray)):
        joined = bytearray(b"".join(seqs))  # type: ignore[arg-type]
        flat = torch.frombuffer(joined, dtype=torch.uint8) if joined else torch.empty(0, dtype=dtype)
    else:
        flat = torch.tensor([i for s in seqs for i in s], dtype=dtype)
    return flat.to(dtype), offsets


def pad_rows(flat: Tensor, offsets: Tensor, idx: Tensor, seq_len: int, shift: int, fill: int) -> Tensor:
    """(B, T) int64: the examples ``idx`` placed from column ``shift`` on, cut at T, ``fill`` elsewhere."""
    start, length = offsets[idx], offsets[idx + 1] - offsets[idx]  # (B,)
    pos = torch.arange(seq_len) - shift  # (T,) position within the example
    valid = (pos >= 0) & (pos < length[:, None])  # (B, T)
    if len(flat) == 0:
        return torch.full(valid.shape, fill, dtype=torch.int64)
    where = (start[:, None] + pos.clamp(min=0)).clamp(max=len(flat) - 1)  # in range even where not valid
    return torch.where(valid, flat[where].long(), fill)
