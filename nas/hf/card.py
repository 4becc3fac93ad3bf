"""What an export publishes beside the weights: the tokenizer, the model card and the records in config.json.

The directory gets a tokenizer ``AutoTokenizer`` loads: the byte-level
vocabulary (id = byte value, no merges) for byte corpora, or a copy of the
user's ``tokenizer.json`` when the data was tokenized with one; and a short
model card (``README.md``).  What either names of the checkpoint's records is
:func:`published`: no directory of the exporting machine.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nas.errors import UserError
from nas.hf.llama import kv_heads, layer_width
from nas.models import ArchConfig
from nas.plural import plural

#: byte corpora: one id per byte value
BYTE_VOCAB = 256


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-ins for the 256 byte values (what ``ByteLevel`` pre-tokenizes to)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    keep += list(range(ord("®"), ord("ÿ") + 1))
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(keep, chars, strict=True)}


def byte_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` with one id per byte value (id = byte) and no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in sorted(byte_to_unicode().items())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=None)


def published_which(which: str) -> str:
    """:func:`tokenizer_for`'s line for the model card: the tokenizer's file name, not where it was."""
    prefix = "a copy of "
    return prefix + _last_name(which[len(prefix) :]) if which.startswith(prefix) else which


def tokenizer_for(data: Mapping[str, Any] | None, vocab_size: int, source: str) -> tuple[Any, str]:
    """The tokenizer to ship, and a line saying which: the user's recorded ``tokenizer.json``, else
    the byte vocabulary for a byte corpus, else (token files) none."""
    from transformers import PreTrainedTokenizerFast

    path = (data or {}).get("tokenizer")
    if path:
        file = Path(str(path)).expanduser()
        if not file.is_file():
            raise UserError(
                f"{source}: its data was tokenized with {path}, which is not there; put the tokenizer "
                "back there to export it with the model"
            )
        from nas.data.tokenize import load_tokenizer

        # checked as --tokenizer is: a file damaged since (UTF-16, cut short) was a traceback here
        tokenizer, fingerprint = load_tokenizer(file, shown=f"{source}: its tokenizer {path}")
        recorded = data.get("tokenizer_fingerprint") if data else None
        if recorded and recorded != fingerprint:  # another tokenizer would ship with the model, silently
            raise UserError(
                f"{source}: its data was tokenized with {path}, which has changed since (fingerprint "
                f"{fingerprint}, trained with {recorded}); put back the tokenizer it was trained with"
            )
        return PreTrainedTokenizerFast(tokenizer_object=tokenizer), f"a copy of {path}"
    if vocab_size == BYTE_VOCAB:
        return byte_tokenizer(), "byte-level (one id per byte value)"
    return None, f"none (the data were token ids, vocabulary {vocab_size:,}, with no tokenizer recorded)"


#: the keys of a checkpoint's records whose values may be paths on the exporting machine
_PATH_KEYS = {
    "data": ("corpus", "tokenizer", "name"),
    "metrics": ("corpus", "tokenizer"),
    "found": ("storage", "checkpoint"),
}


def published(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` (a checkpoint, or the records of one) as it is published with a model (config.json, the
    model card): each local path of its ``data`` (corpus, tokenizer) and ``found`` (a study's storage URL)
    reduced to its last name, so nothing exported names a directory of the user's machine; the
    fingerprints still identify the data."""
    out = dict(doc)
    for section, keys in _PATH_KEYS.items():
        record = out.get(section)
        if isinstance(record, Mapping):
            out[section] = {
                k: _last_name(v) if k in keys and isinstance(v, str) else v for k, v in record.items()
            }
    return out


def _last_name(text: str) -> str:
    """A path's or URL's last name: ``/home/me/runs/s/study.db`` -> ``study.db``, ``sqlite:////x/s.db`` ->
    ``sqlite:///s.db``; a bare name (a built-in corpus) as it is."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    if "/" not in rest and os.sep not in rest:
        return text
    name = rest.rstrip("/").replace(os.sep, "/").rsplit("/", 1)[-1].split("?", 1)[0]
    return f"{scheme}:///{name}" if sep else name


def _found_text(found: Any) -> str:
    """Where the model came from, for the model card: a search's kept trial, or a checkpoint."""
    if not isinstance(found, Mapping):
        return (
            "From a checkpoint trained by `train --save`; how its architecture was found and confirmed "
            "is in the study that produced it (`export --study S --best --hf`, from a search that kept "
            "its weights, says so here)."
        )
    loss = found.get("search_loss")
    origin = f" ({found['origin']})" if found.get("origin") else ""
    return (
        f"Trial {found.get('trial')}{origin} of the search study `{found.get('study')}` "
        f"(`{found.get('storage')}`), whose weights the search kept as the trial finished "
        f"(`resources.keep_weights`): not retrained"
        + (f"; its search loss {loss:.4f} nats/token" if isinstance(loss, (int, float)) else "")
        + ". It was not confirmed over seeds here: `nas confirm --study "
        f"{found.get('study')}` re-trains the finalists and baselines over seeds and scales, and "
        "`nas ladder` predicts them at a larger compute."
    )


def _context_text(arch: ArchConfig, recipe: Mapping[str, Any]) -> str:
    """The context the model holds and the one it was trained at: ``recipe.seq_len`` when the run set
    one shorter than ``max_len`` (positions past it were never trained)."""
    trained = recipe.get("seq_len") or arch.max_len
    if trained == arch.max_len:
        return f"trained context {arch.max_len} tokens"
    return (
        f"context {arch.max_len} tokens (max_len), trained on sequences of {trained} tokens (recipe.seq_len)"
    )


def model_card(
    arch: ArchConfig, doc: Mapping[str, Any], source: str, tokenizer: str, *, remote: bool = False
) -> str:
    """README.md for the exported directory: what the model is, how it was made, how to load it
    (``remote``: the remote-code directory of :mod:`nas.hf.bundle`, else a plain Llama)."""
    m = doc.get("metrics") or {}
    recipe, budget, data = doc.get("recipe") or {}, doc.get("budget") or {}, doc.get("data") or {}

    def num(key: str, fmt: str) -> str:
        v = m.get(key)
        return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "not recorded"

    layer = arch.layers[0]
    kv = kv_heads(arch, layer)
    tied = "tied" if arch.tie_embeddings else "untied"
    if remote:
        lines = [
            f"# nas-lm {arch.arch_id}: a decoder-only language model (remote code)",
            "",
            f"Exported by nas-lm from the checkpoint `{Path(source).name}` (`train --save`). Its modeling "
            "code is in this directory: `modeling_nas.py` (`NasConfig`, `NasForCausalLM`) and the `nas_*.py` "
            "files it imports, nas-lm's own model code. Transformers loads it with `trust_remote_code=True`, "
            "which runs that code; nas-lm need not be installed, only torch and transformers.",
            "",
            "## Architecture",
            "",
            f"- {plural(arch.n_layers, 'layer')}, d_model {arch.d_model}, {plural(arch.n_heads, 'head')}, "
            f"{arch.norm}, "
            f"{arch.pos_encoding} positions, {tied} embeddings",
            f"- layers: `{arch.summary()}`",
        ]
    else:
        lines = [
            f"# nas-lm {arch.arch_id}: a Llama-shaped decoder-only language model",
            "",
            f"Exported by nas-lm from the checkpoint `{Path(source).name}` (`train --save`). It is a plain "
            "`LlamaForCausalLM`: Transformers loads it with no remote code.",
            "",
            "## Architecture",
            "",
            f"- {plural(arch.n_layers, 'layer')}, d_model {arch.d_model}, {plural(arch.n_heads, 'head')} "
            f"({plural(kv, 'key/value head')}), SwiGLU FFN width {layer_width(arch, layer)}, RMSNorm, "
            "rotary positions "
            f"(base {arch.rope_base:g}), {tied} embeddings",
        ]
    lines += [
        f"- vocabulary {arch.vocab_size:,}; {_context_text(arch, recipe)}",
        f"- nas-lm arch_id `{arch.arch_id}`; the engine's architecture dict is `nas_arch` in config.json",
        "",
        "## Training and measured results",
        "",
        f"- data: {data.get('name') or data.get('corpus') or 'not recorded'}"
        + (f" (fingerprint {data['fingerprint']})" if data.get("fingerprint") else ""),
        f"- tokenizer: {tokenizer}",
        f"- recipe: {json.dumps(recipe, sort_keys=True) if recipe else 'not recorded'}; "
        f"budget: {json.dumps(budget, sort_keys=True) if budget else 'not recorded'}",
        f"- validation loss {num('val_loss', '.4f')} nats/token, perplexity {num('val_ppl', '.3f')}, "
        f"{num('val_bpb', '.4f')} bits/byte",
        f"- {num('params', ',')} parameters; "
        f"trained {num('steps', ',')} {'step' if m.get('steps') == 1 else 'steps'}, "
        f"{num('tokens', ',')} tokens, "
        f"{num('train_flops', '.4g')} FLOPs",
        "",
        "These are the numbers of the one training run in the checkpoint (config.json: `nas_metrics`).",
        "",
        "## How it was found",
        "",
        _found_text(doc.get("found")),
        "",
        "## Use",
        "",
        "```python",
    ]
    if remote:
        lines += [
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            'model = AutoModelForCausalLM.from_pretrained("DIR", trust_remote_code=True)',
        ]
    else:
        lines += [
            "from transformers import AutoTokenizer, LlamaForCausalLM",
            "",
            'model = LlamaForCausalLM.from_pretrained("DIR")',
        ]
    lines += [
        'tokenizer = AutoTokenizer.from_pretrained("DIR"' + (", trust_remote_code=True)" if remote else ")"),
        'ids = tokenizer("To be", return_tensors="pt").input_ids',
        "print(tokenizer.decode(model.generate(ids, max_new_tokens=40, do_sample=False)[0]))",
        "```",
        "",
    ]
    if remote:
        lines += [
            "`generate()` keeps no key/value cache (the model's blocks keep none): each new token reruns "
            f"the model over the sequence so far, its last {arch.max_len} tokens. There is no padding mask: "
            "a batch is sequences of one length. `AutoTokenizer` reads config.json first, so it too needs "
            "`trust_remote_code=True` (else Transformers asks).",
            "",
        ]
    return "\n".join(lines)
