"""A block is one file: the example of docs/adding_a_block.md, dropped into a copy of the package.

The test copies ``nas/``, saves the doc's example block as
``nas/models/attention/alibi.py`` in the copy (no other edit), and runs, in
fresh interpreters on that copy, (1) a script that checks the block is
registered, sampled from a YAML search space under the stable parameter
names and counted by ``nas.compute``, and (2) the generic model test suite
selected for the new block, and for the mixture that now includes it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adding_a_block.md"

CHECK = textwrap.dedent(
    """
    import random, sys
    import optuna
    import nas
    from nas.search.space.load import parse_space

    assert nas.__file__.startswith(sys.argv[1]), nas.__file__  # the copy, not the checkout
    block = nas.ATTENTION.get("alibi")
    assert block.__module__ == "nas.models.attention.alibi" and block.mixable

    space = parse_space({
        "globals": {"d_model": 32, "n_heads": 4, "n_layers": 2, "max_len": 16, "vocab_size": 64},
        "layers": {"attention": ["mha", "alibi"]},
    })
    fixed = optuna.trial.FixedTrial({"layers.0.attention": "alibi", "layers.1.attention": "mha"})
    arch = space.suggest(fixed)
    assert [layer.attention.type for layer in arch.layers] == ["alibi", "mha"]
    rng = random.Random(0)
    seen = {layer.attention.type for _ in range(20) for layer in space.random_arch(rng).layers}
    assert seen == {"mha", "alibi"}, seen

    model = nas.build_model(arch)
    c = nas.compute(arch)
    assert sum(p.numel() for p in model.parameters()) == c.params
    assert [name for name, _ in c.per_layer] == ["alibi", "mha"]
    assert arch.summary() == "d32 h4 L2: [alibi relux4] [mha relux4]"
    print("ok")
    """
)


def example_block() -> str:
    """The first Python code block of docs/adding_a_block.md: the complete block file."""
    match = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert match, f"{DOC} shows no Python block"
    return match.group(1)


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("with_alibi")
    shutil.copytree(ROOT / "nas", root / "nas", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "examples").symlink_to(ROOT / "examples")  # the seed architectures
    (root / "nas" / "models" / "attention" / "alibi.py").write_text(example_block())
    return root


def run(args: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    # The copy comes first on the path (and is the working directory, which `python -m`
    # puts first), so it is the `nas` imported; the checkout supplies `evaluators`.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True)


def test_new_file_is_registered_searchable_and_counted(package_copy: Path) -> None:
    out = run(["-c", CHECK, str(package_copy)], package_copy)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "ok"


def test_new_file_gets_the_contract_suite(package_copy: Path) -> None:
    out = run(
        [
            "-m",
            "pytest",
            str(ROOT / "tests" / "models"),
            "-o",
            "addopts=",
            "-v",
            "-p",
            "no:cacheprovider",
            f"--ignore={Path(__file__).resolve()}",
            "-k",
            "alibi or (mixture and not fixed and not random)",
        ],
        package_copy,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    summary = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"=+ \d+ passed, \d+ deselected in .* =+", summary), summary  # none skipped
    ran = set(re.findall(r"::(test_\w+)\[[^\]]*alibi[^\]]*\] PASSED", out.stdout))
    # Every test parametrized over the blocks ran for alibi: the contract and its reference.
    expected = {
        "test_block_is_causal",
        "test_block_flops_match_counter",
        "test_model_param_count_equals_compute",
        "test_gradients_reach_every_block_parameter",
        "test_state_dict_round_trip",
        "test_block_matches_reference",
        "test_scores_match_reference_logits",
        "test_block_gradients_match_reference",
    }
    assert expected <= ran, sorted(expected - ran)
