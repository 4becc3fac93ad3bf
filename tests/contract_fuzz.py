"""Fuzzing the input contract: Hypothesis strategies for mutated inputs, and the check of one run.

The contract (docs/reliability.md): whatever a user types, a command ends with
exit status 0 or 2 (``train`` may also end 1 when training diverged), prints no
traceback, and when it exits 2 says why in one or two lines and leaves every
file as it was.  A case is a directory (a space, an architecture file, a
corpus, decoys) and the command line run in it through ``nas.cli.main``.

Inputs come from the valid ones of ``test_bad_input.py`` with a mutation at a
random place of the schema: a wrong type, a non-finite or huge or negative or
empty value, a YAML alias to another part of the document, a bomb of aliases,
deep nesting, an unknown key.  Used by ``tests/test_fuzz.py`` (a bounded,
derandomized number of examples) and ``benchmarks/fuzz.py`` (many more).
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import os
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.test_bad_input import ARCH, BASE_FILES, SPACE, snapshot, write_files

#: values that break a schema in every way the contract must survive; sizes are either small or far
#: over every ceiling, so a mutation that passes validation trains (or scores) in well under a second
ODD_VALUES: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    -1e308,
    1e-320,
    10**7,
    10**9,
    2**31,
    2**32,
    2**63,
    10**20,
    10**40,
    -1,
    0,
    1,
    2,
    3,
    0.5,
    -0.5,
    True,
    False,
    None,
    "",
    " ",
    "x",
    "1e12",
    ".nan",
    "\n",
    "a/b",
    "é" * 3,
    [],
    {},
    [1, 2],
    [None],
    {"low": 1, "high": 0},
    {"low": math.nan, "high": 2},
    {"low": 1, "high": 10**12},
    {"repeat": 10**9},
    {"type": "mha", "extra": 1},
]


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _bomb(levels: int) -> Any:
    """Nested lists that share each level: ``yaml.safe_dump`` writes them as anchors and aliases."""
    value: Any = ["lol"] * 9
    for _ in range(levels):
        value = [value] * 9
    return value


def paths(
    doc: Any, prefix: tuple[Any, ...] = (), seen: frozenset[int] = frozenset()
) -> list[tuple[Any, ...]]:
    """Places in ``doc`` (keys of mappings, indexes of lists), parents first; not into earlier mutations.

    A mutation may have made the document share or contain itself, or nest thousands deep:
    a container already on the way down, or 8 levels down, is not entered.
    """
    out = [prefix]
    if id(doc) in seen or len(prefix) >= 8:
        return out
    seen = seen | {id(doc)}
    if isinstance(doc, dict):
        for k, v in list(doc.items())[:20]:
            out += paths(v, (*prefix, k), seen)
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:20]):
            out += paths(v, (*prefix, i), seen)
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with one to three mutations at places drawn from its own schema."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(doc)[1:]))  # the document itself is mutated by "unknown-key"
        kind = draw(st.sampled_from(["odd", "odd", "odd", "alias", "bomb", "deep", "unknown-key", "drop"]))
        if kind == "odd":
            value = copy.deepcopy(draw(st.sampled_from(ODD_VALUES)))
        elif kind == "alias":  # the same object twice: written as an anchor and an alias
            value = _get(doc, draw(st.sampled_from(paths(doc))))
        elif kind == "bomb":
            value = _bomb(draw(st.integers(2, 9)))
        elif kind == "deep":
            value = _deep(draw(st.sampled_from([10, 70, 500, 3000])))
        elif kind == "unknown-key":
            node = _get(doc, draw(st.sampled_from(paths(doc))))
            if isinstance(node, dict):
                node[draw(st.sampled_from(["extra", "lr", "layers", "d_model", "type"]))] = 1
            continue
        else:
            if where and isinstance(_get(doc, where[:-1]), dict):
                del _get(doc, where[:-1])[where[-1]]
            continue
        doc = _set(doc, where, value)
    return doc


def as_yaml(doc: Any) -> str:
    try:
        return yaml.safe_dump(doc, sort_keys=False)
    except RecursionError:  # 3000 levels are too deep for PyYAML's writer: write the brackets by hand
        return "globals: " + "[" * 3000 + "1" + "]" * 3000 + "\n"


@st.composite
def space_cases(draw: st.DrawFn) -> tuple[list[str], dict[str, Any]]:
    """A search (proxy scores, no Ray) on a mutated space file."""
    base = copy.deepcopy(SPACE)
    base["recipe"] = dict(base["recipe"], lr=0.003, seed=0, seq_len=8)
    base["constraints"] = {"max_params": 100000}
    doc = draw(mutated(base))
    argv = ["search", "--space", "space.yaml", "--data", "corpus", "--runs-dir", "runs", "--local",
            "--evaluator", "proxy:params", "--trials", "2", "--no-tensorboard"]  # fmt: skip
    return argv, {"space.yaml": as_yaml(doc)}


@st.composite
def arch_cases(draw: st.DrawFn) -> tuple[list[str], dict[str, Any]]:
    """``train`` (one step) of a mutated architecture file with a recipe, a budget and metrics."""
    base = yaml.safe_load(ARCH)
    base["recipe"] = {"batch_size": 2, "seq_len": 8, "lr": 0.003, "beta1": 0.9, "seed": 1, "eval_batches": 1}
    base["budget"] = {"steps": 3}
    base["metrics"] = {"device": "cpu", "threads": 1}
    doc = draw(mutated(base))
    return ["train", "--arch", "arch.yaml", "--steps", "1"], {"arch.yaml": as_yaml(doc)}


FLAG_VALUES = [
    "0",
    "-1",
    "1",
    "2",
    "nan",
    "inf",
    "-inf",
    "1e14",
    "1e308",
    "4294967296",
    "",
    " ",
    "x",
    "a\nb",
    "notes.txt",
    "emptydir",
    "notes.txt/x",
    "/proc/nas-lm/x",
    "sqlite://",
    "sqlite:///notes.txt/s.db",
]
SEARCH_FLAGS = [
    "--trials",
    "--seed",
    "--population",
    "--workers",
    "--cpus-per-trial",
    "--gpus-per-trial",
    "--retries",
    "--worker-timeout",
    "--hurdles",
    "--hurdle-percentile",
    "--study",
    "--storage",
    "--runs-dir",
    "--data",
    "--steps",
    "--tokens",
    "--budget-flops",
    "--space",
]
TRAIN_FLAGS = ["--seed", "--threads", "--save", "--logdir", "--data", "--steps", "--tokens", "--budget-flops"]


@st.composite
def flag_cases(draw: st.DrawFn) -> tuple[list[str], dict[str, Any]]:
    """``search`` or ``train`` with one to three flags set to odd values."""
    if draw(st.booleans()):
        argv = ["search", "--space", "space.yaml", "--data", "corpus", "--runs-dir", "runs", "--local",
                "--evaluator", "proxy:params", "--trials", "2", "--no-tensorboard"]  # fmt: skip
        names = SEARCH_FLAGS
    else:
        argv, names = ["train", "--arch", "arch.yaml", "--steps", "1"], TRAIN_FLAGS
    for _ in range(draw(st.integers(1, 3))):
        argv += [draw(st.sampled_from(names)), draw(st.sampled_from(FLAG_VALUES))]
    return argv, {}


@dataclass
class Outcome:
    """What one run did, and how it broke the contract (``broken`` is None when it kept it)."""

    argv: list[str]
    rc: int | None
    err: str
    broken: str | None


def run_case(argv: list[str], files: dict[str, Any], main: Callable[[list[str]], int]) -> Outcome:
    """Run ``main(argv)`` in a fresh directory holding the base files and ``files``; check the contract."""
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="nas-fuzz-") as tmp:
        root = Path(tmp)
        write_files(root, {**BASE_FILES, **files})
        before = snapshot(root)
        out, err = io.StringIO(), io.StringIO()
        rc: int | None = None
        crash = None
        os.chdir(root)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(argv)
        except SystemExit as exc:  # argparse
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # noqa: BLE001 - any escape is what the fuzzer looks for
            crash = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        finally:
            os.chdir(cwd)
        text = err.getvalue()
        lines = text.strip().splitlines()
        if crash is not None:
            broken = f"raised {crash}"
        elif "Traceback" in out.getvalue() + text:
            broken = "printed a traceback"
        elif rc == 1 and argv[0] == "train" and "training diverged" in text:
            broken = None
        elif rc not in (0, 2):
            broken = f"exit status {rc}"
        elif rc == 2 and not 1 <= len(lines) <= 2:
            broken = f"{len(lines)} lines on stderr"
        elif rc == 2 and snapshot(root) != before:
            broken = "exit 2 but files were created or changed"
        else:
            broken = None
        return Outcome(argv, rc, lines[-1] if lines else "", broken)
