"""Hugging Face export: a trained checkpoint as a directory that ``transformers`` loads without nas-lm.

An architecture that *is* a Llama (every layer ``mha``, with or without
grouped key/value heads, and a SwiGLU FFN of one width; RMSNorm; rotary
positions; no biases, as every engine block) exports as a plain ``LlamaConfig``
plus ``model.safetensors``: ``LlamaForCausalLM.from_pretrained(DIR)`` loads it
with no remote code.  Any other decoder-only architecture (:func:`not_a_llama`
names what makes it one) exports with its modeling code in the directory
(:mod:`nas.hf_remote`, ``trust_remote_code=True``).

The weights map over unpermuted: the engine's RoPE pairs channel c with
c + d_head/2, Hugging Face's half-split convention (``nas.models.rotary``), so
Q and K need none of the permutation the Meta-checkpoint converters apply.  The
fused ``qkv`` projection splits into ``q_proj``/``k_proj``/``v_proj`` and the
gated FFN's ``fc_in`` (W1 then W3) into ``gate_proj``/``up_proj``.  RMSNorm's
eps is the engine's 1e-5 (Llama's ``norm_eps``).

The directory also gets a tokenizer ``AutoTokenizer`` loads: the byte-level
vocabulary (id = byte value, no merges) for byte corpora, or a copy of the
user's ``tokenizer.json`` when the data was tokenized with one; and a short
model card (``README.md``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas.errors import UserError
from nas.models import ArchConfig
from nas.models.ffn import ffn_width
from nas.models.norms import RMS_EPS
from nas.outputs import Reads
from nas.plural import plural

#: byte corpora: one id per byte value
BYTE_VOCAB = 256


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
        kv, kv0 = _kv_heads(arch, layer), _kv_heads(arch, first)
        if kv != kv0:
            return f"layer {i} has {kv} key/value heads and layer 0 {kv0} (a Llama has one count)"
        width, width0 = _width(arch, layer), _width(arch, first)
        if width != width0:
            return f"layer {i}'s FFN width is {width} and layer 0's {width0} (a Llama has one width)"
    return None


def _kv_heads(arch: ArchConfig, layer: Any) -> int:
    return int(getattr(layer.attention.options, "kv_heads", 0) or arch.n_heads)


def _width(arch: ArchConfig, layer: Any) -> int:
    return ffn_width(arch.d_model, layer.ffn.mult, layer.ffn.activation)


def check_llama(arch: ArchConfig, source: str) -> None:
    """Refuse, in one line, an architecture that does not export as a plain Llama."""
    why = not_a_llama(arch)
    if why is not None:
        raise UserError(
            f"{source}: architecture {arch.arch_id} is not a Llama: {why}; only Llama-shaped architectures "
            "(every layer mha + swiglu, rmsnorm, rope) export as a plain Llama (the others export with their "
            "modeling code: nas.hf_remote.export_remote)"
        )


def llama_config(arch: ArchConfig, extra: Mapping[str, Any] | None = None) -> Any:
    """The ``LlamaConfig`` of a Llama-shaped ``arch`` (check :func:`not_a_llama` first), with the
    engine's arch dict and arch_id (and ``extra``: metrics, data) recorded under ``nas_*`` keys."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=arch.vocab_size,
        hidden_size=arch.d_model,
        intermediate_size=_width(arch, arch.layers[0]),
        num_hidden_layers=arch.n_layers,
        num_attention_heads=arch.n_heads,
        num_key_value_heads=_kv_heads(arch, arch.layers[0]),
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
        **{f"nas_{k}": _finite(v) for k, v in (extra or {}).items()},
    )


def _finite(value: Any) -> Any:
    """JSON-safe: non-finite floats as None (config.json must be valid JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
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
    (``remote``: the remote-code directory of :mod:`nas.hf_remote`, else a plain Llama)."""
    m = doc.get("metrics") or {}
    recipe, budget, data = doc.get("recipe") or {}, doc.get("budget") or {}, doc.get("data") or {}

    def num(key: str, fmt: str) -> str:
        v = m.get(key)
        return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "not recorded"

    layer = arch.layers[0]
    kv = _kv_heads(arch, layer)
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
            f"({plural(kv, 'key/value head')}), SwiGLU FFN width {_width(arch, layer)}, RMSNorm, "
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


def export_llama(doc: Mapping[str, Any], out: Path, source: str, *, force: bool = False) -> dict[str, Any]:
    """Write ``doc`` (a loaded checkpoint, :func:`nas.checkpoint.load_checkpoint`) to the directory
    ``out`` (checked with :func:`plan_dir` first): config.json, generation_config.json,
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


#: files every export writes (the rest are the tokenizer's and the remote code's): checked before any work
ALWAYS_WRITTEN = ("config.json", "generation_config.json", "model.safetensors", "README.md")


def plan_dir(path: str, what: str, *, force: bool, keep: tuple[str, ...] = ()) -> Path:
    """Check an output directory before any work: refused when it is a file, a link to nothing, or holds
    files and ``force`` is not given (nas.outputs' rule for directories: a user's files are never lost).
    Even with ``force`` it is never a study's directory (its database), a runs directory, a directory
    inside a study's (its kept weights), nor where a file it writes is one of ``keep`` (the checkpoint
    being exported: replacing it would lose the very weights the export reads)."""
    from nas.outputs import HINT
    from nas.validate import check_writable_dir

    p = Path(path).expanduser()
    if p.is_symlink() and not p.exists():
        raise UserError(
            f"{what} {path!r} is a link to {os.readlink(p)!r}, which does not exist; give a directory"
        )
    if p.exists() and not p.is_dir():
        raise UserError(f"{what} {path!r} is a file; give a directory to write the model into")
    study = _study_dir(p)
    if study is not None:
        raise UserError(
            f"{what} {path!r} is {study}; the model is never written among a search's files, even with "
            "--force: give a new directory"
        )
    for name in ALWAYS_WRITTEN if p.is_dir() else ():
        if any(_same_file(p / name, k) for k in keep):
            raise UserError(
                f"{what} {path!r}: the export would replace {p / name}, the checkpoint it exports, even with "
                "--force; give another directory"
            )
    check_dir_reads(p, what, [("--checkpoint", k) for k in keep])
    if p.is_dir() and any(p.iterdir()) and not force:
        raise UserError(
            f"{what} {path!r} is a directory that holds files; give a new or empty one, or {HINT} "
            "(files of the same names are replaced, others kept)"
        )
    check_writable_dir(p, what)  # the nearest existing ancestor: a link to nothing on the way, read-only
    return p


#: the names an export may write besides ALWAYS_WRITTEN (a tokenizer's files, the bundled modeling code)
MAY_WRITE = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "modeling_nas.py")


def check_dir_reads(p: Path, what: str, reads: Reads = (), names: Sequence[str] = ()) -> None:
    """Refuse, even with ``--force``, an export directory inside an input directory (a corpus: the export's
    files would join it) or where a file it writes (``names``: those written; by default every name an
    export may write) is an input file (a tokenizer, a checkpoint): nas.outputs' rule
    (:func:`nas.outputs.check_not_input`, against ``reads`` and every input this process noted)."""
    from nas.outputs import check_not_input

    for name in names or (*ALWAYS_WRITTEN, *MAY_WRITE):
        check_not_input(p / name, f"{what} {str(p)!r}: the export's file", reads)


def _same_file(a: Path, b: str | os.PathLike[str]) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _study_dir(p: Path) -> str | None:
    """What ``p`` is when it is a search's: a study's directory (an SQLite database in it), a runs
    directory (a directory in it holding one) or a study's ``weights`` directory."""
    from nas.outputs import is_database, kept_weights_dir

    def databases(d: Path) -> list[Path]:
        try:
            found = [f for f in d.iterdir() if f.is_file() and is_database(f)]
        except OSError:
            return []
        return sorted(found, key=lambda f: (f.name.endswith(("-wal", "-shm", "-journal")), f.name))

    if not p.is_dir():
        return None
    if own := databases(p):
        return f"a study's directory (it holds {own[0].name})"
    try:
        inner = [d for d in p.iterdir() if d.is_dir() and databases(d)]
    except OSError:
        inner = []
    if inner:
        return f"a runs directory (its {inner[0].name}/ holds a study)"
    if kept_weights_dir(p):
        return "the directory where a search keeps its trials' weights"
    return None


class written_dir:  # noqa: N801 (used as a context manager, like a function)
    """Fill a temporary sibling of ``out``, then move it into place: a new or empty ``out`` is
    renamed over at once (readers see all or nothing); with ``force`` into a directory holding
    files, each file replaces its namesake (others kept), never a database nor one of ``keep`` (the
    checkpoint read).  ``out`` a link to a directory: that directory.  Removed if the block raises.
    ``written``: the names of the files written, once the block is done."""

    def __init__(self, out: Path, force: bool, keep: tuple[str, ...] = ()) -> None:
        self.out, self.force, self.keep = out, force, keep
        self.written: list[str] = []

    def __enter__(self) -> Path:
        from nas.outputs import partial

        self.target = self.out.resolve() if self.out.is_symlink() else self.out  # the directory a link names
        self.partial = partial(self.target.parent, self.target.name, directory=True)
        self.tmp = self.partial.__enter__()
        return self.tmp

    def __exit__(self, kind: Any, err: Any, tb: Any) -> None:
        from nas.interrupts import held
        from nas.outputs import is_database

        out = self.target
        try:
            if kind is not None:
                return
            os.chmod(self.tmp, 0o755)  # mkdtemp's directory is private, and some files the library writes
            umask = os.umask(0)
            os.umask(umask)
            names = sorted(f.name for f in self.tmp.iterdir())
            check_dir_reads(out, "--hf", names=names)  # again, with the names written: nothing moved yet
            for name in names:
                os.chmod(self.tmp / name, 0o666 & ~umask)  # what a plain open() gives
            if out.is_dir() and any(out.iterdir()):
                if not self.force:
                    raise UserError(f"{out}: files appeared there while this ran; they are left as they are")
                for name in names:  # checked before any is moved: all or nothing
                    there = out / name
                    if there.exists() and (
                        is_database(there) or any(_same_file(there, k) for k in self.keep)
                    ):
                        which = "a database" if is_database(there) else "the checkpoint it exports"
                        raise UserError(
                            f"{there}: the export would replace it ({which}), even with --force; nothing "
                            "was written"
                        )
                with held():  # a Ctrl-C half-way would leave the old export mixed with the new
                    for name in names:
                        os.replace(self.tmp / name, out / name)
            else:
                if out.is_dir():
                    out.rmdir()  # empty: replaced by the whole new one
                os.replace(self.tmp, out)
            self.written = names
        finally:
            self.partial.__exit__(None, None, None)  # removes what is left of the temporary directory
