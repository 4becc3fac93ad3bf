"""Validation: the loss on a fixed slice of held-out text (or the first held-out pairs of a
parallel corpus), and a seq2seq model's greedy decodings of a few of them."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from evaluators.base import Diverged
from evaluators.step import autocast_for
from nas.data import scored_bytes_per_token, validation_batches


@torch.no_grad()
def evaluate_loss(model: nn.Module, x: Tensor, y: Tensor, batch_size: int, device: torch.device) -> float:
    """Mean cross-entropy (nats per token) over the fixed validation windows.

    Targets of -100 (a seq2seq target's padding) are not tokens: they are left out of
    the sum and of the count.
    """
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    for i in range(0, len(x), batch_size):
        with autocast_for(device):
            logits = model(x[i : i + batch_size])
        total += F.cross_entropy(
            logits.float().view(-1, logits.size(-1)), y[i : i + batch_size].reshape(-1), reduction="sum"
        ).double()
    model.train(was_training)
    return float(total.item()) / int((y != -100).sum())


#: validation pairs ``train`` decodes greedily after training a seq2seq model (Result.extra["samples"])
N_SAMPLES = 3


@torch.no_grad()
def greedy_samples(
    model: nn.Module, corpus: Any, seq_len: int, device: torch.device, k: int = N_SAMPLES
) -> list[dict[str, str]]:
    """The first ``k`` validation pairs of a parallel corpus with the model's greedy output:
    ``[{"source", "target", "output"}]``, so a user sees what the model does."""
    from nas.models import greedy_decode

    pairs = corpus.samples(k)
    if not pairs:
        return []
    rows = [corpus.encode(src)[:seq_len] for src, _ in pairs]
    # padded to seq_len as in training: the encoder's blocks see the padding, and a model may lean on it
    src = torch.full((len(rows), seq_len), corpus.pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        src[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    with autocast_for(device):
        outputs = greedy_decode(model, src.to(device), corpus.bos_id, corpus.eos_id, max_new=seq_len)
    return [
        {"source": s, "target": t, "output": corpus.decode(o)}
        for (s, t), o in zip(pairs, outputs, strict=True)
    ]


class Validation:
    """The same ``n_windows`` windows (examples) of ``seq_len`` tokens for every evaluation of a run."""

    def __init__(
        self, corpus: Any, n_windows: int, seq_len: int, batch_size: int, device: torch.device
    ) -> None:
        x, y = validation_batches(corpus, n_windows, seq_len)
        #: bytes of text per scored target of these windows: the loss / ln 2 / this is bits per byte
        self.bytes_per_token = scored_bytes_per_token(corpus, y)
        self.x, self.y = x.to(device), y.to(device)
        self.batch_size = batch_size
        self.device = device

    def loss(self, model: nn.Module, step: int) -> float:
        """The validation loss after ``step`` steps; raises :class:`Diverged` when it is not finite."""
        value = evaluate_loss(model, self.x, self.y, self.batch_size, self.device)
        if not math.isfinite(value):
            raise Diverged(f"validation loss is {value} at step {step}")
        return value
