"""Files never run code, and a local Ray stays on the loopback interface (see docs/reliability.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nas.errors import UserError
from nas.files.archfile import load_arch_file, read_yaml
from nas.files.checkpoint import load_checkpoint
from nas.search.space.load import load_space

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("nas/**/*.py"), *ROOT.glob("evaluators/**/*.py"), ROOT / "run_search.py"])
UNSAFE_YAML = {"load", "load_all", "full_load", "full_load_all", "unsafe_load", "unsafe_load_all",
               "Loader", "FullLoader", "UnsafeLoader", "CLoader", "CFullLoader", "CUnsafeLoader"}  # fmt: skip


def calls(path: Path) -> list[tuple[str, str, ast.AST]]:
    """(module, attribute, node) of every ``module.attribute`` and ``from module import attribute``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            out.append((node.value.id, node.attr, node))
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [(node.module, alias.name, node) for alias in node.names]
    return out


def test_sources_are_found() -> None:
    names = {p.name for p in SOURCES}
    assert {"archfile.py", "checkpoint.py", "loop.py", "lm.py", "run_search.py"} <= names


def test_yaml_is_only_read_with_safe_load() -> None:
    bad = [
        f"{p.relative_to(ROOT)}:{n.lineno}: {m}.{a}"
        for p in SOURCES
        for m, a, n in calls(p)
        if m == "yaml" and a in UNSAFE_YAML
    ]
    assert not bad, bad
    for p in SOURCES:
        for module, _, node in calls(p):
            assert module not in ("pickle", "cPickle", "dill", "marshal", "shelve"), f"{p}:{node.lineno}"


def test_torch_load_always_has_weights_only() -> None:
    found = []
    for p in SOURCES:
        for node in ast.walk(ast.parse(p.read_text())):
            func = getattr(node, "func", None)
            if (
                isinstance(node, ast.Call)
                and isinstance(func, ast.Attribute)
                and func.attr == "load"
                and isinstance(func.value, ast.Name)
                and func.value.id == "torch"
            ):
                kw = {k.arg: k.value for k in node.keywords}
                ok = isinstance(kw.get("weights_only"), ast.Constant) and kw["weights_only"].value is True
                found.append((f"{p.relative_to(ROOT)}:{node.lineno}", ok))
    assert found and all(ok for _, ok in found), found  # nas/files/checkpoint.py loads weights


@pytest.mark.parametrize("loader", [read_yaml, load_space, load_arch_file])
def test_a_yaml_file_cannot_run_code(tmp_path: Path, loader) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.yaml"
    evil.write_text(f"!!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(UserError, match="not allowed"):
        loader(evil)
    assert not marker.exists()


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_a_checkpoint_cannot_run_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"format": "nas-lm-checkpoint/1", "payload": _Evil(str(marker))}, path)
    with pytest.raises(UserError, match="not a readable checkpoint"):
        load_checkpoint(path)
    assert not marker.exists()


def test_a_local_ray_keeps_the_loopback_address() -> None:
    # Starting a second Ray in the test session is not allowed (one per session), so this checks the
    # mechanism in a fresh interpreter: after nas imports Ray for a local run, Ray no longer rewrites
    # 127.0.0.1 to the machine's reachable address, and the environment is left as it was.
    code = (
        "import os\n"
        "from nas.execution.ray_pool import _SINGLE_NODE_ENV, _import_ray\n"
        "ray = _import_ray(local=True)\n"
        "from ray._private import services\n"
        "print(services.resolve_ip_for_localhost('127.0.0.1'), _SINGLE_NODE_ENV in os.environ)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["127.0.0.1", "False"]


def test_a_local_ray_starts_on_loopback_without_a_dashboard(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")  # imported plainly first, so this process's Ray keeps its defaults
    from nas.execution import ray_pool

    ray = ray_pool._import_ray(local=True)
    seen = {}

    def fake_init(**kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    with pytest.raises(UserError):
        ray_pool.RayPool(1)
    assert seen["address"] == "local" and seen["_node_ip_address"] == "127.0.0.1"
    assert seen["include_dashboard"] is False


def test_a_storage_password_is_never_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nas.cli import main
    from nas.redact import mask_url

    url = "postgresql://alice:s3cr%40t-pw@127.0.0.1:1/studies"  # nothing listens on port 1
    for argv in (
        [
            "search",
            "--storage",
            url,
            "--study",
            "s",
            "--local",
            "--evaluator",
            "proxy:params",
            "--trials",
            "1",
        ],
        ["best", "--study", "s", "--storage", url],
        ["search", "--storage=" + url.replace("postgresql", "nosuchdb"), "--study", "s"],
    ):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse
            rc = exc.code
        out, err = capsys.readouterr()
        assert rc == 2
        assert "s3cr" not in out + err and "t-pw" not in out + err, err
        assert "alice:***@127.0.0.1" in out + err, err
    assert mask_url(url) == "postgresql://alice:***@127.0.0.1:1/studies"
    assert mask_url("sqlite:////tmp/a:b@c.db") == "sqlite:////tmp/a:b@c.db"  # a path, not a password


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://u:pa/ss@h/db", "postgresql://u:***@h/db"),  # SQLAlchemy: the password runs to the @
        ("postgresql://u:pa ss@h/db", "postgresql://u:***@h/db"),
        ("mysql://u:p:q@h/db", "mysql://u:***@h/db"),
        (
            "postgresql://u@h/db?password=secret&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        ("postgresql://u:password=x@h/db", "postgresql://u:***@h/db"),
        ("postgresql://h:5432/db", "postgresql://h:5432/db"),  # a port, not a password
        ("sqlite:////tmp/a:b@c.db", "sqlite:////tmp/a:b@c.db"),  # a path
    ],
)
def test_a_url_is_masked_where_sqlalchemy_and_libpq_read_a_password(url: str, masked: str) -> None:
    from nas.redact import mask_url

    assert mask_url(url) == masked


def test_a_short_password_is_masked_where_it_stands_not_in_every_word() -> None:
    from nas.redact import redact, register

    register(["postgresql://u:x@h/db"])
    assert redact("max exit: postgresql://u:x@h/db") == "max exit: postgresql://u:***@h/db"


def test_a_url_without_a_password_does_not_mask_the_line_up_to_another_urls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--storage foo://` was refused as `error: --storage 'foo://':***@host/db`: its `':` was read as a
    password running to the `@` of the example URL the error ends with."""
    from nas.cli import main
    from nas.redact import redact

    line = "--storage 'foo://': cannot open it (no such dialect); valid: postgresql://user:pw@host/db"
    assert redact(line) == line.replace(":pw@", ":***@")
    assert redact("postgresql://u:p://q:r@h/db") == "postgresql://u:***@h/db"  # one URL: masked whole
    assert main(["best", "--study", "s", "--storage", "foo://"]) == 2
    err = capsys.readouterr().err
    assert "cannot open it" in err and "valid: sqlite:///" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("password", ["pa/ss", "pa ss"])
def test_no_command_prints_a_password_with_a_slash_or_a_space(
    password: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from nas.cli import main

    for url in (
        f"postgresql://alice:{password}@127.0.0.1:1/studies",
        f"postgresql://alice@127.0.0.1:1/studies?password={password.replace(' ', '%20')}",
    ):
        rc = main(["best", "--study", "s", "--storage", url])
        out, err = capsys.readouterr()
        assert rc == 2
        assert password.replace(" ", "%20") not in out + err and password not in out + err, err


def test_a_control_character_in_a_name_reaches_the_terminal_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A corpus path carrying a terminal escape (ESC [2J clears the screen) is printed as ``\\x1b[2J``."""
    from nas.cli import main

    corpus = tmp_path / "books\x1b[2J"
    corpus.mkdir()
    (corpus / "a.txt").write_text("To be, or not to be, that is the question. " * 400)
    (corpus / "b.txt").write_text("Whether 'tis nobler in the mind to suffer. " * 400)
    rc = main(["train", "--arch", "vanilla", "--data", str(corpus), "--budget.steps", "1", "--threads", "1",
               "--recipe.seq_len", "16", "--recipe.batch_size", "2"])  # fmt: skip
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err
    assert "\\x1b[2J" in out + err, (rc, err[-1000:])
