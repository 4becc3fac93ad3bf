"""What README.md and docs/*.md name exists: flags, links, Python names, shipped files and blocks.

The docs are the user's first contact, and many of their statements are names a user types or looks
up: `nas confirm --trial 3,17`, `nas.models.seq2seq.greedy_decode`, `[hurdles](search_spaces.md#...)`,
`--space hybrid`. Each class is checked here mechanically against the code, so a renamed flag, a moved
function or a rewritten heading fails a test instead of a user. (Python examples that run whole are
tested beside their areas: tests/doc_examples.py.)
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from nas.cli import COMMANDS, build_parser
from nas.shipped import shipped_archs, shipped_spaces

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
IDS = [str(d.relative_to(ROOT)) for d in DOCS]

#: flags a doc names that belong to another program: (flag, the program)
FOREIGN = {
    "--head": "ray start",
    "--port": "ray start",
    "--section.field": "docs' placeholder for every spec flag",
    "--a.b": "jsonargparse's override form (spec.md)",
}
PROGRAM = r"(?:nas|python run_search\.py|python -m nas\.cli)"
COMMAND_LINE = re.compile(rf"^(?:\$ )?(?:{PROGRAM} )?({'|'.join(COMMANDS)})((?: .*)?)$")
#: the project's packages: a doc's example imports of them are checked
OURS = ("nas", "evaluators")
FLAG = re.compile(r"(?<![\w#-])--[a-z][\w.\-]*[\w]")  # not an anchor (gpu.md#--compile-...)


@cache
def command_flags() -> dict[str, set[str]]:
    """Every option string of every command's parser."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {o for a in p._actions for o in a.option_strings} for name, p in sub.choices.items()}


def script_flags() -> set[str]:
    """The flags of the scripts in benchmarks/ and experiments/ (the docs say how to run them)."""
    found: set[str] = set()
    for script in [*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "experiments").glob("*.py")]:
        found |= set(re.findall(r"add_argument\(\s*\"(--[\w\-]+)\"", script.read_text()))
    return found


def command_lines(text: str) -> list[tuple[str, str]]:
    """``(command, the rest)`` of every nas command line a doc shows: in code blocks (continuation lines
    joined, ``&&``/``;``/``|`` split, comments cut) and in inline code (`train --save PATH`)."""
    pieces: list[str] = []
    for block in re.findall(r"```[\w-]*\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            pieces += re.split(r"&&|;|\||`", re.split(r"\s#", line)[0])  # `...` quotes a command in a message
    for span in re.findall(r"`([^`\n]+)`", text):
        pieces += re.split(r"&&|;|\|", span)
    found = []
    for piece in pieces:
        m = COMMAND_LINE.match(" ".join(piece.split()))
        if m and (m.group(2).startswith(" --") or m.group(0).startswith(("nas ", "python"))):
            found.append((m.group(1), m.group(2)))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_flag_of_a_command_line_is_that_commands(doc: Path) -> None:
    flags = command_flags()
    wrong = [
        f"{command} {flag}"
        for command, rest in command_lines(doc.read_text())
        for flag in FLAG.findall(rest)
        if flag not in flags[command]
    ]
    assert not wrong, f"{doc.name}: flags the command does not take: {wrong}"


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_flag_a_doc_names_exists(doc: Path) -> None:
    """A flag named in prose (`--hurdle-min-trials N`) is some command's, a script's of benchmarks/ or
    experiments/, or a listed other program's."""
    known = set().union(*command_flags().values()) | script_flags() | set(FOREIGN)
    unknown = sorted(set(FLAG.findall(doc.read_text())) - known)
    assert not unknown, f"{doc.name}: flags that no command takes: {unknown}"


def test_the_command_line_reader_finds_what_it_checks() -> None:
    """The parser above sees the forms the docs use, so the two tests above can fail."""
    text = (
        "```bash\nnas search --space primer \\\n    --trials 40   # a comment --not-a-flag\n"
        "$ python run_search.py best --study s | head\n```\n"
        "Then `confirm --trial 3,17` and "
        "`nas export --study s --best --out a.yaml && nas train --arch a.yaml`."
    )
    assert command_lines(text) == [
        ("search", " --space primer --trials 40"),
        ("best", " --study s"),
        ("confirm", " --trial 3,17"),
        ("export", " --study s --best --out a.yaml"),
        ("train", " --arch a.yaml"),
    ]
    assert "--trials" not in command_flags()["confirm"]  # what `confirm --trials 5,3,7` would have been


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(doc: Path) -> frozenset[str]:
    """The anchors of ``doc``'s headings (a repeated heading gets -1, -2, ... as on GitHub)."""
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+\s+(.*)$", text, flags=re.M):
        slug = _slug(heading)
        seen[slug] = seen.get(slug, -1) + 1
        out.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
    return frozenset(out)


def links(doc: Path) -> list[tuple[Path, str]]:
    """``(target file, anchor)`` of every relative link and every `docs/NAME.md#anchor` mention."""
    text = doc.read_text()
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not target.startswith(("http://", "https://", "mailto:")):
            path, _, anchor = target.partition("#")
            out.append(((doc.parent / path).resolve() if path else doc, anchor))
    for name, anchor in re.findall(r"(?<![\w/])docs/([\w.]+\.md)(?:#([\w\-]+))?", text):
        out.append(((ROOT / "docs" / name).resolve(), anchor))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_link_reaches_a_file_and_a_heading(doc: Path) -> None:
    broken = [
        f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}#{anchor}"
        for target, anchor in links(doc)
        if not target.exists() or (anchor and target.suffix == ".md" and anchor not in anchors(target))
    ]
    assert not broken, f"{doc.name}: links to no file or no heading: {broken}"


def test_anchors_are_githubs() -> None:
    assert (
        _slug("Hurdles and a compute budget for the search") == "hurdles-and-a-compute-budget-for-the-search"
    )
    assert _slug("`--compile` and correctness") == "--compile-and-correctness"
    assert _slug("Menus per layer position (`at`)") == "menus-per-layer-position-at"
    assert "schedules-and-rungs" in anchors(ROOT / "docs" / "training.md")


def resolves(dotted: str) -> bool:
    """Whether ``nas.a.b.name`` is a module, or an attribute reached from the longest importable one."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_python_name_a_doc_gives_exists(doc: Path) -> None:
    """`nas.models.seq2seq.greedy_decode`, `evaluators.result.METRICS`: a module, or a name in one."""
    text = doc.read_text()
    names = set(re.findall(r"(?<![\w/.\-])((?:nas|evaluators)(?:\.[A-Za-z_]\w*)+)", text))
    names -= {n for n in names if n.endswith((".py", ".md", ".yaml"))}
    names -= {"nas.a.b"}  # export.md's pattern of a module path, not a name
    missing = sorted(n for n in names if not resolves(n))
    assert not missing, f"{doc.name}: names that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_import_of_a_python_example_works(doc: Path) -> None:
    """The project's imports of every ```python example (another library's are that library's)."""
    failed = []
    for block in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in OURS:
                module = importlib.import_module(node.module)
                failed += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in OURS and not resolves(alias.name):
                        failed.append(alias.name)
    assert not failed, f"{doc.name}: its examples import what is not there: {failed}"


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_shipped_name_a_command_line_gives_is_shipped(doc: Path) -> None:
    """`--arch vanilla`, `--space hybrid`, `--baseline primer_ez`: a shipped file's name; a path into the
    repository (`examples/archs/mdha.yaml`) is there. A user's own file (`mine.yaml`) and a placeholder
    (`FILE`) are neither."""
    names = {
        "--arch": set(shipped_archs()),
        "--baseline": set(shipped_archs()),
        "--space": set(shipped_spaces()),
    }
    wrong = []
    for flag, value in re.findall(r"(--arch|--space|--baseline)[ =]([^\s`|)]+)", doc.read_text()):
        if value.startswith(("examples/", "search_spaces/", "experiments/")):
            if not (ROOT / value).is_file():
                wrong.append(f"{flag} {value}")
        elif "/" not in value and "." not in value and not value.isupper() and value not in names[flag]:
            wrong.append(f"{flag} {value}")
    assert not wrong, f"{doc.name}: no such shipped file: {wrong}"


def test_the_blocks_and_activations_readme_lists_are_the_registrys() -> None:
    import nas

    readme = (ROOT / "README.md").read_text()
    table = readme.split("Blocks on offer (per layer):", 1)[1].split("\n\n", 2)[1]
    assert sorted(re.findall(r"^\| `(\w+)` \|", table, flags=re.M)) == sorted(nas.ATTENTION.names())
    sentence = readme.split("and FFN activations", 1)[1].split(";", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", sentence)) == sorted(nas.ACTIVATIONS)


def test_every_shipped_space_is_in_the_table_of_spaces() -> None:
    text = (ROOT / "docs" / "search_spaces.md").read_text()
    table = text.split("| file | what it asks |", 1)[1].split("\n\n", 1)[0]
    assert sorted(re.findall(r"^\| `(\w+)\.yaml` \|", table, flags=re.M)) == sorted(shipped_spaces())


def test_the_alias_table_of_spec_md_is_the_parsers() -> None:
    """Each short flag of docs/spec.md's table sets the field the table names."""
    text = (ROOT / "docs" / "spec.md").read_text()
    table = text.split("| alias | field | alias | field |", 1)[1].split("\n\n", 1)[0]
    sub = next(a for a in build_parser("search")._actions if isinstance(a, argparse._SubParsersAction))
    dest = {o: a.dest for a in sub.choices["search"]._actions for o in a.option_strings}
    rows = []
    for line in table.strip().splitlines()[1:]:  # below the |---| line
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows += [(cells[i], cells[i + 1]) for i in range(0, len(cells) - 1, 2) if cells[i]]
    assert len(rows) >= 20
    for aliases, field in rows:
        field = field.strip("`").removesuffix(" false")
        for alias in re.findall(r"`(--[\w\-]+)`", aliases):
            got = dest.get(alias)
            assert got is not None, f"spec.md names {alias}, which search does not take"
            assert got == field or (field.endswith(".*") and got.startswith(field[:-1])), (alias, got, field)


def yaml_examples() -> list[tuple[str, str]]:
    """``(doc, text)`` of every complete ```yaml example: a search space (`globals:` and `layers:`) or an
    architecture file (`arch:`), with nothing elided (`...`). adding_a_block.md's uses the block its own
    test adds (tests/models/test_adding_a_block.py)."""
    out = []
    for doc in DOCS:
        if doc.name == "adding_a_block.md":
            continue
        for text in re.findall(r"```yaml\n(.*?)```", doc.read_text(), flags=re.S):
            keys = set(re.findall(r"^(\w+):", text, flags=re.M))
            elided = re.search(r"^\s*\.\.\.\s*$|\{\.\.\.\}|, \.\.\.[,}\]]", text, flags=re.M)
            if not elided and ({"globals", "layers"} <= keys or "arch" in keys):
                out.append((doc.name, text))
    return out


@pytest.mark.parametrize(("doc", "text"), yaml_examples(), ids=[d for d, _ in yaml_examples()])
def test_every_yaml_example_loads(doc: str, text: str, tmp_path: Path) -> None:
    """A space as `search --space` reads it (every combination of its choices built once), an architecture
    file as `train --arch` does: a user copies these."""
    from nas.files.archfile import load_arch_file
    from nas.search.space.load import load_spec

    path = tmp_path / "example.yaml"
    path.write_text(text)
    if "arch" in yaml.safe_load(text):
        assert load_arch_file(path)["arch"].n_layers >= 1
    else:
        spec, space = load_spec(path)
        assert space.attention and spec.search.trials is not None or doc != "spec.md"


def test_the_yaml_examples_include_the_spec_and_the_layout() -> None:
    """The examples above are found: spec.md's whole spec, search_spaces.md's layout, seq2seq.md's file."""
    assert sorted(d for d, _ in yaml_examples()) == ["search_spaces.md", "seq2seq.md", "spec.md"]


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_spec_field_a_doc_names_exists(doc: Path) -> None:
    """`search.hurdle_min_trials`, `recipe.cooldown_frac`, `budget.rungs`: a field of the spec."""
    import dataclasses

    from nas.spec.sections import SECTIONS
    from nas.spec.training import BUDGET_KINDS, TrainRecipe

    fields = {f"recipe.{f.name}" for f in dataclasses.fields(TrainRecipe)}
    fields |= {f"{name}.{f.name}" for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)}
    fields |= {f"budget.{kind}" for kind in (*BUDGET_KINDS, "rungs")}
    named = re.findall(r"(?<![\w./-])((?:recipe|budget|data|search|resources)\.[a-z_]+)\b", doc.read_text())
    unknown = sorted(set(named) - fields - {"data.md"})  # a link to docs/data.md, not a field
    assert not unknown, f"{doc.name}: no such spec field: {unknown}"
