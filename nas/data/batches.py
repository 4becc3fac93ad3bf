"""Training batches and the fixed validation slice, for byte and token corpora alike."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from nas.errors import UserError


def _unit(data: Tensor) -> str:
    """What ``data`` counts: bytes (a text corpus, uint8) or tokens."""
    return "bytes" if data.dtype == torch.uint8 else "tokens"


def get_batch(
    data: Tensor, batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Random (x, y) training windows: x (B, T) int64 and y = x shifted by one, drawn from ``generator``.

    ``data`` may be a memory-mapped token file: ``unfold`` is a view of every
    window (no copy) and ``index_select`` copies the B chosen rows in one call,
    several times faster than gathering B * (T + 1) single indices, and only the
    pages under those rows are read.
    """
    n_starts = len(data) - seq_len
    if n_starts < 1:
        raise UserError(
            f"the training data ({len(data)} {_unit(data)}) is shorter than one window of {seq_len + 1}"
        )
    starts = torch.randint(n_starts, (batch_size,), generator=generator)
    window = data.unfold(0, seq_len + 1, 1).index_select(0, starts).long()  # (B, T + 1)
    return window[:, :-1].contiguous(), window[:, 1:].contiguous()


def validation_windows(data: Tensor, n_windows: int, seq_len: int) -> tuple[Tensor, Tensor]:
    """The fixed validation slice: up to ``n_windows`` consecutive, non-overlapping windows
    from the start of ``data``, so each target token is scored once.  x, y (N, T) int64."""
    n = min(n_windows, (len(data) - 1) // seq_len)
    if n < 1:
        raise UserError(
            f"the validation data ({len(data)} {_unit(data)}) is shorter than one window of {seq_len + 1}; "
            "use a larger corpus or a smaller seq_len"
        )
    span = data[: n * seq_len + 1].long()
    return span[:-1].view(n, seq_len), span[1:].view(n, seq_len)


def decode(tokens: Tensor | Sequence[int]) -> str:
    """Bytes back to text (invalid UTF-8 replaced), for samples and debugging."""
    values = tokens.tolist() if isinstance(tokens, Tensor) else list(tokens)
    return bytes(values).decode("utf-8", errors="replace")


def encode(text: str) -> Tensor:
    """Text to its UTF-8 byte tokens, int64 (T,)."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)
