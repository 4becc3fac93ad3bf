"""Validation: the loss on a fixed slice of held-out text (or the first held-out pairs of a parallel corpus)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from evaluators.base import Diverged
from evaluators.step import autocast_for
from nas.data import validation_batches


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


class Validation:
    """The same ``n_windows`` windows (examples) of ``seq_len`` tokens for every evaluation of a run."""

    def __init__(
        self, corpus: Any, n_windows: int, seq_len: int, batch_size: int, device: torch.device
    ) -> None:
        self.x, self.y = (t.to(device) for t in validation_batches(corpus, n_windows, seq_len))
        self.batch_size = batch_size
        self.device = device

    def loss(self, model: nn.Module, step: int) -> float:
        """The validation loss after ``step`` steps; raises :class:`Diverged` when it is not finite."""
        value = evaluate_loss(model, self.x, self.y, self.batch_size, self.device)
        if not math.isfinite(value):
            raise Diverged(f"validation loss is {value} at step {step}")
        return value
