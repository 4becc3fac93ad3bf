"""The remote-code bundle: an architecture's modeling code as flat files, loadable without nas-lm.

An architecture that is not a Llama (:func:`nas.hf.llama.not_a_llama`) exports as a directory that carries
its own modeling code: ``config.json`` (a ``NasConfig``, ``model_type: nas_lm``, the arch dict, and
``auto_map`` naming ``modeling_nas.NasConfig`` and ``modeling_nas.NasForCausalLM``), ``model.safetensors``
(the engine model's state dict under ``model.``, a tied head stored once), ``modeling_nas.py``
(:mod:`nas.hf.modeling`) and the engine modules the model needs, as flat files.

:func:`bundle` writes those files mechanically from the installed ``nas`` sources (``inspect.getsource``,
so a wheel install works as a checkout does).  It starts from ``nas.hf.modeling`` and the modules of
every class the built model instantiates (the architecture's attention blocks among them; a mixture's
components too), and follows each module's ``nas.*`` imports, inside functions included.  Each module
becomes ``nas_a_b_c.py`` (``nas.a.b.c``), and each ``from nas.a.b.c import x`` in it
``from .nas_a_b_c import x``: the one form transformers' dynamic-module loader follows
(``transformers.dynamic_module_utils.get_relative_imports`` reads ``from .name import`` and
``import .name`` by a regular expression; ``from . import name`` and absolute imports of a sibling are
not followed, so the loader would not copy the file).  A name imported from a package is taken from
the submodule the package's ``__init__`` imports it from, so no package ``__init__`` is bundled
(``nas.models.attention`` discovers its blocks by listing its directory, which a flat bundle cannot).
The block modules register themselves when imported, so ``modeling_nas.py`` imports them; it also
imports every other bundled file by name, since transformers before 5.10 copies only the files the
module itself imports (:func:`add_copy_imports`).  Anything
else (``import nas.x``, a star import, a name defined in a package's ``__init__``) is refused: a
bug of this module's, named, never a broken directory.

The loader also imports, before anything runs, every absolute import of each file (``check_imports``,
outside ``try`` blocks) and refuses the model when one is not installed; :func:`bundle` checks that
every bundled file imports only the standard library, torch, transformers and the other bundled files.
The export then loads the bundle as the loader will (only the files reachable by those imports, none
from ``nas``) and compares its logits with the checkpoint's before anything is written.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.util
import secrets
import sys
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch import nn

from nas.errors import UserError
from nas.models import AttentionBlock

#: the module that becomes ``modeling_nas.py``; its classes are what ``auto_map`` names
MODELING = "nas.hf.modeling"
MODELING_FILE = "modeling_nas.py"
CONFIG_CLASS, MODEL_CLASS = "NasConfig", "NasForCausalLM"
AUTO_MAP = {
    "AutoConfig": f"modeling_nas.{CONFIG_CLASS}",
    "AutoModelForCausalLM": f"modeling_nas.{MODEL_CLASS}",
}
#: the line of ``nas.hf.modeling`` after which the bundle imports the architecture's blocks
BLOCKS_MARKER = "# The architecture's attention blocks: the export writes their imports below"
#: what bundled code may import besides the standard library and the other bundled files
ALLOWED = frozenset({"torch", "transformers"})


class BundleError(RuntimeError):
    """The engine's code cannot be bundled as it is written (a bug of nas-lm's, not a user's error)."""


def file_name(module: str) -> str:
    """The bundled file of ``module``: ``modeling_nas.py``, or ``nas_a_b.py`` for ``nas.a.b``."""
    return MODELING_FILE if module == MODELING else module.replace(".", "_") + ".py"


def instantiated_modules(model: nn.Module) -> list[str]:
    """The ``nas`` modules defining the classes ``model`` is built of (its blocks, a mixture's parts)."""
    return sorted({type(m).__module__ for m in model.modules() if type(m).__module__.split(".")[0] == "nas"})


def block_classes(model: nn.Module) -> list[tuple[str, str]]:
    """(module, class name) of every attention block class in ``model``: importing them registers them."""
    return sorted(
        {(type(m).__module__, type(m).__name__) for m in model.modules() if isinstance(m, AttentionBlock)}
    )


def bundle(model: nn.Module) -> dict[str, str]:
    """The flat modeling files for ``model`` (an engine ``TransformerLM``): file name -> source."""
    todo = [MODELING, *instantiated_modules(model)]
    done: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in done:
            continue
        text, deps = rewrite(name, module_source(name))
        if name == MODELING:
            text = add_block_imports(text, block_classes(model))
        done[name] = text
        todo.extend(sorted(deps))
    done[MODELING] = add_copy_imports(done[MODELING], sorted(set(done) - {MODELING}))
    files: dict[str, str] = {}
    for name in sorted(done):
        if file_name(name) in files:
            raise BundleError(f"two modules bundle as {file_name(name)}")
        files[file_name(name)] = header(name) + done[name]
    check_bundle(files)
    return files


def header(module: str) -> str:
    return (
        f"# Bundled by nas-lm (export --hf) from its module {module}: the engine's own code, with its nas.*\n"
        "# imports rewritten to the flat files beside it (transformers copies them with modeling_nas.py).\n"
    )


def module_source(name: str) -> str:
    """The source text of module ``name``, read through its loader (a checkout or a wheel), not run."""
    spec = importlib.util.find_spec(name)
    try:
        text = spec.loader.get_source(name) if spec is not None and spec.loader is not None else None  # type: ignore[attr-defined]
    except (ImportError, OSError, AttributeError):
        text = None
    if text is None:
        raise UserError(
            f"export --hf copies nas-lm's model code into the directory, and the source of {name} is not "
            "readable here; reinstall nas-lm with its .py files"
        )
    return text


def is_package(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.submodule_search_locations is not None


def rewrite(name: str, source: str) -> tuple[str, set[str]]:
    """``source`` (of module ``name``) with every ``nas`` import made relative to its flat file, and
    the modules those imports need."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    package = name if is_package(name) else name.rpartition(".")[0]
    edits: list[tuple[int, int, list[str]]] = []
    deps: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "nas":
                    raise BundleError(
                        f"{name}, line {node.lineno}: `import {alias.name}` cannot be bundled (transformers "
                        "copies only files imported as `from .name import x`); write `from nas.x import y`"
                    )
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        target = node.module or ""
        if node.level:
            target = importlib.util.resolve_name("." * node.level + target, package)
        if target.split(".")[0] != "nas":
            continue
        wanted: dict[str, list[str]] = {}
        for alias in node.names:
            if alias.name == "*":
                raise BundleError(
                    f"{name}, line {node.lineno}: a star import from {target} cannot be bundled"
                )
            where, real = resolve(target, alias.name, name)
            as_name = alias.asname or alias.name
            wanted.setdefault(where, []).append(real if real == as_name else f"{real} as {as_name}")
            deps.add(where)
        first, last = lines[node.lineno - 1], lines[node.end_lineno - 1]  # type: ignore[index]
        if first[: node.col_offset].strip() or last[node.end_col_offset :].split("#")[0].strip():
            raise BundleError(
                f"{name}, line {node.lineno}: an import that shares its line cannot be rewritten"
            )
        indent = first[: node.col_offset]
        new = [
            f"{indent}from .{file_name(m)[:-3]} import {', '.join(names)}\n" for m, names in wanted.items()
        ]
        edits.append((node.lineno, node.end_lineno or node.lineno, new))
    for start, end, new in sorted(edits, reverse=True):
        lines[start - 1 : end] = new
    return "".join(lines), deps


def resolve(module: str, attr: str, where: str) -> tuple[str, str]:
    """The module that defines ``module.attr`` and its name there, through packages' re-exports."""
    if not is_package(module):
        return module, attr
    if importlib.util.find_spec(f"{module}.{attr}") is not None:
        raise BundleError(f"{where}: `from {module} import {attr}` imports a module, which cannot be bundled")
    for node in ast.parse(module_source(module)).body:  # a package: where its __init__ takes attr from
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("nas."):
            for alias in node.names:
                if (alias.asname or alias.name) == attr:
                    return resolve(node.module or "", alias.name, where)
    raise BundleError(f"{where}: {module}.{attr} is defined in the package's __init__, which is not bundled")


def add_block_imports(text: str, blocks: list[tuple[str, str]]) -> str:
    """``modeling_nas.py`` with an import of each block class after the marker line."""
    lines = text.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith(BLOCKS_MARKER)]
    if len(at) != 1:
        raise BundleError(f"{MODELING} has {len(at)} lines starting {BLOCKS_MARKER!r}; it needs one")
    new = [f"from .{file_name(m)[:-3]} import {cls}  # noqa: F401\n" for m, cls in blocks]
    lines[at[0] + 1 : at[0] + 1] = new
    return "".join(lines)


#: the comment above the imports that make ``modeling_nas.py`` name every bundled file itself
COPY_COMMENT = (
    "# Every bundled file, imported here by name: transformers before 5.10 copies from a local directory\n"
    "# only the files modeling_nas.py itself imports (5.10 on follow their imports too).\n"
)


def add_copy_imports(text: str, modules: list[str]) -> str:
    """``modeling_nas.py`` importing each of ``modules`` that it does not import itself, after its block
    imports.  Transformers before 5.10 (4.45.2 and 4.57.6 measured; 5.0 to 5.9 read) copies from a local
    directory only the files named by the module's own ``from .name import`` lines, then looks for the
    whole recursive set in its cache (``FileNotFoundError`` on a file an engine module imports); 5.10 on
    copy the recursive set.  A module's ``__name__``, under a private alias, binds nothing the file uses."""
    named = {m for level, m in imports_of(text) if level == 1}
    missing = [m for m in modules if file_name(m)[:-3] not in named]
    if not missing:
        return text
    lines = text.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith(BLOCKS_MARKER)]
    if len(at) != 1:
        raise BundleError(f"{MODELING} has {len(at)} lines starting {BLOCKS_MARKER!r}; it needs one")
    end = at[0] + 1
    while end < len(lines) and lines[end].startswith("from ."):  # after the block imports
        end += 1
    stems = [file_name(m)[:-3] for m in missing]
    new = [COPY_COMMENT] + [f"from .{s} import __name__ as _{s}  # noqa: F401\n" for s in stems]
    lines[end:end] = new
    return "".join(lines)


def imports_of(source: str) -> Iterator[tuple[int, str]]:
    """(level, module) of every import in ``source``: level 0 absolute, 1 a sibling file."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield 0, alias.name
        elif isinstance(node, ast.ImportFrom):
            yield node.level, node.module or ""


def check_bundle(files: Mapping[str, str]) -> None:
    """Every import of every file: the standard library, torch, transformers, or a file of the bundle."""
    for file, source in files.items():
        for level, module in imports_of(source):
            top = module.split(".")[0]
            if level == 0 and top not in ALLOWED and top not in sys.stdlib_module_names:
                raise BundleError(
                    f"bundled {file} imports {module}, which is not torch, transformers or stdlib"
                )
            if level == 1 and f"{module}.py" not in files:
                raise BundleError(f"bundled {file} imports .{module}, which is not bundled")
            if level > 1 or (level == 1 and "." in module):
                raise BundleError(
                    f"bundled {file} imports {'.' * level}{module}; the bundle is one flat directory"
                )


def reachable(directory: Path) -> set[str]:
    """The files transformers' loader copies with ``modeling_nas.py`` from ``directory``, by the rules of
    old and new releases alike: the files ``modeling_nas.py`` itself imports (all that releases before 5.10
    copy) that are also in the recursive set (``get_relative_import_files``: what 5.10 on copy, and what
    every release then reads)."""
    from transformers.dynamic_module_utils import get_relative_import_files, get_relative_imports

    modeling = str(directory / MODELING_FILE)
    recursive = {Path(f).name for f in get_relative_import_files(modeling)}
    direct = {f"{m}.py" for m in get_relative_imports(modeling)}
    return {MODELING_FILE} | (recursive & direct)


class _Sources(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``package.stem`` from the given file texts (the bundle, loaded without writing bytecode)."""

    def __init__(self, package: str, files: Mapping[str, str]) -> None:
        self.package, self.files = package, dict(files)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        head, _, stem = fullname.rpartition(".")
        if head == self.package and f"{stem}.py" in self.files:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        stem = module.__name__.rpartition(".")[2]
        code = compile(self.files[f"{stem}.py"], f"<{self.package}/{stem}.py>", "exec")
        exec(code, module.__dict__)  # noqa: S102 (this module's own generated code)


@contextmanager
def loaded(files: Mapping[str, str]) -> Iterator[types.ModuleType]:
    """``modeling_nas`` imported from ``files`` alone, under a package name of its own (removed after)."""
    package = f"_nas_hf_bundle_{secrets.token_hex(6)}"
    finder = _Sources(package, files)
    root = types.ModuleType(package)
    root.__path__ = []
    sys.modules[package] = root
    sys.meta_path.insert(0, finder)
    try:
        yield importlib.import_module(f"{package}.{MODELING_FILE[:-3]}")
    finally:
        sys.meta_path.remove(finder)
        for key in [k for k in sys.modules if k == package or k.startswith(package + ".")]:
            del sys.modules[key]
