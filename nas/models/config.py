"""Architecture configs: what ``build_model`` builds and what the search writes.

An :class:`ArchConfig` is global sizes plus one :class:`LayerConfig` per layer;
a ``task: seq2seq`` architecture also lists its ``encoder_layers`` (its
``layers`` are then the decoder's, each with cross-attention to the encoder).
It is frozen and validated when created, round-trips through plain dicts (and
YAML files, see ``nas.files.archfile``), and has a stable ``arch_id`` hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from nas.errors import ConfigError
from nas.models.attention import ATTENTION, BlockOptions, FFNSpec
from nas.models.dims import Dims
from nas.models.ffn import ACTIVATIONS, ffn_width
from nas.models.norms import NORMS
from nas.validate import MAX_DIM, MAX_LAYERS, check_number

POS_ENCODINGS = ("learned", "sinusoidal", "rope", "alibi")
TASKS = ("lm", "seq2seq")


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
    """An attention block by name, with its (complete, parsed) options."""

    type: str
    options: BlockOptions

    @classmethod
    def from_raw(cls, raw: Any) -> AttentionSpec:
        """``"mha"`` or ``{"type": "mdha", "kernel": 3}``."""
        if isinstance(raw, str):
            name, sub = raw, {}
        elif isinstance(raw, Mapping):
            if "type" not in raw:
                raise ConfigError(f"needs a 'type'; valid types: {', '.join(ATTENTION.names())}")
            name, sub = raw["type"], {k: v for k, v in raw.items() if k != "type"}
        else:
            raise ConfigError(f"must be a block name or a mapping with 'type', got {raw!r}")
        block = ATTENTION.get(name, "type")
        return cls(name, block.Options.parse(sub))

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **self.options.to_dict()}

    def text(self, short: bool = False) -> str:
        """How reports write it (``mdha kernel=3``; short: ``mdha(k3)``), as its block says."""
        return ATTENTION.get(self.type).describe(self.options, short)


@dataclasses.dataclass(frozen=True)
class LayerConfig:
    """One Transformer layer: its attention block and its feed-forward choice."""

    attention: AttentionSpec
    ffn: FFNSpec = FFNSpec()

    @classmethod
    def from_dict(cls, raw: Any) -> LayerConfig:
        if not isinstance(raw, Mapping):
            raise ConfigError(f"must be a mapping with 'attention' and 'ffn', got {raw!r}")
        _refuse_unknown(raw, ("attention", "ffn"))
        if "attention" not in raw:
            raise ConfigError(f"is missing; valid types: {', '.join(ATTENTION.names())}", "attention")
        try:
            attention = AttentionSpec.from_raw(raw["attention"])
        except ConfigError as err:
            raise err.at("attention") from None
        ffn_raw = raw.get("ffn", {})
        if isinstance(ffn_raw, str):
            ffn_raw = {"activation": ffn_raw}
        if not isinstance(ffn_raw, Mapping):
            raise ConfigError(f"must be a mapping with activation and mult, got {ffn_raw!r}", "ffn")
        try:
            _refuse_unknown(ffn_raw, ("activation", "mult"))
            activation = ffn_raw.get("activation", "relu")
            ACTIVATIONS.get(activation, "activation")
            mult = check_number(ffn_raw.get("mult", 4.0), "mult", low=0, low_open=True)
        except ConfigError as err:
            raise err.at("ffn") from None
        return cls(attention, FFNSpec(activation, float(mult)))

    def to_dict(self) -> dict[str, Any]:
        return {"attention": self.attention.to_dict(), "ffn": dataclasses.asdict(self.ffn)}


@dataclasses.dataclass(frozen=True)
class ArchConfig:
    """A Transformer: global sizes and one config per layer (pre-LN residual layers).

    ``task: lm`` (the default) is a decoder-only LM; ``task: seq2seq`` is an
    encoder-decoder whose ``encoder_layers`` attend bidirectionally and whose
    ``layers`` (the decoder) are causal and cross-attend to the encoder output.
    """

    d_model: int
    n_heads: int
    max_len: int
    layers: tuple[LayerConfig, ...]
    vocab_size: int = 256
    pos_encoding: str = "learned"
    tie_embeddings: bool = True
    task: str = "lm"
    encoder_layers: tuple[LayerConfig, ...] = ()
    norm: str = "layernorm"
    rope_base: float = 10000.0  # pos_encoding: rope only

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        object.__setattr__(self, "encoder_layers", tuple(self.encoder_layers))
        for key in ("d_model", "n_heads", "max_len", "vocab_size"):
            check_number(getattr(self, key), key, integer=True, low=1, high=MAX_DIM)
        if len(self.layers) > MAX_LAYERS:
            raise ConfigError(f"has {len(self.layers)} layers; at most {MAX_LAYERS} are allowed", "layers")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"d_model = {self.d_model} is not divisible by n_heads = {self.n_heads}", "n_heads"
            )
        if self.pos_encoding not in POS_ENCODINGS:
            raise ConfigError(
                f"unknown positional encoding {self.pos_encoding!r}; valid: {', '.join(POS_ENCODINGS)}",
                "pos_encoding",
            )
        if self.pos_encoding == "sinusoidal" and self.d_model % 2:
            raise ConfigError("sinusoidal positions need an even d_model", "d_model")
        if self.pos_encoding == "rope" and (self.d_model // self.n_heads) % 2:
            raise ConfigError(
                f"rotary positions turn pairs of channels, so d_model / n_heads must be even, "
                f"got {self.d_model} / {self.n_heads} = {self.d_model // self.n_heads}",
                "n_heads",
            )
        check_number(self.rope_base, "rope_base", low=1, low_open=True)
        if self.norm not in NORMS:
            raise ConfigError(f"unknown normalisation {self.norm!r}; valid: {', '.join(NORMS)}", "norm")
        if not isinstance(self.tie_embeddings, bool):
            raise ConfigError(f"must be true or false, got {self.tie_embeddings!r}", "tie_embeddings")
        if not self.layers:
            raise ConfigError("must list at least one layer", "layers")
        dims = self.dims
        for i, layer in enumerate(self.layers):
            if not isinstance(layer, LayerConfig):
                raise ConfigError(f"must be a LayerConfig, got {type(layer).__name__}", f"layers.{i}")
            try:
                if ffn_width(self.d_model, layer.ffn.mult, layer.ffn.activation) < 1:
                    raise ConfigError(f"gives an FFN width below 1 at d_model {self.d_model}", "ffn.mult")
                layer.attention.options.check(dims, layer.ffn)
                layer.attention.options.check_causal()  # an LM's layers and a decoder's are causal
            except ConfigError as err:
                where = err if err.path.startswith("ffn") else err.at("attention")
                raise where.at(f"layers.{i}") from None
        self._check_task()

    def _check_task(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r}; valid: {', '.join(TASKS)}", "task")
        if self.task == "lm":
            if self.encoder_layers:
                raise ConfigError("only a task: seq2seq architecture has an encoder", "encoder_layers")
            return
        if not self.encoder_layers:
            raise ConfigError(
                "a task: seq2seq architecture needs at least one encoder layer", "encoder_layers"
            )
        if len(self.encoder_layers) > MAX_LAYERS:
            raise ConfigError(
                f"has {len(self.encoder_layers)} layers; at most {MAX_LAYERS} are allowed", "encoder_layers"
            )
        dims = self.dims
        encoder_blocks = ", ".join(n for n in ATTENTION.names() if ATTENTION.get(n).bidirectional)
        for i, layer in enumerate(self.encoder_layers):
            where = f"encoder_layers.{i}"
            if not isinstance(layer, LayerConfig):
                raise ConfigError(f"must be a LayerConfig, got {type(layer).__name__}", where)
            if not ATTENTION.get(layer.attention.type).bidirectional:
                raise ConfigError(
                    f"{layer.attention.type} only runs causally and cannot attend over a whole source; "
                    f"valid in the encoder: {encoder_blocks}",
                    f"{where}.attention",
                )
            try:
                if ffn_width(self.d_model, layer.ffn.mult, layer.ffn.activation) < 1:
                    raise ConfigError(f"gives an FFN width below 1 at d_model {self.d_model}", "ffn.mult")
                layer.attention.options.check(dims, layer.ffn)
            except ConfigError as err:
                raise (err if err.path.startswith("ffn") else err.at("attention")).at(where) from None

    @property
    def is_seq2seq(self) -> bool:
        return self.task == "seq2seq"

    @property
    def dims(self) -> Dims:
        rope = float(self.rope_base) if self.pos_encoding == "rope" else 0.0
        return Dims(
            self.d_model,
            self.n_heads,
            self.max_len,
            rope_base=rope,
            norm=self.norm,
            alibi=self.pos_encoding == "alibi",
        )

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "n_heads": self.n_heads,
            "max_len": self.max_len,
            "pos_encoding": self.pos_encoding,
            "tie_embeddings": self.tie_embeddings,
        }
        # Fields added later appear only when they differ from what the model was before them, so
        # that an architecture's dict (and its arch_id) is what it was before they existed.
        if self.pos_encoding == "rope":
            out["rope_base"] = float(self.rope_base)
        if self.norm != "layernorm":
            out["norm"] = self.norm
        if self.is_seq2seq:
            out["task"] = self.task
            out["encoder_layers"] = [layer.to_dict() for layer in self.encoder_layers]
        out["layers"] = [layer.to_dict() for layer in self.layers]
        return out

    def with_vocab(self, vocab_size: int) -> ArchConfig:
        """This architecture sized for a corpus of ``vocab_size`` tokens (itself when it already is).

        The vocabulary belongs to the data, not to the search: an architecture meets
        its corpus through this, so the embedding, the output layer, parameters and
        FLOPs follow the tokenizer.
        """
        if vocab_size == self.vocab_size:
            return self
        return dataclasses.replace(self, vocab_size=vocab_size)

    @classmethod
    def from_dict(cls, raw: Any) -> ArchConfig:
        """Build from plain data.  ``layers`` is a list, or ``{repeat: N, ...one layer...}``."""
        if not isinstance(raw, Mapping):
            raise ConfigError(f"an architecture must be a mapping, got {type(raw).__name__}")
        _refuse_unknown(raw, [f.name for f in dataclasses.fields(cls)])
        for key in ("d_model", "n_heads", "max_len", "layers"):
            if key not in raw:
                raise ConfigError("is required", key)
        kwargs = {k: v for k, v in raw.items() if k not in ("layers", "encoder_layers")}
        if "encoder_layers" in raw:
            kwargs["encoder_layers"] = _parse_layers(raw["encoder_layers"], "encoder_layers")
        return cls(layers=_parse_layers(raw["layers"], "layers"), **kwargs)

    @property
    def arch_id(self) -> str:
        """Stable 12-hex-digit hash of the canonical dict: equal architectures share it."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def summary(self) -> str:
        """Sizes and one group per run of equal layers, e.g. ``d128 h4 L4: 4x[mdha(k3) squared_relux4]``."""
        body = _grouped(self.layers)
        if self.is_seq2seq:
            enc = _grouped(self.encoder_layers)
            head = f"d{self.d_model} h{self.n_heads}{self._components()}"
            return f"{head} enc L{len(self.encoder_layers)}: {enc} | dec L{self.n_layers}: {body}"
        return f"d{self.d_model} h{self.n_heads}{self._components()} L{self.n_layers}: {body}"

    def _components(self) -> str:
        """Components added after the summary's format was set, when used: `` rope rmsnorm``."""
        parts = [
            self.pos_encoding if self.pos_encoding in ("rope", "alibi") else "",
            "rmsnorm" if self.norm == "rmsnorm" else "",
        ]
        return "".join(f" {p}" for p in parts if p)


def _grouped(layers: tuple[LayerConfig, ...]) -> str:
    """Runs of equal layers: ``2x[mdha(k3) squared_relux4] [mha relux4]``."""
    grouped: list[tuple[int, str]] = []
    for p in (layer_summary(layer) for layer in layers):
        if grouped and grouped[-1][1] == p:
            grouped[-1] = (grouped[-1][0] + 1, p)
        else:
            grouped.append((1, p))
    return " ".join(f"{n}x[{p}]" if n > 1 else f"[{p}]" for n, p in grouped)


def _parse_layers(layers_raw: Any, key: str) -> tuple[LayerConfig, ...]:
    """``layers`` (or ``encoder_layers``): a list, or ``{repeat: N, ...one layer...}``."""
    if isinstance(layers_raw, Mapping) and "repeat" in layers_raw:
        # checked before the layers are expanded: 10**8 copies would take minutes to build
        repeat = check_number(layers_raw["repeat"], f"{key}.repeat", integer=True, low=1, high=MAX_LAYERS)
        one = {k: v for k, v in layers_raw.items() if k != "repeat"}
        layers_raw = [one] * repeat
    if not isinstance(layers_raw, (list, tuple)):
        raise ConfigError("must be a list of layers or {repeat: N, attention: ..., ffn: ...}", key)
    if len(layers_raw) > MAX_LAYERS:
        raise ConfigError(f"has {len(layers_raw)} layers; at most {MAX_LAYERS} are allowed", key)
    layers = []
    for i, item in enumerate(layers_raw):
        try:
            layers.append(LayerConfig.from_dict(item))
        except ConfigError as err:
            raise err.at(f"{key}.{i}") from None
    return tuple(layers)


def layer_summary(layer: LayerConfig) -> str:
    """One layer in a summary: ``mdha(k3) squared_relux4``."""
    return f"{layer.attention.text(short=True)} {layer.ffn.activation}x{layer.ffn.mult:g}"


def _refuse_unknown(raw: Mapping[str, Any], valid: Any) -> None:
    unknown = sorted(str(k) for k in set(raw) - set(valid))
    if unknown:
        raise ConfigError(f"unknown key; valid keys: {', '.join(sorted(valid))}", unknown[0])
