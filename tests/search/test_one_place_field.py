"""A spec field is declared in one place: one line added to a section reaches everything that reads specs.

The test copies ``nas/``, adds one field, ``search.example_knob``, to
:class:`~nas.spec.sections.SearchSection` in the copy (no other edit), and runs,
in a fresh interpreter on that copy, a script that checks the field reaches
(1) the CLI (``--search.example_knob`` and its alias ``--example-knob``),
(2) validation (a bad value, from a flag or a file, refused naming the field),
(3) the spec a study keeps, (4) ``show --spec``, and (5) the payload a worker receives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "tests" / "search" / "tiny_space.yaml"

#: the whole declaration of the new field: its default, help, short flag and check
FIELD = """    example_knob: int = field(3, "an example knob, declared by test_one_place_field.py",
                              alias="--example-knob", check=integer(1))
"""

CHECK = textwrap.dedent(
    """
    import contextlib, io, sys
    from pathlib import Path

    import optuna

    import nas
    import nas.search.driver.loop as loop
    from nas.cli import main
    from nas.execution.local_pool import LocalPool
    from nas.search.storage.records import stored_spec
    from nas.search.storage.urls import open_storage

    root, space, tmp = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    assert nas.__file__.startswith(root), nas.__file__  # the copy, not the checkout

    def cli(*argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(argv))
            except SystemExit as exit:
                rc = exit.code
        return rc, out.getvalue(), err.getvalue()

    # (1) the CLI: the flag, its alias and its help
    rc, out, _ = cli("search", "--help")
    assert rc == 0 and "--search.example_knob" in out and "--example-knob" in out and "an example knob" in out

    # (2) validation: a bad value from a flag or from a file, refused naming the field
    url = f"sqlite:///{tmp / 's.db'}"
    base = ("search", "--space", space, "--study", "s", "--storage", url, "--runs-dir", str(tmp / "runs"),
            "--local", "--evaluator", "proxy:params", "--trials", "1", "--no-tensorboard")
    rc, out, err = cli(*base, "--search.example_knob", "0")
    assert rc == 2 and "search.example_knob" in err and "positive integer" in err, (rc, out, err)
    bad = tmp / "bad.yaml"
    bad.write_text(Path(space).read_text() + "search:\\n  example_knob: -1\\n")
    rc, out, err = cli(*base[:2], str(bad), *base[3:])
    assert rc == 2 and "search.example_knob" in err and str(bad) in err, (rc, out, err)
    assert not (tmp / "s.db").exists()  # refused before anything was made

    # (5) the worker: a pool that keeps each payload it is given
    payloads = []

    class Recording(LocalPool):
        def submit(self, tag, payload, exclusive=False):
            payloads.append(payload)
            super().submit(tag, payload, exclusive)

    loop.default_pool = lambda run: Recording(threads=1)
    rc, out, err = cli(*base, "--example-knob", "7")
    assert rc == 0, (out, err)
    assert payloads and all(p["spec"]["search"]["example_knob"] == 7 for p in payloads), payloads

    # (3) the study's spec
    study = optuna.load_study(study_name="s", storage=open_storage(url, read_only=True))
    assert study.user_attrs["spec"]["search"]["example_knob"] == 7
    assert stored_spec(study).search.example_knob == 7

    # (4) show --spec, which search --space reads back
    rc, out, err = cli("show", "--study", "s", "--storage", url, "--spec")
    assert rc == 0 and "example_knob: 7" in out, (out, err)
    print("ok")
    """
)


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("with_example_knob")
    shutil.copytree(ROOT / "nas", root / "nas", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "examples").symlink_to(ROOT / "examples")  # the seed architectures
    sections = root / "nas" / "spec" / "sections.py"
    text = sections.read_text()
    # SearchSection's rules, after its fields
    anchor = "\n    def check(self) -> None:\n        # the evaluator names"
    assert text.count(anchor) == 1, "SearchSection.check moved: update the anchor"
    sections.write_text(text.replace(anchor, "\n" + FIELD + anchor))
    return root


@pytest.mark.timeout(300)
def test_a_field_added_to_a_section_reaches_cli_validation_study_show_and_worker(
    package_copy: Path, tmp_path: Path
) -> None:
    # The copy comes first on the path (and is the working directory), so it is the `nas`
    # imported; the checkout supplies `evaluators`.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package_copy), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-c", CHECK, str(package_copy), str(SPACE), str(tmp_path)],
        cwd=package_copy, env=env, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert out.stdout.strip().splitlines()[-1] == "ok"
