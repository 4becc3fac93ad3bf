"""A Hugging Face Llama ``config.json`` read as an architecture: the engine's Transformer++ at its shape.

``--arch path/to/config.json`` takes a user's own production config as a baseline or a
seed.  A Llama is exactly what the engine calls Transformer++ (``examples/archs/
transformer_pp.yaml``): every layer ``mha`` (grouped key/value heads when
``num_key_value_heads`` is fewer) with a SwiGLU FFN, RMSNorm, rotary positions, no
biases.  The map (the inverse of ``nas.hf.llama_config``, which ``export --hf`` writes):

| config.json | architecture |
| --- | --- |
| hidden_size, num_attention_heads, num_hidden_layers | d_model, n_heads, layers (repeat) |
| num_key_value_heads | ``kv_heads`` (left out when equal to the heads) |
| intermediate_size | SwiGLU ``mult`` = intermediate_size x 3 / (2 x hidden_size) |
| max_position_embeddings, vocab_size | max_len, vocab_size (the corpus still decides the vocabulary) |
| rope_theta (transformers 5: rope_parameters.rope_theta), tie_word_embeddings | rope_base, tie_embeddings |

What the engine cannot build is refused in one line naming the key: another model type,
rope scaling, biases, an activation other than SiLU, a head width other than
hidden_size / heads, an RMSNorm epsilon other than the engine's 1e-5, an
intermediate size SwiGLU's ``mult`` cannot give.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nas.errors import ConfigError
from nas.models.ffn import ffn_width
from nas.models.norms import RMS_EPS
from nas.validate import yaml_number


def is_hf_config(raw: Any) -> bool:
    """Whether a parsed file is a Hugging Face model config (it names its ``model_type``)."""
    return isinstance(raw, Mapping) and "model_type" in raw and "arch" not in raw


#: the ``model_type`` of ``export --hf`` with the engine's own modeling code (``nas.hf_modeling.MODEL_TYPE``,
#: not imported here: that module needs transformers)
NAS_MODEL_TYPE = "nas_lm"


def arch_from_hf_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture dict of a ``config.json``: a Llama's (:func:`arch_from_llama_config`), or the one an
    export of the engine's own model keeps under ``nas_arch`` (any architecture, not only a Llama)."""
    if raw.get("model_type") != NAS_MODEL_TYPE:
        return arch_from_llama_config(raw)
    arch = raw.get("nas_arch")
    if not isinstance(arch, Mapping):
        raise ConfigError(
            f"must be the architecture's mapping (export --hf writes it beside model_type {NAS_MODEL_TYPE}), "
            f"got {type(arch).__name__}",
            "nas_arch",
        )
    return dict(arch)


def arch_from_llama_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture dict (``ArchConfig.from_dict``'s input) of a Llama ``config.json``."""
    kind = raw.get("model_type")
    if kind != "llama":
        raise ConfigError(
            f"is a Hugging Face config of model_type {kind!r}; only Llama configs (model_type: llama) and "
            f"the engine's own exports (model_type: {NAS_MODEL_TYPE}) can be an architecture (the engine's "
            "Transformer++ is a Llama)",
            "model_type",
        )

    def number(key: str, default: Any = None, within: Mapping[str, Any] = raw, path: str = "") -> Any:
        value = yaml_number(within.get(key, default), keep_non_finite=True)  # JSON's 1e-05 read as YAML 1.1
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"must be a number, got {value!r}", path or key)
        return value

    d, heads = int(number("hidden_size")), int(number("num_attention_heads"))
    n_layers = int(number("num_hidden_layers"))
    kv = int(number("num_key_value_heads", heads))
    refusals = [
        (raw.get("rope_scaling") not in (None, {}), "rope_scaling", "rope scaling is not offered"),
        (bool(raw.get("attention_bias", False)), "attention_bias", "the engine's attention has no biases"),
        (bool(raw.get("mlp_bias", False)), "mlp_bias", "the engine's FFNs have no biases"),
        (raw.get("hidden_act", "silu") != "silu", "hidden_act", "the engine's SwiGLU gates with SiLU"),
        (
            raw.get("head_dim") not in (None, d // max(heads, 1)),
            "head_dim",
            "the engine's head width is hidden_size / num_attention_heads",
        ),
        (
            abs(float(number("rms_norm_eps", RMS_EPS)) - RMS_EPS) > 1e-12,
            "rms_norm_eps",
            f"the engine's RMSNorm uses {RMS_EPS:g}",
        ),
    ]
    for refused, key, why in refusals:
        if refused:
            raise ConfigError(f"{raw.get(key)!r} cannot be built: {why}", key)
    rope_base = _rope_base(raw, number)
    width = int(number("intermediate_size"))
    # the plainest mult whose SwiGLU width (ffn_width) is the config's: Transformer++'s mult 4 gives 341
    # at d 128, and so does 341 x 3 / 256 = 3.996 (another arch_id)
    exact = width * 3 / (2 * d)
    plain = [round(exact * q) / q for q in (1, 2, 4, 8)] + [exact]
    fits = [m for m in plain if m > 0 and ffn_width(d, m, "swiglu") == width]
    if not fits:
        raise ConfigError(
            f"{width} is not a SwiGLU width the engine gives at hidden_size {d}", "intermediate_size"
        )
    mult = fits[0]
    attention: Any = "mha" if kv == heads else {"type": "mha", "kv_heads": kv}
    return {
        "vocab_size": int(number("vocab_size")),
        "d_model": d,
        "n_heads": heads,
        "max_len": int(number("max_position_embeddings")),
        "pos_encoding": "rope",
        "rope_base": rope_base,
        "norm": "rmsnorm",
        "tie_embeddings": bool(raw.get("tie_word_embeddings", False)),
        "layers": {"repeat": n_layers, "attention": attention, "ffn": {"activation": "swiglu", "mult": mult}},
    }


def _rope_base(raw: Mapping[str, Any], number: Any) -> float:
    """The rotary base: ``rope_theta`` (transformers 4), or ``rope_parameters.rope_theta`` (transformers 5
    writes only that), refusing a rope type other than the default one (scaling) and two bases that differ."""
    legacy = float(number("rope_theta", 10000.0)) if "rope_theta" in raw else None
    params = raw.get("rope_parameters")
    if params in (None, {}):
        return 10000.0 if legacy is None else legacy
    if not isinstance(params, Mapping):
        raise ConfigError(f"must be a mapping, got {params!r}", "rope_parameters")
    kind = params.get("rope_type", params.get("type", "default"))
    extra = sorted(str(k) for k in params if k not in ("rope_type", "type", "rope_theta"))
    if kind != "default" or extra:
        what = f"rope type {kind!r}" if kind != "default" else f"{', '.join(extra)}"
        raise ConfigError(
            f"{what} cannot be built: the engine's rotary positions are the default ones (every channel "
            "turned, no scaling)",
            "rope_parameters",
        )
    if "rope_theta" not in params:
        return 10000.0 if legacy is None else legacy
    base = float(number("rope_theta", within=params, path="rope_parameters.rope_theta"))
    if legacy is not None and legacy != base:
        raise ConfigError(
            f"has rope_theta {base:g} and the config's top level {legacy:g}: two rotary bases, give one",
            "rope_parameters",
        )
    return base
