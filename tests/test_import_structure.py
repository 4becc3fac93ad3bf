"""The import structure: no circles, ``nas/search`` and ``nas/hf`` stacks, ``nas.cli`` imported by entry
points only, no module over :data:`MAX_LINES` lines.

Every ``import`` and ``from ... import`` statement of every module under ``nas/`` and
``evaluators/`` counts, also one inside a function or under ``if TYPE_CHECKING``: a
circle closed by a deferred import is still a circle a reader has to hold in mind.
``from nas.x import y`` is an edge to the module ``nas.x.y`` when that is a module,
else to ``nas.x``; importing a module is not counted as importing its packages'
``__init__`` (Python runs those first whatever imports the module).  The two
imports made by name at run time are counted as edges too (``DYNAMIC_IMPORTS``):
``nas.cli`` imports its commands and ``nas.models.attention`` every block module.

The layers of ``nas/search``, lowest first; a module may import its own layer and
those below it, never one above::

    space, samplers, storage   what is searched, how it is sampled, where it is recorded
    reports                    the read side (best, show, plot)
    driver                     the ask-and-tell loop that uses all of the above

The modules of ``nas/hf`` form a stack too, highest first (:data:`HF_LAYERS`); each imports
only modules below it, and the package's ``__init__`` imports none of them::

    export     export --hf: as a plain Llama or with the modeling code
    bundle     the remote-code bundle (modeling.py and the engine modules, as flat files)
    card       the tokenizer, the model card, the published records
    llama      which architectures are a Llama, their config and weights
    directory  the export's directory
    modeling   the file every remote-code export holds as modeling_nas.py
    config     --arch config.json

``nas.cli`` is the program: only ``nas/__main__.py``, ``nas/cli.py`` and the
command modules (``nas/commands/``) may import it; library code that prints a hint
naming the program gets the name from :mod:`nas.program`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nas", "evaluators")

#: nas/search's subpackages, lowest layer first; a module imports its own layer or lower ones only
SEARCH_LAYERS = (("space", "samplers", "storage"), ("reports",), ("driver",))

#: nas/hf's modules, highest first; a module imports only those after it (none imports the package's __init__)
HF_LAYERS = ("export", "bundle", "card", "llama", "directory", "modeling", "config")

#: no module of the project's packages (nas/ and its subpackages, evaluators/) is longer: one module, one job
MAX_LINES = 500

#: module -> package whose every module it imports by name (importlib), which no import statement shows
DYNAMIC_IMPORTS = {"nas.cli": "nas.commands", "nas.models.attention": "nas.models.attention"}

#: the modules (or packages, with their modules) that may import nas.cli
CLI_IMPORTERS = ("nas.__main__", "nas.cli", "nas.commands")


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` if it is a module, else its longest prefix that is; None outside the project."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The project modules ``module`` imports -> the line of the first such import statement."""
    is_package = path.name == "__init__.py"
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, one level up per extra dot
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append(full if full in modules else base)
        for target in targets:
            owner = _owner(target, modules)
            if owner is not None and owner != module:
                found.setdefault(owner, node.lineno)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """Module -> {imported project module: line}, for every module of the project."""
    modules = module_files()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    for module, package in DYNAMIC_IMPORTS.items():
        line = next(
            node.lineno
            for node in ast.walk(ast.parse(modules[module].read_text()))
            if isinstance(node, ast.Attribute) and node.attr == "import_module"
        )
        for name in modules:
            if name.startswith(package + ".") and name != module:
                graph[module].setdefault(name, line)
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:  # the project's graph is far shallower than the recursion limit
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _one_cycle(component: list[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for succ in sorted(graph[node]):
                if succ == start:
                    return paths[node] + [start]
                if succ in members and succ not in paths:
                    paths[succ] = paths[node] + [succ]
                    nxt.append(succ)
        frontier = nxt
    return component  # unreachable: a strongly connected component holds a cycle through each member


def _describe(cycle: list[str], graph: dict[str, dict[str, int]], modules: dict[str, Path]) -> str:
    steps = [
        f"{a} ({modules[a].relative_to(ROOT)}:{graph[a][b]}) -> {b}"
        for a, b in zip(cycle[:-1], cycle[1:], strict=True)
    ]
    return "\n    ".join(steps)


def _search_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["nas", "search"] or len(parts) < 3:
        return None
    for level, names in enumerate(SEARCH_LAYERS):
        if parts[2] in names:
            return level
    return None


def test_graph_sees_the_project() -> None:
    """The walk finds the modules and edges it is meant to judge (a guard against an empty, passing graph)."""
    graph = import_graph()
    assert "nas.search.driver.loop" in graph and "evaluators.lm" in graph
    assert "nas.errors" in graph["nas.cli"]
    assert "nas.models.attention.base" in graph["nas.models.attention.mha"]
    assert "nas.commands.train" in graph["nas.cli"]  # DYNAMIC_IMPORTS
    assert "nas.models.attention.mha" in graph["nas.models.attention"]


def test_relative_imports_resolve(tmp_path: Path) -> None:
    """``from . import x`` and ``from ..y import z`` name the modules Python would import (the project
    has none today; a relative import added later must not slip past the walk)."""
    files = {
        "pkg": "pkg/__init__.py",
        "pkg.sub": "pkg/sub/__init__.py",
        "pkg.sub.a": "pkg/sub/a.py",
        "pkg.sub.b": "pkg/sub/b.py",
        "pkg.y": "pkg/y.py",
    }
    modules = {name: tmp_path / file for name, file in files.items()}
    for path in modules.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    a = modules["pkg.sub.a"]
    a.write_text("from . import b\nfrom ..y import z\n\ndef f():\n    from .. import sub\n")
    assert imports_of("pkg.sub.a", a, modules) == {"pkg.sub.b": 1, "pkg.y": 2, "pkg.sub": 5}
    modules["pkg.sub"].write_text("from .a import f\n")
    assert imports_of("pkg.sub", modules["pkg.sub"], modules) == {"pkg.sub.a": 1}


def test_no_import_cycles() -> None:
    graph = import_graph()
    modules = module_files()
    components = find_cycles(graph)
    message = "\n".join(
        f"import circle among {', '.join(c)}; one of its cycles:\n    "
        + _describe(_one_cycle(c, graph), graph, modules)
        for c in components
    )
    assert not components, message


def test_search_is_a_stack() -> None:
    """A module of nas/search imports its own layer or a lower one (SEARCH_LAYERS), never one above."""
    graph = import_graph()
    modules = module_files()
    upward = []
    for module, targets in sorted(graph.items()):
        level = _search_layer(module)
        if level is None:
            continue
        for target, line in sorted(targets.items()):
            above = _search_layer(target)
            if above is not None and above > level:
                upward.append(f"{modules[module].relative_to(ROOT)}:{line}: {module} imports {target}")
    layers = " < ".join("/".join(names) for names in SEARCH_LAYERS)
    assert not upward, f"upward imports in nas/search (layers, lowest first: {layers}):\n" + "\n".join(upward)


def test_only_entry_points_import_the_cli() -> None:
    graph = import_graph()
    modules = module_files()
    allowed = [m for m in graph if any(m == a or m.startswith(a + ".") for a in CLI_IMPORTERS)]
    offenders = [
        f"{modules[module].relative_to(ROOT)}:{targets['nas.cli']}: {module}"
        for module, targets in sorted(graph.items())
        if "nas.cli" in targets and module not in allowed
    ]
    assert not offenders, (
        "library modules import nas.cli (take the program's name from nas.program instead):\n"
        + "\n".join(offenders)
    )


def test_hf_is_a_stack() -> None:
    """A module of nas/hf imports only the modules below it in HF_LAYERS, and the package's ``__init__``
    none: ``--arch config.json`` (nas.hf.config) loads no exporter."""
    graph = import_graph()
    modules = module_files()
    found = sorted(m.rpartition(".")[2] for m in graph if m.startswith("nas.hf."))
    assert found == sorted(HF_LAYERS), f"nas/hf's modules {found}; HF_LAYERS places {sorted(HF_LAYERS)}"
    upward = [
        f"{modules[module].relative_to(ROOT)}:{line}: {module} imports {target}"
        for module, targets in sorted(graph.items())
        if module == "nas.hf" or module.startswith("nas.hf.")
        for target, line in sorted(targets.items())
        if (target == "nas.hf" or target.startswith("nas.hf."))
        and (
            module == "nas.hf"
            or target == "nas.hf"
            or HF_LAYERS.index(target.rpartition(".")[2]) <= HF_LAYERS.index(module.rpartition(".")[2])
        )
    ]
    order = " > ".join(HF_LAYERS)
    assert not upward, f"imports up or across nas/hf (highest first: {order}):\n" + "\n".join(upward)


def test_no_module_is_over_max_lines() -> None:
    """Every module of nas/ (recursively: nas/commands/ too) and evaluators/ has MAX_LINES lines or fewer."""
    modules = module_files()
    assert "nas.commands.train" in modules and "evaluators.lm" in modules  # the walk sees them
    long = sorted(
        (n, f"{path.relative_to(ROOT)}: {n} lines")
        for path in modules.values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    )
    assert not long, f"modules over {MAX_LINES} lines (split them by what each part does):\n" + "\n".join(
        line for _, line in long
    )
