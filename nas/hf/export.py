"""Hugging Face export: a trained checkpoint as a directory that ``transformers`` loads without nas-lm.

:func:`export_hf` takes the path the architecture allows: a Llama-shaped one (:mod:`nas.hf.llama`)
exports as a plain ``LlamaForCausalLM`` (:func:`export_llama`), any other decoder-only one with its
modeling code (:func:`export_remote`: ``modeling_nas.py`` and the engine modules it needs, bundled by
:mod:`nas.hf.bundle`; ``trust_remote_code=True``).  Either way the directory is checked before any work
(:func:`nas.hf.directory.plan_dir`), gets the tokenizer and a model card (:mod:`nas.hf.card`), and the
export loads what it is about to write and compares its logits with the checkpoint's before anything is
written.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas.errors import UserError
from nas.hf.bundle import AUTO_MAP, CONFIG_CLASS, MODEL_CLASS, BundleError, bundle, loaded, reachable
from nas.hf.card import model_card, published, published_which, tokenizer_for
from nas.hf.directory import written_dir
from nas.hf.llama import check_llama, json_safe, not_a_llama, to_llama
from nas.models import ArchConfig


def check_exportable(arch: ArchConfig, source: str) -> None:
    """Refuse, in one line, what the remote-code export does not write (an encoder-decoder)."""
    if arch.task != "lm":
        raise UserError(
            f"{source}: architecture {arch.arch_id} is a {arch.task} (encoder-decoder) model; --hf exports "
            "decoder-only language models (task: lm) only"
        )


def check_finite(model: nn.Module, source: str) -> None:
    """Refuse, in one line, weights holding NaN or infinity (a run that diverged, an edited file): the
    export's self-check compares logits, and NaN logits equal nothing (it ended in a traceback)."""
    for name, value in model.state_dict().items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            raise UserError(
                f"{source}: its weight {name!r} holds {bad:,} NaN or infinite value(s) (a run that diverged, "
                "or an edited file): there is no model to export"
            )


def export_llama(doc: Mapping[str, Any], out: Path, source: str, *, force: bool = False) -> dict[str, Any]:
    """Write ``doc`` (a loaded checkpoint, :func:`nas.files.checkpoint.load_checkpoint`) to the directory
    ``out`` (checked with :func:`nas.hf.directory.plan_dir` first): config.json, generation_config.json,
    model.safetensors, the tokenizer and README.md.  Returns what it wrote and measured."""
    model, arch = doc["model"], doc["arch"]
    check_llama(arch, source)
    extra = {k: doc[k] for k in ("metrics", "data", "recipe", "budget", "found") if doc.get(k) is not None}
    tokenizer, which = tokenizer_for(doc.get("data"), arch.vocab_size, source)
    hf = to_llama(model, published(extra))
    diff = logit_difference(model, hf)
    if not diff <= 1e-4:  # the export checks itself: a mapping bug never ships silently
        raise RuntimeError(f"the exported Llama's logits differ from the checkpoint's by {diff:.3g}")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # stderr stays for this tool's lines
    done = written_dir(out, force, keep=(source,))
    with done as tmp:
        hf.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / "README.md").write_text(model_card(arch, published(doc), source, published_which(which)),
                                       encoding="utf-8")  # fmt: skip
    return {"max_logit_difference": diff, "tokenizer": which, "files": done.written}


@torch.no_grad()
def logit_difference(model: nn.Module, hf: Any, seed: int = 0) -> float:
    """max |engine logits - Llama logits| over two random windows of the trained context, float32."""
    arch = model.arch
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, arch.vocab_size, (2, arch.max_len), generator=g)
    ours = model.float().eval()(idx)
    theirs = hf(input_ids=idx).logits
    return float((ours - theirs).abs().max())


def remote_model(module: types.ModuleType, model: nn.Module, extra: Mapping[str, Any]) -> Any:
    """The bundle's ``NasForCausalLM`` (float32, eval mode) holding ``model``'s weights."""
    arch = model.arch
    config = getattr(module, CONFIG_CLASS)(
        nas_arch=arch.to_dict(),
        nas_arch_id=arch.arch_id,
        architectures=[MODEL_CLASS],
        auto_map=dict(AUTO_MAP),
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        **{f"nas_{k}": json_safe(v) for k, v in extra.items()},
    )
    hf = getattr(module, MODEL_CLASS)(config).float().eval()
    hf.model.load_state_dict(model.state_dict())  # the same module tree: every name, strictly
    hf.generation_config.use_cache = False
    return hf


def export_remote(doc: Mapping[str, Any], out: Path, source: str, *, force: bool = False) -> dict[str, Any]:
    """Write ``doc`` (a loaded checkpoint) to ``out`` (checked with :func:`nas.hf.directory.plan_dir`
    first) as a remote-code directory: config.json, generation_config.json, model.safetensors,
    modeling_nas.py and the bundled engine modules, the tokenizer and README.md.  Returns what it wrote
    and measured."""
    from transformers.utils import logging as hf_logging

    model, arch = doc["model"], doc["arch"]
    check_exportable(arch, source)
    extra = {k: doc[k] for k in ("metrics", "data", "recipe", "budget", "found") if doc.get(k) is not None}
    tokenizer, which = tokenizer_for(doc.get("data"), arch.vocab_size, source)
    files = bundle(model)
    hf_logging.disable_progress_bar()
    done = written_dir(out, force, keep=(source,))
    with done as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        found = reachable(tmp)
        if found != set(files):  # what transformers would copy is what was written
            raise BundleError(
                f"transformers' loader would copy {sorted(found)}, not the bundle {sorted(files)}"
            )
        with loaded(files) as module:
            hf = remote_model(module, model, published(extra))
            diff = logit_difference(model, hf)
            if not diff <= 1e-5:  # the export checks itself: a bundling bug never ships silently
                raise RuntimeError(f"the bundled model's logits differ from the checkpoint's by {diff:.3g}")
            hf.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / "README.md").write_text(
            model_card(arch, published(doc), source, published_which(which), remote=True), encoding="utf-8"
        )
    return {"max_logit_difference": diff, "tokenizer": which, "files": done.written, "code": sorted(files)}


def export_hf(doc: Mapping[str, Any], out: Path, source: str, *, force: bool = False) -> dict[str, Any]:
    """``doc`` (a loaded checkpoint) to the directory ``out`` by the path its architecture takes: a
    plain Llama (:func:`export_llama`) when it is one, else with its modeling code
    (:func:`export_remote`); an encoder-decoder is refused.  The result says which (``llama``)."""
    check_exportable(doc["arch"], source)
    shape = getattr(doc["model"], "shape", None)
    if shape is not None and not shape.is_base:
        raise UserError(
            f"{source}: trained under completep away from its base shape (width x{shape.width:g}, depth "
            f"x{shape.depth:g}): its residual and logit multipliers have no Hugging Face form here; export a "
            "standard model, or one at its base shape"
        )
    llama = not_a_llama(doc["arch"]) is None
    done = (export_llama if llama else export_remote)(doc, out, source, force=force)
    return {**done, "llama": llama}
