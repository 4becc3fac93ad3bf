"""Shipped data: search_spaces/*.yaml and examples/archs/*.yaml install with the package (nas.shipped).

Names resolve to the shipped files (a file of the user's wins), the wheel carries
every file, and an installed wheel run from an empty directory finds them; hints
name the command that was run; the torch-free modules stay torch-free.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from nas import shipped
from nas.cli import main, prog_name
from nas.errors import UserError
from nas.shipped import arch_path, shipped_arch, shipped_archs, shipped_spaces, space_path

ROOT = Path(__file__).resolve().parents[1]
SPACES = sorted(p.stem for p in (ROOT / "search_spaces").glob("*.yaml"))
ARCHS = sorted(p.stem for p in (ROOT / "examples" / "archs").glob("*.yaml"))


# -- names ---------------------------------------------------------------------------------------------


def test_the_shipped_names_are_the_repository_files() -> None:
    assert shipped_spaces() == SPACES and "default" in SPACES and "primer" in SPACES
    assert shipped_archs() == ARCHS and {"vanilla", "primer_ez"} <= set(ARCHS)


@pytest.mark.parametrize("arg", ["primer", "primer.yaml", "search_spaces/primer.yaml"])
def test_a_space_name_is_the_shipped_file(arg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no such file here: search_spaces/primer.yaml as the docs spell it too
    path = space_path(arg)
    assert path.is_file() and path.read_text() == (ROOT / "search_spaces" / "primer.yaml").read_text()


@pytest.mark.parametrize("arg", ["vanilla", "vanilla.yaml", "examples/archs/vanilla.yaml"])
def test_an_arch_name_is_the_shipped_file(arg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert arch_path(arg).read_text() == (ROOT / "examples" / "archs" / "vanilla.yaml").read_text()
    assert shipped_arch(arg.rpartition("/")[2]) == arch_path(arg)


@pytest.mark.parametrize("arg", ["vanilla", "examples/archs/primer_ez.yaml"])
def test_the_python_api_takes_the_names_the_cli_does(
    arg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nas.load_arch("examples/archs/vanilla.yaml")` (docs/training.md, the package docstring) from a
    directory that has no such file read the shipped one, as `--arch` does; it was 'file not found'."""
    import nas
    from nas.files.archfile import load_arch_file

    monkeypatch.chdir(tmp_path)
    assert nas.load_arch(arg) == load_arch_file(arch_path(arg))["arch"]
    with pytest.raises(UserError, match="nor a shipped architecture"):
        nas.load_arch("no_such_arch")


def test_a_file_of_the_users_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nas.commands.search import resolve_space_path

    monkeypatch.chdir(tmp_path)
    for rel in ("primer.yaml", "primer", "search_spaces/default.yaml", "examples/archs/vanilla.yaml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("mine\n")
    assert space_path("primer.yaml") == Path("primer.yaml") and space_path("primer") == Path("primer")
    assert resolve_space_path(None) == Path("search_spaces/default.yaml")  # the default: the local one
    assert arch_path("examples/archs/vanilla.yaml") == Path("examples/archs/vanilla.yaml")
    assert arch_path(str(tmp_path / "primer")) == tmp_path / "primer"


@pytest.mark.parametrize(
    ("resolve", "kind", "names"),
    [(space_path, "search space", SPACES), (arch_path, "architecture file", ARCHS)],
)
def test_an_unknown_name_is_one_line_listing_the_shipped_ones(
    resolve, kind, names, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as info:
        resolve("nope.yaml")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"nope.yaml: {kind} not found: no such file, nor a shipped")
    assert msg.endswith(f"(shipped: {', '.join(names)})")


def test_a_missing_path_is_left_to_the_reader(tmp_path: Path) -> None:
    """Only a bare name (or the repository's own spelling) can name a shipped file."""
    assert space_path("elsewhere/primer.yaml") == Path("elsewhere/primer.yaml")
    assert arch_path(tmp_path / "vanilla.yaml") == tmp_path / "vanilla.yaml"


def test_the_cli_takes_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--arch", "no_such_arch", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no_such_arch: architecture file not found") and "vanilla" in err
    assert "\n" not in err
    from nas.commands.search import resolve_space_path

    assert resolve_space_path(None) == space_path("default") == shipped.shipped_space("default")
    assert resolve_space_path("primer") == shipped.shipped_space("primer.yaml")


def test_the_package_list_names_every_package_directory() -> None:
    """pyproject lists the packages (packages.find cannot add the mapped data packages): none forgotten."""
    tomllib = pytest.importorskip("tomllib")
    from setuptools import find_packages

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = find_packages(str(ROOT), include=["nas*", "evaluators*"])
    assert sorted(config["packages"]) == sorted([*found, "nas.shipped.spaces", "nas.shipped.archs"])
    mapped = {"nas.shipped.spaces": "search_spaces", "nas.shipped.archs": "examples/archs"}
    assert config["package-dir"] == mapped


# -- torch-free modules and the program name in hints --------------------------------------------------


def test_the_light_modules_do_not_import_torch() -> None:
    code = (
        "import sys, nas, nas.errors, nas.validate, nas.files.yamlsafe, nas.shipped, nas.cli; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "from nas import UserError; assert 'torch' not in sys.modules, 'torch imported by UserError'; "
        "from nas import load_arch; assert 'torch' in sys.modules; "
        "import nas.files.checkpoint; assert callable(nas.compute), nas.compute; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_prog_name_follows_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/home/u/nas/run_search.py", "best"])
    assert prog_name() == "python run_search.py"
    monkeypatch.setattr(sys, "argv", ["/home/u/.venv/bin/nas", "best"])
    assert prog_name() == "nas"
    monkeypatch.setattr(sys, "argv", ["/usr/lib/python3/site-packages/pytest/__main__.py"])
    assert prog_name() == "nas"  # run from other code: the console script is the command that works


def test_hints_name_the_command_that_was_run(tmp_path: Path) -> None:
    """`best` with no study: the hint says how to start one, spelled as the user ran the tool."""
    script = tmp_path / "bin" / "nas"  # what a console script is: a file named nas that calls main
    script.parent.mkdir()
    script.write_text("import sys\nfrom nas.cli import main\nsys.exit(main())\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    best = ["best", "--study", "s", "--runs-dir", str(tmp_path / "runs")]
    for argv, prog in (
        ([str(ROOT / "run_search.py")], "python run_search.py"),
        (["-m", "nas.cli"], "python -m nas.cli"),
        ([str(script)], "nas"),
    ):
        proc = subprocess.run(
            [sys.executable, *argv, *best], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"(start one with: {prog} search --study NAME)" in proc.stderr, proc.stderr


def test_no_hint_in_the_code_spells_the_program_name() -> None:
    """Printed commands come from prog_name(): `python run_search.py` written out is wrong under nas.

    nas/program.py defines prog_name and nas/cli.py is the entry point: both may say it."""
    spelled = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(ROOT.glob("nas/**/*.py"))
        if p.name not in ("cli.py", "program.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "python run_search.py" in line
    ]
    assert spelled == []


# -- the wheel ---------------------------------------------------------------------------------------------


def _build_wheel(out: Path) -> Path:
    """The wheel `pip install <checkout>` builds, built from a copy (leaving no build/ in the checkout)."""
    pytest.importorskip("setuptools")
    src = out / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("nas", "evaluators", "search_spaces", "examples"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    proc = subprocess.run(
        [*pip, "-w", str(out / "dist"), str(src)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (out / "dist").glob("nas_lm-*.whl")
    return wheel


@pytest.mark.slow
def test_an_installed_wheel_carries_and_finds_the_shipped_files(tmp_path: Path, corpus_dir: Path) -> None:
    """pip install (not -e) into a directory, run from an empty one: train --arch vanilla and the search."""
    wheel = _build_wheel(tmp_path / "build")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"nas/shipped/spaces/{n}.yaml" for n in SPACES} <= names
    assert {f"nas/shipped/archs/{n}.yaml" for n in ARCHS} <= names
    sources = {
        p.relative_to(ROOT).as_posix()
        for d in ("nas", "evaluators")
        for p in ROOT.glob(f"{d}/**/*.py")
        if "__pycache__" not in p.parts
    }
    assert sources <= names, sorted(sources - names)

    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
    proc = subprocess.run(
        [*pip, "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    # the dependencies come from this interpreter's site-packages; nas only from the installed wheel
    env = {**os.environ, "PYTHONPATH": str(site)}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *argv], cwd=empty, env=env, capture_output=True, text=True, timeout=600
        )

    where = run("-c", "import nas.shipped as s; print(s.__file__); print(s.space_path('default'))")
    assert where.returncode == 0, where.stderr[-2000:]
    assert all(Path(line).is_relative_to(site) for line in where.stdout.split()), where.stdout

    train = run("-m", "nas.cli", "train", "--arch", "vanilla", "--steps", "2", "--data", str(corpus_dir),
                "--threads", "1", "--json")  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    metrics = json.loads(train.stdout.strip().splitlines()[-1])
    assert metrics["steps"] == 2 and metrics["val_loss"] > 0

    nas = str(site / "bin" / "nas")  # the console script pip wrote
    search = run(nas, "search", "--trials", "1", "--steps", "2", "--local", "--data", str(corpus_dir))
    assert search.returncode == 0, search.stderr[-3000:]
    assert "next:        nas best --study default" in search.stdout, search.stdout
    assert (empty / "runs" / "default" / "study.db").is_file()
    assert sorted(p.name for p in empty.iterdir()) == ["runs"]
