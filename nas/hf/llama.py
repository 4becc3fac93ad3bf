"""Llama-shaped architectures as ``LlamaForCausalLM``: which architectures are one, their config, weights.

An architecture that *is* a Llama (every layer ``mha``, with or without
grouped key/value heads, and a SwiGLU FFN of one width; RMSNorm; rotary
positions; no biases, as every engine block) exports as a plain ``LlamaConfig``
plus ``model.safetensors``: ``LlamaForCausalLM.from_pretrained(DIR)`` loads it
with no remote code (:func:`nas.hf.export.export_llama`).  Any other decoder-only
architecture (:func:`not_a_llama` names what makes it one) exports with its
modeling code (:mod:`nas.hf.bundle`, ``trust_remote_code=True``).

The weights map over unpermuted: the engine's RoPE pairs channel c with
c + d_head/2, Hugging Face's half-split convention (``nas.models.rotary``), so
Q and K need none of the permutation the Meta-checkpoint converters apply.  The
fused ``qkv`` projection splits into ``q_proj``/``k_proj``/``v_proj`` and the
gated FFN's ``fc_in`` (W1 then W3) into ``gate_proj``/``up_proj``.  RMSNorm's
eps is the engine's 1e-5 (Llama's ``norm_eps``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from nas.errors import UserError
from nas.models import ArchConfig
from nas.models.ffn import ffn_width
from nas.models.norms import RMS_EPS


def not_a_llama(arch: ArchConfig) -> str | None:
    """The first part of ``arch`` that a plain ``LlamaConfig`` cannot hold (None: it is a Llama)."""
    if arch.task != "lm":
        return f"it is a {arch.task} (encoder-decoder) model"
    if arch.pos_encoding != "rope":
        return f"its positions are {arch.pos_encoding}, not rope"
    if arch.norm != "rmsnorm":
        return f"its norm is {arch.norm}, not rmsnorm"
    first = arch.layers[0]
    for i, layer in enumerate(arch.layers):
        if layer.attention.type != "mha":
            return f"layer {i}'s attention is {layer.attention.type}"
        if layer.ffn.activation != "swiglu":
            return f"layer {i}'s FFN is {layer.ffn.activation}, not swiglu"
        kv, kv0 = kv_heads(arch, layer), kv_heads(arch, first)
        if kv != kv0:
            return f"layer {i} has {kv} key/value heads and layer 0 {kv0} (a Llama has one count)"
        width, width0 = layer_width(arch, layer), layer_width(arch, first)
        if width != width0:
            return f"layer {i}'s FFN width is {width} and layer 0's {width0} (a Llama has one width)"
    return None


def kv_heads(arch: ArchConfig, layer: Any) -> int:
    return int(getattr(layer.attention.options, "kv_heads", 0) or arch.n_heads)


def layer_width(arch: ArchConfig, layer: Any) -> int:
    return ffn_width(arch.d_model, layer.ffn.mult, layer.ffn.activation)


def check_llama(arch: ArchConfig, source: str) -> None:
    """Refuse, in one line, an architecture that does not export as a plain Llama."""
    why = not_a_llama(arch)
    if why is not None:
        raise UserError(
            f"{source}: architecture {arch.arch_id} is not a Llama: {why}; only Llama-shaped architectures "
            "(every layer mha + swiglu, rmsnorm, rope) export as a plain Llama (the others export with their "
            "modeling code: nas.hf.export.export_remote)"
        )


def llama_config(arch: ArchConfig, extra: Mapping[str, Any] | None = None) -> Any:
    """The ``LlamaConfig`` of a Llama-shaped ``arch`` (check :func:`not_a_llama` first), with the
    engine's arch dict and arch_id (and ``extra``: metrics, data) recorded under ``nas_*`` keys."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=arch.vocab_size,
        hidden_size=arch.d_model,
        intermediate_size=layer_width(arch, arch.layers[0]),
        num_hidden_layers=arch.n_layers,
        num_attention_heads=arch.n_heads,
        num_key_value_heads=kv_heads(arch, arch.layers[0]),
        head_dim=arch.d_model // arch.n_heads,
        max_position_embeddings=arch.max_len,
        rms_norm_eps=RMS_EPS,
        rope_theta=float(arch.rope_base),
        tie_word_embeddings=arch.tie_embeddings,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        # no special tokens: ids are the corpus's own (a byte corpus has 256, none reserved)
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        architectures=["LlamaForCausalLM"],
        nas_arch=arch.to_dict(),
        nas_arch_id=arch.arch_id,
        **{f"nas_{k}": json_safe(v) for k, v in (extra or {}).items()},
    )


def json_safe(value: Any) -> Any:
    """JSON-safe: non-finite floats as None (config.json must be valid JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def llama_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The engine model's weights under ``LlamaForCausalLM``'s names."""
    out: dict[str, torch.Tensor] = {"model.embed_tokens.weight": model.tok_emb.weight}
    for i, layer in enumerate(model.layers):
        pre = f"model.layers.{i}."
        q, k, v = layer.attn.qkv.weight.split(layer.attn.widths, dim=0)
        gate, up = layer.ffn.fc_in.weight.chunk(2, dim=0)
        out.update({
            pre + "self_attn.q_proj.weight": q,
            pre + "self_attn.k_proj.weight": k,
            pre + "self_attn.v_proj.weight": v,
            pre + "self_attn.o_proj.weight": layer.attn.out_proj.weight,
            pre + "mlp.gate_proj.weight": gate,
            pre + "mlp.up_proj.weight": up,
            pre + "mlp.down_proj.weight": layer.ffn.fc_out.weight,
            pre + "input_layernorm.weight": layer.ln_attn.weight,
            pre + "post_attention_layernorm.weight": layer.ln_ffn.weight,
        })  # fmt: skip
    out["model.norm.weight"] = model.ln_f.weight
    if not model.arch.tie_embeddings:
        out["lm_head.weight"] = model.lm_head.weight
    return {k: v.detach().float().contiguous().clone() for k, v in out.items()}


def to_llama(model: nn.Module, extra: Mapping[str, Any] | None = None) -> Any:
    """A ``LlamaForCausalLM`` (float32, eval mode) holding ``model``'s weights."""
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM(llama_config(model.arch, extra)).float().eval()
    missing, unexpected = hf.load_state_dict(llama_state_dict(model), strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and model.arch.tie_embeddings)]
    if missing or unexpected:  # a mapping bug, not a user's error
        raise RuntimeError(f"Llama weights do not map: missing {missing}, unexpected {unexpected}")
    if model.arch.tie_embeddings:
        hf.tie_weights()
    return hf
