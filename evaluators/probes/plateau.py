"""The plateau statistics: the no-recall rule's accuracy, and how far a recall score rose above it."""

from __future__ import annotations

import math
from typing import Any

import torch

from evaluators.probes.base import IGNORE


def frequent_value_accuracy(
    x: torch.Tensor, y: torch.Tensor, *, vocab: int = 16, noise_vocab: int = 0, **_: Any
) -> float:
    """The accuracy on a recall test set of a rule that cannot recall: at each scored position, the
    value token seen most often so far in the sequence (ties: the lowest), whatever the key.

    It is the plateau a model sits on before it learns to look a key up (about 0.31 on
    ``in_context_recall``): a recall accuracy not above it did not recall anything.
    """
    real = vocab - noise_vocab
    low = real // 2
    correct = total = 0
    for xs, ys in zip(x.tolist(), y.tolist(), strict=True):
        counts = [0] * (real - low)
        for token, target in zip(xs, ys, strict=True):
            if low <= token < real:
                counts[token - low] += 1
            if target != IGNORE:
                correct += int(low + max(range(len(counts)), key=lambda i: (counts[i], -i)) == target)
                total += 1
    return correct / max(total, 1)


def above_plateau(acc: float, plateau: float, n: int) -> float:
    """How far ``acc`` rose from the no-recall ``plateau`` towards 1, as a share of the way (0 when not
    above it by more than two standard errors of an accuracy over ``n`` scored positions: noise)."""
    margin = 2.0 * math.sqrt(max(plateau * (1.0 - plateau), 1e-12) / max(n, 1))
    if acc <= plateau + margin or plateau >= 1.0:
        return 0.0
    return (acc - plateau) / (1.0 - plateau)
