"""Position-wise feed-forward block and its activations.

``squared_relu`` is from Primer (So et al., 2021, "Primer: Searching for
Efficient Transformers for Language Modeling"), section 3.  ``swiglu`` and
``geglu`` are gated (Shazeer, 2020, "GLU Variants Improve Transformer"):
W2 (act(W1 x) * W3 x), with SiLU or GELU as the gate's activation, as in Llama.
A gated FFN has three matrices instead of two, so its width is 2/3 of the
ungated width of the same ``mult`` (Llama's ``int(2 * 4d / 3)``, without its
rounding to a multiple of 256): the parameters and FLOPs of ``swiglu x4`` are
those of ``relu x4`` to within the rounding of one width.
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


#: gated FFNs, by name: the activation of the gate
GATED: dict[str, Callable[[Tensor], Tensor]] = {"swiglu": F.silu, "geglu": F.gelu}
for _name, _gate in GATED.items():
    ACTIVATIONS.register(_name)(_gate)


@ACTIVATIONS.register("squared_relu")
def squared_relu(x: Tensor) -> Tensor:
    return torch.square(F.relu(x))


def ffn_width(d_model: int, mult: float, activation: str = "relu") -> int:
    """Hidden width: mult x d_model, or 2/3 of it for a gated FFN (three matrices: same parameters)."""
    width = d_model * mult * (2.0 / 3.0 if activation in GATED else 1.0)
    return int(round(width))


class FeedForward(nn.Module):
    """x -> W2 act(W1 x), or gated: W2 (act(W1 x) * W3 x) (``fc_in`` holds W1 then W3); no biases."""

    param_kinds = {"fc_in.weight": "hidden", "fc_out.weight": "hidden"}  # d_model <-> mult x d_model

    def __init__(self, d_model: int, d_ff: int, activation: str) -> None:
        super().__init__()
        self.gated = activation in GATED
        self.fc_in = nn.Linear(d_model, (2 if self.gated else 1) * d_ff, bias=False)
        self.fc_out = nn.Linear(d_ff, d_model, bias=False)
        self.fc_out.residual_out = True  # type: ignore[attr-defined]  # scaled init, see model.py
        self.act = ACTIVATIONS.get(activation)

    def forward(self, x: Tensor) -> Tensor:
        if self.gated:
            gate, up = self.fc_in(x).chunk(2, dim=-1)
            return self.fc_out(self.act(gate) * up)
        return self.fc_out(self.act(self.fc_in(x)))

    @staticmethod
    def count_params(d_model: int, d_ff: int, activation: str = "relu") -> int:
        return (3 if activation in GATED else 2) * d_model * d_ff

    @staticmethod
    def count_flops(d_model: int, d_ff: int, activation: str = "relu") -> Flops:
        return Flops.dense((6.0 if activation in GATED else 4.0) * d_model * d_ff)
