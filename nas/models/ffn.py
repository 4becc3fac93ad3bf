"""Position-wise feed-forward block and its activations.

``squared_relu`` is from Primer (So et al., 2021, "Primer: Searching for
Efficient Transformers for Language Modeling"), section 3.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.models.dims import Flops
from nas.registry import Registry

ACTIVATIONS: Registry[Callable[[Tensor], Tensor]] = Registry("FFN activation")

ACTIVATIONS.register("relu")(F.relu)
ACTIVATIONS.register("gelu")(F.gelu)
ACTIVATIONS.register("silu")(F.silu)


@ACTIVATIONS.register("squared_relu")
def squared_relu(x: Tensor) -> Tensor:
    return torch.square(F.relu(x))


def ffn_width(d_model: int, mult: float) -> int:
    return int(round(d_model * mult))


class FeedForward(nn.Module):
    """x -> W2 act(W1 x); no biases."""

    def __init__(self, d_model: int, d_ff: int, activation: str) -> None:
        super().__init__()
        self.fc_in = nn.Linear(d_model, d_ff, bias=False)
        self.fc_out = nn.Linear(d_ff, d_model, bias=False)
        self.fc_out.residual_out = True  # type: ignore[attr-defined]  # scaled init, see model.py
        self.act = ACTIVATIONS.get(activation)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc_out(self.act(self.fc_in(x)))

    @staticmethod
    def count_params(d_model: int, d_ff: int) -> int:
        return 2 * d_model * d_ff

    @staticmethod
    def count_flops(d_model: int, d_ff: int) -> Flops:
        return Flops.dense(4.0 * d_model * d_ff)
