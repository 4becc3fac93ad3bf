"""One optimizer step: the part of training that runs thousands of times and is benchmarked alone."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.models.parametrization import optimizer_groups
from nas.spec.training import TrainRecipe


def exempt_from_decay(model: nn.Module) -> set[int]:
    """ids of the parameters that modules of ``model`` name in their ``no_decay`` (attention blocks)."""
    return {id(getattr(m, name)) for m in model.modules() for name in getattr(m, "no_decay", ())}


def make_optimizer(model: nn.Module, recipe: TrainRecipe, device: torch.device) -> torch.optim.AdamW:
    """AdamW; ``recipe.decay`` says which parameters are weight-decayed.

    ``matrices`` (the default): every parameter of 2+ dimensions, the embeddings included.
    ``weights_only``: the same less what the blocks name in ``no_decay`` (logits, filters,
    biases that are stored as matrices).  Vectors (LayerNorms, biases) are never decayed.
    """
    params = [p for p in model.parameters() if p.requires_grad]  # shared (tied) parameters appear once
    exempt = exempt_from_decay(model) if recipe.decay == "weights_only" else set()
    decay = [p for p in params if p.dim() >= 2 and id(p) not in exempt]
    no_decay = [p for p in params if p.dim() < 2 or id(p) in exempt]
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    shape = getattr(_plain(model), "shape", None)
    if shape is not None and not shape.is_base:  # completep away from its base: a group per lr/decay/eps
        groups = optimizer_groups(_plain(model), {id(p) for p in decay}, recipe.weight_decay)
    return torch.optim.AdamW(
        [g for g in groups if g["params"]],
        lr=recipe.lr,
        betas=(recipe.beta1, recipe.beta2),
        fused=True,  # one kernel for all parameters, on CPU as on CUDA
    )


def _plain(model: nn.Module) -> nn.Module:
    """The module a ``torch.compile`` wrapper wraps (its attributes, such as ``shape``), else ``model``."""
    return getattr(model, "_orig_mod", model)


def autocast_for(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on CUDA (flash SDPA kernels, tensor cores); plain fp32 on the CPU."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compute_dtype(device: torch.device) -> str:
    """The dtype the forward pass computes in on ``device`` (what :func:`autocast_for` gives)."""
    return "bfloat16" if device.type == "cuda" else "float32"


class TrainStep:
    """One optimizer step: forward, cross-entropy, backward, clip, AdamW; returns the loss tensor.

    It never reads a value back from the device (no ``.item()``), so steps
    queue without syncs.  The throughput benchmark times exactly this.
    ``model`` may be a ``torch.compile`` wrapper; it shares its parameters with
    the module it wraps.
    """

    def __init__(
        self, model: nn.Module, recipe: TrainRecipe, device: torch.device, *, compile: bool = False
    ) -> None:
        self.model = model
        self.optimizer = make_optimizer(model, recipe, device)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.grad_clip = recipe.grad_clip
        self.device = device
        # compile: the forward pass and the loss as one graph (the float cast of the logits and the
        # cross-entropy fuse with the head); backward follows it, the optimizer stays eager and fused
        self.forward_loss = torch.compile(self._forward_loss) if compile else self._forward_loss

    def _forward_loss(self, x: Tensor, y: Tensor) -> Tensor:
        with autocast_for(self.device):
            logits = self.model(x)  # (B, T, vocab)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))

    def set_lr(self, lr: float) -> None:
        """The schedule's rate: each group's ``lr_scale`` times it (completep's per-kind rates; muP's
        schedules scale each group relatively, never set it absolutely)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["lr_scale"] if "lr_scale" in group else lr

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        loss = self.forward_loss(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip, foreach=True)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()
