"""A Hugging Face Llama ``config.json`` read as an architecture: the engine's Transformer++ at its shape.

``--arch path/to/config.json`` takes a user's own production config as a baseline or a
seed.  A Llama is exactly what the engine calls Transformer++ (``examples/archs/
transformer_pp.yaml``): every layer ``mha`` (grouped key/value heads when
``num_key_value_heads`` is fewer) with a SwiGLU FFN, RMSNorm, rotary positions, no
biases.  The map (the inverse of ``nas.hf.llama.llama_config``, which ``export --hf`` writes):

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


#: the ``model_type`` of ``export --hf`` with the engine's own modeling code (``nas.hf.modeling.MODEL_TYPE``,
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
    check_mirrors(raw, dict(arch))
    return dict(arch)


#: the sizes an exported config.json states beside ``nas_arch`` for generic tools: key -> ArchConfig field
MIRRORS = {
    "vocab_size": "vocab_size",
    "hidden_size": "d_model",
    "num_hidden_layers": "n_layers",
    "num_attention_heads": "n_heads",
    "max_position_embeddings": "max_len",
    "tie_word_embeddings": "tie_embeddings",
}


def check_mirrors(raw: Mapping[str, Any], arch: Mapping[str, Any]) -> None:
    """Refuse a config whose top-level sizes disagree with the ``nas_arch`` it carries (an edited width):
    one of the two was changed by hand, and reading either would build a model the file does not say."""
    from nas.models import ArchConfig

    try:
        built = ArchConfig.from_dict(arch)
    except ConfigError as err:
        raise err.at("nas_arch") from None
    for key, field_name in MIRRORS.items():
        if key in raw and raw[key] != getattr(built, field_name):
            raise ConfigError(
                f"is {raw[key]!r}, but the nas_arch it was exported with has {field_name} "
                f"{getattr(built, field_name)!r} (edited?): make them agree, or remove one",
                key,
            )


#: the keys of a Llama config.json the engine reads (or refuses when they ask what it cannot build)
READ = (
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "layer_types", "head_dim", "max_position_embeddings",
    "rms_norm_eps", "rope_theta",
    "rope_parameters", "rope_scaling", "tie_word_embeddings", "attention_bias", "mlp_bias", "hidden_act",
    "sliding_window", "use_sliding_window", "attention_dropout", "pretraining_tp", "quantization_config",
)  # fmt: skip
#: keys that change nothing the engine builds: token ids, dtypes, bookkeeping, generation and output settings
HARMLESS = (
    "architectures", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
    "transformers_version", "_name_or_path", "initializer_range", "use_cache", "return_dict",
    "output_attentions", "output_hidden_states", "_attn_implementation", "attn_implementation", "auto_map",
    "is_decoder", "is_encoder_decoder", "chunk_size_feed_forward", "id2label", "label2id", "problem_type",
    "tokenizer_class", "prefix", "sep_token_id", "decoder_start_token_id", "task_specific_params",
    "finetuning_task", "max_window_layers",
)  # fmt: skip
LLAMA_KEYS = frozenset((*READ, *HARMLESS))


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

    unknown = sorted(str(k) for k in raw if k not in LLAMA_KEYS and not str(k).startswith("nas_"))
    if unknown:
        raise ConfigError(
            f"is a key the engine cannot build nor knows to be harmless (read: {', '.join(sorted(READ))}; "
            "ignored: the ids, dtypes and bookkeeping transformers writes); remove it if it changes nothing",
            unknown[0],
        )

    def number(key: str, default: Any = None, within: Mapping[str, Any] = raw, path: str = "") -> Any:
        value = yaml_number(within.get(key, default), keep_non_finite=True)  # JSON's 1e-05 read as YAML 1.1
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"must be a number, got {value!r}", path or key)
        return value

    def whole(key: str, default: Any = None) -> int:
        """A count: a whole number (32.0 is 32, as transformers reads it; 32.7 is refused, not cut)."""
        value = number(key, default)
        if not float(value).is_integer():
            raise ConfigError(f"must be a whole number, got {value!r}", key)
        return int(value)

    def flag(key: str, default: bool) -> bool:
        """true or false: a string "false" is no false (bool() made it true)."""
        value = raw.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"must be true or false, got {value!r}", key)
        return value

    d, heads = whole("hidden_size"), whole("num_attention_heads")
    n_layers = whole("num_hidden_layers")
    kv = whole("num_key_value_heads", heads)
    refusals = [
        (raw.get("rope_scaling") not in (None, {}), "rope_scaling", "rope scaling is not offered"),
        (flag("attention_bias", False), "attention_bias", "the engine's attention has no biases"),
        (flag("mlp_bias", False), "mlp_bias", "the engine's FFNs have no biases"),
        (
            raw.get("sliding_window") is not None or flag("use_sliding_window", False),
            "sliding_window" if raw.get("sliding_window") is not None else "use_sliding_window",
            "the engine's Transformer++ attends over all of its context (sliding_window is another block)",
        ),
        (
            float(number("attention_dropout", 0.0)) != 0.0,
            "attention_dropout",
            "the engine trains without dropout",
        ),
        (whole("pretraining_tp", 1) != 1, "pretraining_tp", "the engine's projections are single matrices"),
        (
            raw.get("quantization_config") is not None,
            "quantization_config",
            "the engine builds full-precision weights",
        ),
        (
            raw.get("layer_types") is not None
            and (not isinstance(raw["layer_types"], list) or set(raw["layer_types"]) - {"full_attention"}),
            "layer_types",
            "every layer of the engine's Transformer++ is full attention",
        ),
        # transformers' ACT2FN maps "swish" to the same SiLU
        (
            raw.get("hidden_act", "silu") not in ("silu", "swish"),
            "hidden_act",
            "the engine's SwiGLU gates with SiLU",
        ),
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
    width = whole("intermediate_size")
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
    out = {
        "vocab_size": whole("vocab_size"),
        "d_model": d,
        "n_heads": heads,
        "max_len": whole("max_position_embeddings"),
        "pos_encoding": "rope",
        "rope_base": rope_base,
        "norm": "rmsnorm",
        "tie_embeddings": flag("tie_word_embeddings", False),
        "layers": {"repeat": n_layers, "attention": attention, "ffn": {"activation": "swiglu", "mult": mult}},
    }
    if isinstance(raw.get("nas_arch"), Mapping):  # this tool's own Llama export: the two must agree
        check_mirrors(raw, dict(raw["nas_arch"]))
    return out


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
