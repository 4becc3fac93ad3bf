"""The compression task: its generator and the bottleneck model it is trained through.

As implemented (MAD's baseline in parentheses; ``T`` = model input length):

``compression``: vocab 16 (content 0-14, compression token 15); 31 random tokens then the
  compression token (T = 32); the target is the whole input.  As MAD, through a bottleneck: the
  candidate encodes, its last position's state is pooled and a fixed-shape decoder
  (:class:`BottleneckAutoencoder`) reconstructs every position from it, so nothing can be copied.
  (MAD: the same baseline, length 32, vocab 16.)
"""

from __future__ import annotations

import numpy as np
import torch

from evaluators.probes.base import Instance
from nas.models import ArchConfig, build_model


def compression_instance(
    rng: np.random.Generator, train: bool, *, vocab: int = 16, seq_len: int = 32
) -> Instance:
    """``seq_len - 1`` random tokens and the compression token; the target is the whole input (as MAD).

    The model that reads it is a :class:`BottleneckAutoencoder`: every target is decoded from the
    last position's state alone, so nothing can be copied from the input.
    """
    x = rng.integers(0, vocab - 1, size=seq_len - 1)
    seq = np.concatenate([x, [vocab - 1]]).astype(np.int64)
    return seq, seq.copy()


class BottleneckAutoencoder(torch.nn.Module):
    """MAD's compression model: the candidate's LM as the encoder, pooled at its last position, and a
    small decoder of MAD's shape that reconstructs every position from that one vector.

    The decoder (not the candidate's: the same for every architecture) adds a fixed sinusoidal
    embedding of each output position to the pooled state, then LayerNorm, Linear(d, d), GELU twice,
    a LayerNorm and Linear(d, vocab).  Each output sees the input only through the pooled state:
    a mixer that copies tokens cannot solve the task, one that packs the sequence into the last
    position's state can.  The candidate's LM head is not used (it gets no gradient).
    """

    def __init__(self, arch: ArchConfig) -> None:
        super().__init__()
        from nas.models.model import init_gpt2, sinusoidal_table

        d = arch.d_model
        self.lm = build_model(arch)
        self.register_buffer("positions", sinusoidal_table(arch.max_len, d), persistent=False)
        self.decoder = torch.nn.Sequential(
            torch.nn.LayerNorm(d),
            torch.nn.Linear(d, d),
            torch.nn.GELU(),
            torch.nn.LayerNorm(d),
            torch.nn.Linear(d, d),
            torch.nn.GELU(),
            torch.nn.LayerNorm(d),
            torch.nn.Linear(d, arch.vocab_size),
        )
        init_gpt2(self.decoder, 1)

    def encode(self, idx: torch.Tensor) -> torch.Tensor:
        """The last position's state, (B, d): all that the decoder sees."""
        return self.lm.hidden(idx)[:, -1]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pooled = self.encode(idx)
        return self.decoder(pooled[:, None, :] + self.positions[: idx.size(1)].to(pooled.dtype))

    @staticmethod
    def extra_train_flops_per_token(arch: ArchConfig) -> float:
        """The decoder's training FLOPs per output position beyond the LM head it replaces (two d x d
        matrices, forward and backward: 3 x 2 x 2 d^2)."""
        return 12.0 * arch.d_model * arch.d_model
