"""Synthesizer mixtures (Tay et al., 2021, "Synthesizer", section 3.4).

The logits of several blocks are combined with weights alpha that sum to 1,
then one causal softmax weighs a shared value projection:
Y = softmax(sum_i alpha_i S_i(X)) (X W_v) W_o.  alpha is either learned
(softmax of free parameters) or fixed by the config (for example chosen by
the search).  Any block that exposes ``scores`` can be a component, ``mha``
and ``mdha`` included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.errors import ConfigError
from nas.models.attention.base import (
    ATTENTION,
    AttentionBlock,
    BlockOptions,
    Draw,
    FFNSpec,
    ValueAttention,
)
from nas.models.dims import Dims, Flops
from nas.models.parametrization import VECTOR
from nas.models.reference import softmax


def _mixable_names() -> list[str]:
    return [n for n in ATTENTION.names() if ATTENTION.get(n).mixable]


@dataclasses.dataclass(frozen=True)
class MixtureOptions(BlockOptions):
    #: (block name, its options) per component.
    components: tuple[tuple[str, BlockOptions], ...] = ()
    #: "learned", or one fixed non-negative weight per component (normalised to sum 1).
    weights: str | tuple[float, ...] = "learned"

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> MixtureOptions:
        unknown = sorted(set(raw) - {"components", "weights"})
        if unknown:
            raise ConfigError(
                f"unknown option {unknown[0]!r}; valid options: components, weights", str(unknown[0])
            )
        items = raw.get("components")
        if not isinstance(items, (list, tuple)) or len(items) < 2:
            raise ConfigError(
                "must list at least two blocks to mix, e.g. [mha, synth_random]; "
                f"mixable blocks: {', '.join(_mixable_names())}",
                "components",
            )
        components = []
        for i, item in enumerate(items):
            path = f"components.{i}"
            if isinstance(item, str):
                name, sub = item, {}
            elif isinstance(item, Mapping) and "type" in item:
                name, sub = item["type"], {k: v for k, v in item.items() if k != "type"}
            else:
                raise ConfigError(f"must be a block name or a mapping with 'type', got {item!r}", path)
            block = ATTENTION.get(name, f"{path}.type")
            if not block.mixable:
                why = f" ({block.why_not_mixable})" if block.why_not_mixable else ""
                raise ConfigError(
                    f"{name!r} cannot be mixed{why}; mixable blocks: {', '.join(_mixable_names())}",
                    f"{path}.type",
                )
            try:
                components.append((name, block.Options.parse(sub)))
            except ConfigError as err:
                raise err.at(path) from None
        weights = raw.get("weights", "learned")
        if weights != "learned":
            if not isinstance(weights, (list, tuple)) or len(weights) != len(components):
                raise ConfigError(
                    f"must be 'learned' or a list of {len(components)} non-negative numbers, got {weights!r}",
                    "weights",
                )
            if any(isinstance(w, bool) or not isinstance(w, (int, float)) or w < 0 for w in weights):
                raise ConfigError(f"must be non-negative numbers, got {list(weights)!r}", "weights")
            total = float(sum(weights))
            if total <= 0:
                raise ConfigError("must not all be zero", "weights")
            # Weights that already sum to 1 are kept as written: dividing again by a sum that is
            # 1 up to rounding would change the last digit, and with it the arch_id, on every
            # to_dict -> from_dict round trip.
            if abs(total - 1.0) > 1e-9:
                weights = tuple(float(w) / total for w in weights)
            else:
                weights = tuple(float(w) for w in weights)
        return cls(components=tuple(components), weights=weights)

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        for i, (_, opts) in enumerate(self.components):
            try:
                opts.check(dims, ffn)
            except ConfigError as err:
                raise err.at(f"components.{i}") from None

    def check_causal(self) -> None:
        # A component sees what the mixture's layer sees: a centered mdha inside a causal layer's
        # mixture would read the next tokens through its taps, whatever mask the mixture applies.
        for i, (_, opts) in enumerate(self.components):
            try:
                opts.check_causal()
            except ConfigError as err:
                raise err.at(f"components.{i}") from None

    def to_dict(self) -> dict[str, Any]:
        return {
            "components": [{"type": name, **opts.to_dict()} for name, opts in self.components],
            "weights": self.weights if isinstance(self.weights, str) else list(self.weights),
        }

    @property
    def learned(self) -> bool:
        return self.weights == "learned"


@ATTENTION.register("mixture")
class Mixture(ValueAttention):
    Options = MixtureOptions
    bidirectional = True  # its components give logits only; the mask is applied here
    has_dot_terms = False  # not a mixture component itself
    param_kinds = {"alpha_logits": VECTOR}  # the components declare their own
    #: False: always write the logits out (``unfused``); benchmarks/fused_mixture.py compares the two.
    fuse: bool = True

    def __init__(self, dims: Dims, opts: MixtureOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        self.parts = nn.ModuleList(
            ATTENTION.get(name)(dims, sub, ffn=ffn, with_values=False) for name, sub in opts.components
        )
        n = len(opts.components)
        if opts.learned:
            self.alpha_logits = nn.Parameter(torch.zeros(n))
        else:
            self.register_buffer("fixed_alpha", torch.tensor(opts.weights, dtype=torch.float32))

    @property
    def alpha(self) -> Tensor:
        """Mixing weights, non-negative and summing to 1."""
        if self.opts.learned:  # type: ignore[attr-defined]
            return torch.softmax(self.alpha_logits, dim=0)
        return self.fixed_alpha

    def scores(self, x: Tensor) -> Tensor:
        alpha = self.alpha
        total: Tensor | None = None
        for a, part in zip(alpha, self.parts, strict=True):
            s = a * part.scores(x)  # (B|1, H, T, T)
            total = s if total is None else total + s
        assert total is not None
        return total

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        """softmax(mask + sum_i alpha_i S_i) V W_o, the same as ``ValueAttention.forward``, faster.

        The input-independent parts (random synthesizers) and the causal mask are summed first
        on (H, T, T), once per step.  With only such parts the softmax, too, runs once per step
        and is shared by the batch.  When every input-dependent part's logits are a product plus
        a bias (``dot_terms``: ``mha``, ``mdha``, ``synth_dense``), their alpha-weighted queries
        and keys are concatenated and SDPA takes the summed biases as an additive float mask
        (``fused``): the mixture never writes (B, H, T, T) logits itself, and a backend with a
        fused kernel for masks keeps them out of memory: CUDA's memory-efficient attention, which
        also returns the mask's gradient, and the CPU's flash kernel when the mask is fixed
        (fixed weights, fixed random parts).  Any other part goes through ``add_scores``.
        """
        T = x.shape[1]
        alpha = self.alpha
        # The parts take no ``keep``: their input is zero at padding instead, as mdha's own forward
        # makes its projections, so that a centered convolution's taps read nothing of the padding
        # (its keys are masked below; padding queries' rows are never read).
        parts_x = x if keep is None else x * keep[..., None].to(x.dtype)
        bias = torch.zeros(T, T, device=x.device, dtype=x.dtype)
        if self.causal:
            bias = bias.masked_fill(self.causal_mask[:T, :T], float("-inf"))
        dynamic = []
        for a, part in zip(alpha, self.parts, strict=True):
            if part.static_scores:
                bias = bias + a * part.scores(parts_x)[0]  # (H, T, T)
            else:
                dynamic.append((a, part))
        if not dynamic and keep is None:
            return self.attend_shared(torch.softmax(bias, dim=-1), x)
        if self.fuse and dynamic and all(part.has_dot_terms for _, part in dynamic):
            terms = [(a, part.dot_terms(parts_x)) for a, part in dynamic]
            return self.fused(x, bias, terms, keep)  # type: ignore[arg-type]
        if keep is not None:  # padding keys: -inf for every sequence's own padding, (B, H, T, T)
            bias = bias.masked_fill(~keep[:, None, None, :], float("-inf"))
        return self.unfused(x, bias, dynamic, parts_x)

    #: None: SDPA takes a mask that needs a gradient where it has a kernel for one (CUDA), else the
    #: logits are written out; True/False forces SDPA or the written-out logits (tests)
    sdpa_trained_mask: bool | None = None

    def fused(
        self,
        x: Tensor,
        bias: Tensor,
        terms: list[tuple[Tensor, tuple[Tensor, Tensor, Tensor | None]]],
        keep: Tensor | None = None,
    ) -> Tensor:
        """SDPA over [alpha_i q_i] . [k_i] with ``bias`` plus the parts' own biases as its float mask
        (on a CPU only when the mask needs no gradient: benchmarks/fused_mixture.py)."""
        B = x.shape[0]
        qs, ks = [], []
        for a, (q, k, own) in terms:
            qs.append(q * a)
            ks.append(k.expand(B, -1, -1, -1))
            if own is not None:
                bias = bias + a * own.to(bias.dtype)
        q, k = torch.cat(qs, dim=-1), torch.cat(ks, dim=-1)  # (B, H, T, sum of the parts' widths)
        mask = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))  # (1, H|1, T, T)
        if keep is not None:
            mask = mask.masked_fill(~keep[:, None, None, :], float("-inf"))  # (B, H|1, T, T)
        sdpa = x.is_cuda if self.sdpa_trained_mask is None else self.sdpa_trained_mask
        if mask.requires_grad and not sdpa:
            # CPU SDPA has no fused kernel for a mask that needs a gradient: its math path would
            # write the same logits, slower than one product with the mask added in place.
            logits = (q @ k.transpose(-2, -1)).add_(mask)  # (B, H, T, T)
            wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
            return self.attend(torch.softmax(wide, dim=-1).to(logits.dtype), x)
        v = self.split_heads(self.v_proj(x))  # (B, H, T, dh)
        y = F.scaled_dot_product_attention(q, k.to(q.dtype), v, attn_mask=mask.to(q.dtype), scale=1.0)
        return self.out_proj(self.merge_heads(y))

    def unfused(
        self,
        x: Tensor,
        bias: Tensor,
        dynamic: list[tuple[Tensor, AttentionBlock]],
        parts_x: Tensor | None = None,
    ) -> Tensor:
        """The logits written out: each dynamic part adds its alpha-weighted logits to ``bias``
        through ``add_scores`` (in place where it can, so (B, H, T, T) is written once); the parts
        read ``parts_x`` (default ``x``: ``forward`` zeroes an encoder's padding there)."""
        logits = bias
        for a, part in dynamic:
            logits = part.add_scores(x if parts_x is None else parts_x, a, logits)  # (B, H, T, T)
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return self.attend(torch.softmax(wide, dim=-1).to(logits.dtype), x)

    # -- options in a search space and in reports ------------------------------------------
    @classmethod
    def example_options(cls) -> dict[str, Any]:
        return {"components": _mixable_names()}

    @classmethod
    def option_choices(cls, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Normalise a space's ``mixture`` entry to two choices: component lists and weights.

        ``components`` is one list of blocks or a list of such lists; ``weights`` is
        ``learned``, ``search`` (one searched weight per component), a list of fixed
        weights, or a list of these.
        """
        super().option_choices(raw)
        if "components" not in raw:
            raise ConfigError(
                "is required: a list of component lists, e.g. [[mha, synth_random]]", "components"
            )
        comps = raw["components"]
        if isinstance(comps, list) and comps and all(isinstance(c, (str, Mapping)) for c in comps):
            comps = [comps]  # one fixed component list
        weights = raw.get("weights", "learned")
        fixed = isinstance(weights, list) and weights and not isinstance(weights[0], (list, str))
        if weights in ("learned", "search") or fixed:
            weights = [weights]  # one choice
        return {"components": comps, "weights": weights}

    @classmethod
    def chosen_options(cls, chosen: dict[str, Any], draw: Draw) -> dict[str, Any]:
        components = list(chosen.get("components") or ())
        weights = chosen.get("weights", "learned")
        if weights == "search":
            # One weight per component, searched, normalised to sum 1 by MixtureOptions.parse.
            weights = [draw(f"weight.{j}", 0.05, 1.0) for j in range(len(components))]
        return {**chosen, "components": components, "weights": weights}

    @classmethod
    def describe(cls, opts: BlockOptions, short: bool = False) -> str:
        """``mixture(mha + mdha kernel=3; learned)``, or short ``mix(mha+mdha)``."""
        parts = cls._parts(cast(MixtureOptions, opts))
        weights = cast(MixtureOptions, opts).weights
        if short:
            return "mix(" + "+".join(block.name for block, _ in parts) + ")"
        w = weights if isinstance(weights, str) else "/".join(f"{x:.2g}" for x in weights)
        return f"mixture({' + '.join(block.describe(o) for block, o in parts)}; {w})"

    def reference_scores(self, x: Tensor) -> Tensor:
        if self.opts.learned:  # type: ignore[attr-defined]
            alpha = softmax(self.alpha_logits)
        else:
            # The config's weights (normalised when parsed), held by the block as a float32 buffer.
            alpha = torch.tensor(self.opts.weights, dtype=torch.float32).to(x.dtype)  # type: ignore[attr-defined]
        return sum(a * part.reference_scores(x) for a, part in zip(alpha, self.parts, strict=True))

    @staticmethod
    def _parts(opts: MixtureOptions) -> list[tuple[type[AttentionBlock], BlockOptions]]:
        return [(ATTENTION.get(name), sub) for name, sub in opts.components]

    @classmethod
    def count_params(cls, dims: Dims, opts: MixtureOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        parts = sum(b.count_params(dims, o, ffn, with_values=False) for b, o in cls._parts(opts))
        return parts + (len(opts.components) if opts.learned else 0) + cls.value_params(dims)

    @classmethod
    def buffer_bytes(cls, dims: Dims, opts: MixtureOptions) -> int:
        """Each component's own, and its causal mask (a bool max_len x max_len each: the layer's own
        mask is counted with the model's)."""
        parts = cls._parts(opts)
        return sum(b.buffer_bytes(dims, o) for b, o in parts) + len(parts) * dims.max_len**2

    @classmethod
    def state_elements(cls, dims: Dims, opts: MixtureOptions, seq_len: int, with_values: bool = True) -> int:
        """The shared values and what each component keeps besides them (mha: its keys)."""
        parts = sum(b.state_elements(dims, o, seq_len, with_values=False) for b, o in cls._parts(opts))
        return parts + super().state_elements(dims, opts, seq_len, with_values)

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: MixtureOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        parts = cls._parts(opts)
        flops = Flops()
        for block, sub in parts:
            flops = flops + block.count_flops(dims, sub, ffn, seq_len, with_values=False)
        trained = opts.learned or any(b.count_params(dims, o, ffn, False) > 0 for b, o in parts)
        return flops + cls.value_flops(dims, seq_len, weights_need_grad=trained)
