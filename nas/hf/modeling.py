"""The Hugging Face classes of a nas-lm language model: ``NasConfig`` and ``NasForCausalLM``.

``export --checkpoint FILE --hf DIR`` writes this module into DIR as ``modeling_nas.py``, next to
the nas-lm model modules it needs (``nas_models_*.py``: the engine's own code, its ``nas.*`` imports
rewritten to these flat files by ``nas.hf.bundle``), so that

    AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)

builds the engine's ``TransformerLM`` where only torch and transformers are installed.  The
architecture is the engine's arch dict (``nas_arch`` in config.json); the weights are the engine
model's own state dict under ``model.`` (``model.safetensors``).

``generate()`` keeps no key/value cache: the engine's blocks keep none (several have no keys or
values at all), so every new token reruns the model over the whole sequence, its last ``max_len``
tokens as the engine's ``greedy_generate`` does.  There is no padding mask either: a batch is
sequences of one length.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from nas.models.config import ArchConfig
from nas.models.model import TransformerLM

# The architecture's attention blocks: the export writes their imports below (importing a block registers it).

#: ``model_type`` in config.json
MODEL_TYPE = "nas_lm"


class NasConfig(PretrainedConfig):
    """The engine's architecture dict (``nas_arch``, validated) plus the sizes tools look for."""

    model_type = MODEL_TYPE

    def __init__(self, nas_arch: dict[str, Any] | None = None, **kwargs: Any) -> None:
        arch = None if nas_arch is None else ArchConfig.from_dict(nas_arch)
        if arch is not None:
            kwargs.setdefault("tie_word_embeddings", arch.tie_embeddings)
        kwargs.setdefault("use_cache", False)  # the blocks keep no cache (see the module's docstring)
        super().__init__(**kwargs)
        self.nas_arch = None if arch is None else arch.to_dict()
        if arch is not None:  # the names generic tools read; the arch dict decides
            self.vocab_size = arch.vocab_size
            self.hidden_size = arch.d_model
            self.num_hidden_layers = arch.n_layers
            self.num_attention_heads = arch.n_heads
            self.max_position_embeddings = arch.max_len

    def to_diff_dict(self) -> dict[str, Any]:
        """What ``config.json`` holds.  Transformers 4 (4.45.2 and 4.57.6 measured) leaves out what equals
        ``PretrainedConfig``'s default, ``tie_word_embeddings: true`` among them; 5.24 writes it.  Kept
        in every version, so that the file says whether the head is tied."""
        out = super().to_diff_dict()
        if self.nas_arch is not None:
            out.setdefault("tie_word_embeddings", bool(self.tie_word_embeddings))
        return out


class NasForCausalLM(PreTrainedModel, GenerationMixin):
    """The engine's ``TransformerLM`` (``self.model``): token ids (B, T) -> logits (B, T, vocab)."""

    config_class = NasConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules = ["Layer"]
    _supports_cache_class = False
    #: a tied head is the embedding (``tie_word_embeddings``), stored once
    _tied_weights_keys = {"model.lm_head.weight": "model.tok_emb.weight"}

    def __init__(self, config: NasConfig) -> None:
        super().__init__(config)
        if config.nas_arch is None:
            raise ValueError("NasConfig has no nas_arch: there is no architecture to build")
        self.model = TransformerLM(ArchConfig.from_dict(config.nas_arch))
        # Built on the meta device (from_pretrained), the buffers computed from the sizes (causal masks,
        # rotary and position tables), which are not saved, need computing again: _init_weights.
        self._nas_rebuild_buffers = any(p.is_meta for p in self.model.parameters())
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False

    def _init_weights(self, module: nn.Module) -> None:
        """Transformers calls this for modules whose tensors a checkpoint did not fill: the unsaved
        buffers after ``from_pretrained``, and (with a partial checkpoint) missing weights.  A model built
        directly is the engine's, initialised by the engine: left alone."""
        if not self._nas_rebuild_buffers:
            return
        self._nas_rebuild_buffers = False  # all of them now, once
        with torch.device("cpu"):
            fresh = TransformerLM(self.model.arch)  # the same sizes: the same computed buffers
        mine = dict(self.model.named_modules())
        with torch.no_grad():
            for name, source in fresh.named_modules():
                for key in source._non_persistent_buffers_set:  # saved buffers (random tables) are loaded
                    value = getattr(source, key)
                    if value is not None:
                        getattr(mine[name], key).copy_(value)
        super()._init_weights(module)

    def get_input_embeddings(self) -> nn.Module:
        return self.model.tok_emb

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.tok_emb = value

    def get_output_embeddings(self) -> nn.Module:
        return self.model.lm_head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.model.lm_head = value

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutput | tuple[Tensor, ...]:
        """Logits (B, T, vocab) of ``input_ids`` (B, T), T at most ``max_len``; with ``labels`` (the
        ids themselves, -100 where ignored) also the mean next-token cross-entropy."""
        if input_ids is None or inputs_embeds is not None:
            raise ValueError("NasForCausalLM takes input_ids (token ids), not inputs_embeds")
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError(
                "NasForCausalLM has no padding mask (every position attends to all before it): pass "
                "sequences of one length, unpadded"
            )
        logits = self.model(input_ids)
        loss = None
        if labels is not None:
            loss = self._nas_loss(logits, labels)
        if return_dict is False:
            return (logits,) if loss is None else (loss, logits)
        return CausalLMOutput(loss=loss, logits=logits)

    def _nas_loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        """Transformers' causal-LM loss (``loss_function``, from 4.46 on): the mean cross-entropy of
        each position's logits against the next label, -100 ignored, in float32.  Transformers 4.45 has
        no ``loss_function``: the same mean is computed here."""
        loss_function = getattr(self, "loss_function", None)
        if loss_function is not None:
            return loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size)
        flat = logits[:, :-1].float().reshape(-1, logits.shape[-1])
        return nn.functional.cross_entropy(flat, labels[:, 1:].reshape(-1).to(flat.device), ignore_index=-100)

    def prepare_inputs_for_generation(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """No cache: each step reruns the model over the sequence so far, its last ``max_len`` tokens
        (the engine's ``greedy_generate`` window)."""
        window = input_ids[:, -self.model.arch.max_len :]
        if attention_mask is not None:
            attention_mask = attention_mask[:, -window.shape[1] :]
        return {"input_ids": window, "attention_mask": attention_mask}
