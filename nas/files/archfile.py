"""Architecture files: YAML holding an ArchConfig and, optionally, how to train it.

Layout (every key but ``arch`` optional)::

    arch:    {d_model: 128, n_heads: 4, max_len: 128, layers: [...]}   # ArchConfig.to_dict()
    recipe:  {batch_size: 16, lr: 0.003, ...}                         # nas.spec.training.TrainRecipe
    budget:  {steps: 200}                                             # one of steps/tokens/flops/seconds
    data:    {corpus: shakespeare, vocab_size: 256, fingerprint: ...}  # written by export; or a name/path
    metrics: {val_loss: ...}                                          # measured, written by export
    source:  {study: ..., trial: ...}                                 # where it came from
    confirmed: {verdict: ..., scales: [...]}                          # `export --confirmed`: seeds x scales

A file with ``layers`` at the top level is read as a bare architecture.  ``data``
as export writes it is ``nas.data.Corpus.record()``: the corpus (and tokenizer)
by absolute path, name, vocabulary size and content fingerprint, which ``train`` uses to
find and check the data again (``nas.commands.train.load_data``).  A relative path written in
``data`` is relative to the file's directory (:mod:`nas.files.paths`), resolved by ``train``, the one
command that reads it.
"""

from __future__ import annotations

import os
from typing import Any

from nas.errors import ConfigError, UserError
from nas.files.outputs import Planned, write_output
from nas.files.yamlsafe import dump_yaml, read_yaml
from nas.hf.config import arch_from_hf_config, is_hf_config
from nas.models import ArchConfig
from nas.program import prog_name

__all__ = [
    "SECTIONS",
    "dump_yaml",
    "load_arch",
    "load_arch_file",
    "read_yaml",
    "save_arch",
    "write_text_atomic",
]

SECTIONS = ("arch", "recipe", "budget", "data", "metrics", "source", "confirmed")


def load_arch_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """All sections of an architecture file, with ``arch`` parsed into an ArchConfig."""
    raw = read_yaml(path, "architecture file")
    if not isinstance(raw, dict):
        raise ConfigError("must be a mapping with an 'arch' section", source=str(path))
    if "arch" not in raw and "d_model" not in raw and {"globals", "seed_archs", "search"} & set(raw):
        raise UserError(
            # read for --arch, --baseline and others: the line names no flag the user may not have typed
            f"{path}: is a search space (it has a globals: section), not an architecture file (a shipped "
            f"one's name such as vanilla, or one `export` wrote); search it with `{prog_name()} search "
            f"--space {path}`"
        )
    if is_hf_config(raw):  # a Hugging Face config.json: a Llama (Transformer++ at its shape), or our export
        try:
            raw = {"arch": arch_from_hf_config(raw)}
        except ConfigError as err:
            raise err.in_file(str(path)) from None
    if "layers" in raw and "arch" not in raw:
        raw = {"arch": raw}
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"unknown section; valid sections: {', '.join(SECTIONS)}", unknown[0], str(path))
    if "arch" not in raw:
        raise ConfigError("is missing", "arch", str(path))
    try:
        arch = ArchConfig.from_dict(raw["arch"])
    except ConfigError as err:
        raise err.at("arch").in_file(str(path)) from None
    if isinstance(raw["arch"], dict) and "rope_base" in raw["arch"] and arch.pos_encoding != "rope":
        # a value that changes nothing is a mistake about what trains (export writes it for rope only)
        raise ConfigError(
            f"has no effect with pos_encoding {arch.pos_encoding}: it is the base of rotary positions; "
            "set pos_encoding: rope, or leave rope_base out",
            "arch.rope_base",
            str(path),
        )
    for key in ("recipe", "budget", "metrics", "source", "confirmed"):
        if key in raw and not isinstance(raw[key], dict):
            raise ConfigError("must be a mapping", key, str(path))
    return {**raw, "arch": arch}


def load_arch(path: str | os.PathLike[str]) -> ArchConfig:
    """The ArchConfig in an architecture file (bare or with the other sections).  As ``--arch`` takes it:
    a file that exists, else a shipped architecture's name (``vanilla``, ``examples/archs/vanilla.yaml``),
    so the docs' examples work from any directory once the package is installed."""
    from nas.shipped import arch_path

    return load_arch_file(arch_path(path))["arch"]


def write_text_atomic(path: str | os.PathLike[str] | Planned, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file (a command's
    :class:`~nas.files.outputs.Planned` output: under the file-writing rule of :mod:`nas.files.outputs`)."""
    write_output(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def save_arch(
    path: str | os.PathLike[str] | Planned, arch: ArchConfig, header: str | None = None, **sections: Any
) -> None:
    """Write ``arch`` (and any other sections) as an architecture file; ``header`` becomes # comments."""
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise ValueError(f"unknown section {unknown[0]!r}; valid: {', '.join(SECTIONS)}")
    doc: dict[str, Any] = {"arch": arch.to_dict()}
    doc.update({k: v for k, v in sections.items() if v is not None})
    top = "".join(f"# {line}\n" for line in header.splitlines()) if header else ""
    write_text_atomic(path, top + dump_yaml(doc))
