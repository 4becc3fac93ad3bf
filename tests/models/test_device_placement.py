"""A forward and backward make every tensor on the model's device: none is built in host memory and
moved, and none is read back.

On CUDA a host tensor moved with ``.to(device)`` or made by ``torch.tensor(list, device="cuda")`` is a
blocking copy that waits for every kernel queued before it, and ``.item()`` waits too: once per layer
and step, the training loop could no longer queue work ahead of the GPU (ALiBi's slopes and the
sliding window's band mask once were such copies).  A CPU cannot see that wait; it can run the model
on the ``meta`` device, where a host tensor meeting the model's tensors is recorded and a read-back
raises.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

import nas
from nas.models import Dims, FFNSpec

# hyena's FFT has no meta kernel; its forward builds its tables with device= (nas/models/attention/hyena.py)
BLOCKS = [b for b in nas.ATTENTION.names() if b != "hyena"]
T = 128  # longer than sliding_window's default window (64): its band path, not mha's


class HostTensors(TorchFunctionMode):
    """Records each call that brings a host tensor (or a Python list) onto the meta device."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        to_meta = any(isinstance(t, torch.Tensor) and t.is_meta for t in tree_leaves(out))
        from_host = any(t.device.type == "cpu" and t.dim() > 0 for t in ins) or (
            not ins and func in (torch.tensor, torch.as_tensor)
        )
        if to_meta and from_host:
            self.seen.append(getattr(func, "__qualname__", str(func)))
        return out


def block_arch(block: str, **top: Any) -> nas.ArchConfig:
    att: dict[str, Any] = {"type": block}
    if block == "mixture":
        att["components"] = ["mha", "synth_random"]
    if block == "synth_factorized_dense":
        att.update(a=16, b=8)
    layers = {"repeat": 2, "attention": att, "ffn": "relu"}
    return nas.ArchConfig.from_dict({"d_model": 64, "n_heads": 4, "max_len": T, "layers": layers, **top})


@pytest.mark.parametrize("positions", ["learned", "alibi", "rope"])
@pytest.mark.parametrize("block", BLOCKS)
def test_a_training_step_makes_nothing_on_the_host(block: str, positions: str) -> None:
    arch = block_arch(block, pos_encoding=positions)
    with torch.device("meta"):
        model = nas.build_model(arch)
    x = torch.randint(0, arch.vocab_size, (2, T), device="meta")
    with HostTensors() as mode:
        logits = model(x)  # (B, T, vocab)
        F.cross_entropy(logits.float().flatten(0, 1), x.flatten()).backward()
    assert mode.seen == []


@pytest.mark.parametrize("alibi", [False, True])
@pytest.mark.parametrize("block", [b for b in BLOCKS if nas.ATTENTION.get(b).bidirectional])
def test_an_encoder_layer_with_padding_makes_nothing_on_the_host(block: str, alibi: bool) -> None:
    """A padded source takes the masked paths (sliding_window's blocked band, not FlexAttention)."""
    cls = nas.ATTENTION.get(block)
    opts = block_arch(block).layers[0].attention.options
    with torch.device("meta"):
        layer = cls(Dims(64, 4, T, alibi=alibi), opts, ffn=FFNSpec())
    layer.make_bidirectional()
    x = torch.randn(2, T, 64, device="meta", requires_grad=True)
    keep = torch.ones(2, T, dtype=torch.bool, device="meta")
    with HostTensors() as mode:
        layer(x, keep).float().square().mean().backward()
    assert mode.seen == []


def test_the_detector_sees_a_host_copy() -> None:
    with HostTensors() as mode:
        torch.tensor([0.5, 0.25], device="meta")
        torch.arange(3).to("meta")
        torch.arange(3, device="meta") + 1  # made on the device: not a copy
    assert len(mode.seen) == 2


@pytest.mark.parametrize("n_heads", [1, 2, 3, 4, 6, 8, 12, 16, 20])
def test_alibi_slopes_made_on_the_device_are_the_papers(n_heads: int) -> None:
    from nas.models.rotary import alibi_slopes, alibi_slopes_on

    torch.testing.assert_close(alibi_slopes_on(n_heads), torch.tensor(alibi_slopes(n_heads)), rtol=0, atol=0)
