"""The one file-writing rule (nas.files.outputs), walked over every command that takes an output path.

A command writes new files, replaces only a file it wrote itself and that nobody changed since (or
any file with ``--force``), and refuses anything else in one line, exit 2, the file left as it was.
Checked again when the file is written: a file that appears meanwhile is kept, a full disk leaves
the earlier file intact.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from interpreter import start_python

import nas.commands.train
from nas.cli import main
from nas.errors import UserError
from nas.files.outputs import plan_output, write_output

TINY_SPACE = Path(__file__).resolve().parent / "search" / "tiny_space.yaml"
ARCH = (
    "arch: {d_model: 16, n_heads: 2, max_len: 16,\n"
    "       layers: [{attention: mha, ffn: {activation: relu, mult: 2}}]}\n"
)
USERS = b"the user's own file\n"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory, corpus_dir: Path) -> dict[str, str]:
    root = tmp_path_factory.mktemp("outputs")
    url = f"sqlite:///{root}/s.db"
    argv = ["search", "--space", str(TINY_SPACE), "--study", "s", "--storage", url, "--data", str(corpus_dir),
            "--trials", "3", "--local", "--no-tensorboard", "--budget.steps", "2"]  # fmt: skip
    assert main(argv) == 0
    return {"url": url, "data": str(corpus_dir)}


def _cmd(kind: str, study: dict[str, str], out: Path, tmp: Path) -> tuple[list[str], Path]:
    """(argv, the file a user may already have where the command writes) for each writing command."""
    s = ["--study", "s", "--storage", study["url"]]
    if kind == "plot":
        return ["plot", *s, "--out", str(out)], out / "history.png"
    if kind == "export":
        return ["export", *s, "--best", "--out", str(out / "w.yaml")], out / "w.yaml"
    if kind == "train":
        (tmp / "a.yaml").write_text(ARCH)
        argv = ["train", "--arch", str(tmp / "a.yaml"), "--data", study["data"], "--budget.steps", "1",
                "--save", str(out / "m.pt")]  # fmt: skip
        return argv, out / "m.pt"
    argv = ["confirm", *s, "--local", "--top", "1", "--seeds", "1", "--scales", "1", "--no-tensorboard",
            "--report", str(out / "c.md")]  # fmt: skip
    return argv, out / "c_compute.png"  # a figure written beside the report


@pytest.mark.parametrize("kind", ["plot", "export", "train", "confirm"])
def test_a_users_file_is_kept_and_only_force_replaces_it(kind, study, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    argv, theirs = _cmd(kind, study, out, tmp_path)
    theirs.write_bytes(USERS)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did not write" in err[0] and "--force" in err[0], err
    assert theirs.read_bytes() == USERS
    assert main([*argv, "--force"]) == 0
    assert theirs.read_bytes() != USERS


@pytest.mark.parametrize("kind", ["plot", "export"])
def test_a_command_replaces_what_it_wrote_itself(kind, study, tmp_path):
    argv, written = _cmd(kind, study, tmp_path / "out", tmp_path)
    assert main(argv) == 0 and written.is_file()
    assert main(argv) == 0  # its own unchanged output: no --force needed
    written.write_bytes(written.read_bytes() + b"\n# edited by the user\n")
    assert main(argv) == 2  # changed since: the user's now
    assert written.read_bytes().endswith(b"# edited by the user\n")


def test_the_study_in_use_is_never_an_output_even_with_force(study, tmp_path, capsys):
    """``export --out`` / ``confirm --report`` / ``plot`` pointed at the study database they read (or its
    write-ahead log): refused with --force too, the database byte for byte as it was (issue 36)."""
    import shutil

    db = tmp_path / "copy.db"
    shutil.copy(study["url"].removeprefix("sqlite:///"), db)
    url = f"sqlite:///{db}"
    before = db.read_bytes()
    (tmp_path / "copy.db-wal").write_bytes(b"")  # a log beside it (SQLite's WAL mode)
    s = ["--study", "s", "--storage", url]
    for argv in (
        ["export", *s, "--best", "--out", str(db), "--force"],
        ["confirm", *s, "--local", "--top", "1", "--seeds", "1", "--scales", "1", "--no-tensorboard",
         "--report", str(db), "--force"],
        ["export", *s, "--best", "--out", str(tmp_path / "copy.db-wal"), "--force"],
    ):  # fmt: skip
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "SQLite database" in err[0] and "even with --force" in err[0], err
    assert db.read_bytes() == before
    assert not (tmp_path / "s-confirm").exists()


def test_a_searchs_kept_weights_are_never_an_output_even_with_force(study, tmp_path, capsys):
    """``export --out runs/S/weights/trial_0.safetensors --force`` replaced a finished trial's kept weights
    (the study then found its SHA-256 changed and `export --hf` refused the trial); ``train --save`` too."""
    weights = tmp_path / "runs" / "s" / "weights"
    weights.mkdir(parents=True)
    kept = weights / "trial_0.safetensors"
    kept.write_bytes(b"kept weights")
    arch = tmp_path / "a.yaml"
    arch.write_text(
        "arch: {vocab_size: 256, d_model: 32, n_heads: 4, max_len: 16, layers: {repeat: 1, attention: mha}}\n"
    )
    for argv in (
        ["export", "--study", "s", "--storage", study["url"], "--best", "--out", str(kept), "--force"],
        ["export", "--study", "s", "--storage", study["url"], "--best", "--out", str(weights / "new.yaml")],
        ["train", "--arch", str(arch), "--steps", "1", "--save", str(kept), "--force"],
    ):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "keeps its trials' weights" in err[0] and "even with --force" in err[0], err
    assert kept.read_bytes() == b"kept weights" and [p.name for p in weights.iterdir()] == [kept.name]


def test_a_directory_or_a_link_to_nothing_in_the_way_is_one_line(study, tmp_path, capsys):
    (tmp_path / "figs" / "pareto.png").mkdir(parents=True)
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    for out, words in (("figs", ("pareto.png", "is a directory")), ("gone", ("gone", "does not exist"))):
        capsys.readouterr()
        assert main(["plot", "--study", "s", "--storage", study["url"], "--out", str(tmp_path / out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and all(w in err[0] for w in words), err
    assert (tmp_path / "figs" / "pareto.png").is_dir() and not (tmp_path / "nowhere").exists()


def test_train_keeps_a_file_that_appears_at_save_while_it_trains(study, tmp_path, monkeypatch, capsys):
    argv, save = _cmd("train", study, tmp_path, tmp_path)
    real = nas.commands.train.train_lm

    def meanwhile(*args: Any, **kwargs: Any) -> Any:
        save.write_bytes(USERS)  # another training with the same --save, or the user, got there first
        return real(*args, **kwargs)

    monkeypatch.setattr(nas.commands.train, "train_lm", meanwhile)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "appeared there while this ran" in err[-1] and "saved" not in err[-1]
    assert save.read_bytes() == USERS
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".m")] == []  # no temporary left


def test_a_full_disk_leaves_the_earlier_file_intact(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("old\n")
    target = plan_output(path, "--out", force=True)

    def no_room(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(UserError, match="no room to write it .*the earlier file is intact"):
        write_output(target, no_room)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.yaml"]


def test_a_file_changed_after_the_check_is_not_replaced(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("old\n")
    target = plan_output(path, "--out", force=True)
    path.write_text("changed by the user meanwhile\n")
    with pytest.raises(UserError, match="changed while this ran"):
        write_output(target, lambda tmp: tmp.write_text("new\n"))
    assert path.read_text() == "changed by the user meanwhile\n"


def _limited(tmp_path: Path, limit: int, argv: list[str]) -> Any:
    """Run the CLI in a process whose files may not grow past ``limit`` bytes (RLIMIT_FSIZE: EFBIG)."""
    import subprocess

    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # else the kernel kills it instead of EFBIG
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from nas.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    root = Path(__file__).resolve().parents[1]
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(root)},
    )


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="RLIMIT_FSIZE is POSIX")
def test_a_full_disk_while_saving_a_model_is_one_line_and_the_earlier_model_is_kept(study, tmp_path):
    argv, save = _cmd("train", study, tmp_path, tmp_path)
    save.write_bytes(USERS)  # an earlier model the user keeps
    done = _limited(tmp_path, 20_000, [*argv, "--force"])  # the checkpoint is larger than 20 kB
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and "no room to write it" in err[-1] and "intact" in err[-1], err
    assert save.read_bytes() == USERS
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".m")) == []


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="RLIMIT_FSIZE is POSIX")
def test_a_full_disk_under_a_search_is_one_line_and_the_next_start_continues(tmp_path, corpus_dir):
    argv = ["search", "--space", str(TINY_SPACE), "--study", "s", "--data", str(corpus_dir), "--local",
            "--evaluator", "proxy:params", "--trials", "400", "--no-tensorboard"]  # fmt: skip
    done = _limited(tmp_path, 300_000, argv)  # the study database cannot grow past 300 kB
    assert done.returncode == 2, done.stderr[-2000:]
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "study database" in err[0] and "Traceback" not in done.stderr, err
    # with room again, the same command takes the study over and goes on
    assert main([*argv[:-3], "--trials", "3", "--no-tensorboard", "--runs-dir", str(tmp_path / "runs")]) == 0


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_gets_the_mode_open_would_give_under_the_umask(
    tmp_path: Path, umask: int, mode: int
) -> None:
    old = os.umask(umask)
    try:
        out = write_output(plan_output(tmp_path / "a.yaml", "--out"), lambda tmp: tmp.write_text("x\n"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == mode


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    first = write_output(plan_output(tmp_path / "a.yaml", "--out"), lambda tmp: tmp.write_text("x\n"))
    first.chmod(0o640)
    again = write_output(plan_output(first, "--out"), lambda tmp: tmp.write_text("y\n"))
    assert again.read_text() == "y\n" and stat.S_IMODE(again.stat().st_mode) == 0o640


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """`best | head -1`: the pipe closes under the tool; it stops quietly (128 + SIGPIPE), as `cat` does."""
    import shutil
    import subprocess

    root = Path(__file__).resolve().parents[1]
    db = tmp_path / "study.db"
    shutil.copy(root / "experiments" / "runs" / "modern" / "study.db", db)
    argv = [sys.executable, str(root / "run_search.py"), "best", "--study", "modern", "--storage", f"sqlite:///{db}",
            "--top", "100"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what head does after its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141)
    assert first.startswith(b"study 'modern'") and "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="RLIMIT_FSIZE is POSIX")
def test_a_healthy_wal_study_where_no_shm_can_be_made_is_read_not_called_damaged(study, tmp_path):
    """A WAL-mode study needs its -shm beside it even to be read; under a file-size limit (as on a
    read-only mount or a full disk) SQLite cannot make it. The study is read as the file holds it
    (SQLite's immutable mode) when its -wal holds nothing, refused in one line saying why otherwise;
    it used to be called damaged (issue 36)."""
    import contextlib
    import sqlite3

    db = tmp_path / "copy.db"
    src = sqlite3.connect(study["url"].removeprefix("sqlite:///"))
    with contextlib.closing(src), contextlib.closing(sqlite3.connect(db)) as dst:
        src.backup(dst)  # the whole study (a WAL study's latest commits may be in its -wal)
    with contextlib.closing(sqlite3.connect(db)) as conn:  # closed: SQLite removes its -wal and -shm
        assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    argv = ["best", "--study", "s", "--storage", f"sqlite:///{db}"]
    run = _limited(tmp_path, 1000, argv)
    assert run.returncode == 0, run.stderr
    assert "damaged" not in run.stderr and "Pareto front" in run.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db"]  # no half-made -shm left
    (tmp_path / "copy.db-wal").write_bytes(b"not checkpointed")
    run = _limited(tmp_path, 1000, argv)
    err = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(err) == 1, run.stderr
    assert "the study is fine, but it cannot be read here" in err[0] and "damaged" not in err[0]


def _paused_while_writing(cwd: Path, argv: list[str]) -> Any:
    """The CLI in a subprocess whose writers stop for ten minutes once the temporary file is full (prints
    ``WRITING``): a signal sent then arrives at that exact point (and one the process ignored until the
    write went on would show as a timeout, never as a pass)."""
    code = (
        "import sys, time\n"
        "import nas.files.outputs as o\n"
        "real = o.write_output\n"
        "def write_output(target, write):\n"
        "    def paused(tmp):\n"
        "        write(tmp)\n"
        "        print('WRITING', file=sys.stderr, flush=True)\n"
        "        time.sleep(600)\n"
        "    return real(target, paused)\n"
        "o.write_output = write_output\n"
        "import nas.files.archfile\n"
        "nas.files.archfile.write_output = write_output\n"
        "from nas.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = start_python(code, *argv, cwd=cwd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("WRITING"):
            return proc
    proc.wait()
    raise AssertionError(f"never reached the write (exit {proc.returncode})")


def _partials(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".nas-partial"))


@pytest.mark.parametrize(
    ("sig", "code", "line"), [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated (SIGTERM)")]
)
def test_a_command_stopped_while_writing_keeps_the_old_file_and_leaves_no_temporary_one(
    study, tmp_path, sig, code, line
):
    """SIGTERM used to end the process on the spot: its temporary file stayed beside the user's output."""
    old = tmp_path / "w.yaml"
    old.write_text("the user's winner\n")
    argv = ["export", "--study", "s", "--storage", study["url"], "--best", "--out", str(old), "--force"]
    proc = _paused_while_writing(tmp_path, argv)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=180)  # seconds normally; minutes on a loaded 2-core machine
    assert proc.returncode == code and err.strip() == line, err
    assert old.read_text() == "the user's winner\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.yaml"]


def test_a_writer_killed_outright_leaves_a_temporary_file_that_the_next_write_removes(study, tmp_path):
    """SIGKILL (or a power loss) runs no cleanup: the temporary file stays, locked by nobody; the next
    writer into the directory removes it, and never a live writer's."""
    old = tmp_path / "w.yaml"
    old.write_text("the user's winner\n")
    argv = ["export", "--study", "s", "--storage", study["url"], "--best", "--out", str(old), "--force"]
    killed = _paused_while_writing(tmp_path, argv)
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    assert old.read_text() == "the user's winner\n"
    (left,) = _partials(tmp_path)
    assert left.startswith(".w.yaml.")
    alive = _paused_while_writing(tmp_path, [*argv[:-3], "--out", str(tmp_path / "other.yaml")])
    try:
        (theirs,) = set(_partials(tmp_path)) - {left}
        assert main(argv) == 0
        assert _partials(tmp_path) == [theirs]  # the live writer's is kept
        assert "arch:" in old.read_text()  # the export replaced the old file
    finally:
        alive.kill()
        alive.communicate(timeout=60)


def test_a_ctrl_c_as_the_file_is_moved_into_place_waits_until_it_is_recorded(
    tmp_path, monkeypatch, sigint_raises
):
    """Between the move and the record of what this tool wrote, a Ctrl-C left a file the next run refused
    as not its own (asking for --force); the stop now waits until both are done."""
    import nas.files.outputs

    real = nas.files.outputs._move_into_place

    def moved_then_interrupted(*args: Any) -> None:
        real(*args)
        signal.raise_signal(signal.SIGINT)  # Ctrl-C right after the move

    monkeypatch.setattr(nas.files.outputs, "_move_into_place", moved_then_interrupted)
    path = tmp_path / "w.yaml"
    with pytest.raises(KeyboardInterrupt):
        write_output(plan_output(path, "--out"), lambda tmp: tmp.write_text("new\n"))
    assert path.read_text() == "new\n" and nas.files.outputs.written_here(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.yaml"]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="RLIMIT_FSIZE is POSIX")
def test_a_full_disk_while_writing_safetensors_is_one_line_not_a_traceback(study, tmp_path):
    """safetensors (Rust) keeps only the words of the OS error ("... (os error 27)"): it was a traceback,
    for `train --save X.safetensors` and for `export --hf` (transformers writes model.safetensors)."""
    (tmp_path / "a.yaml").write_text(ARCH)
    model = tmp_path / "m.safetensors"
    argv = ["train", "--arch", str(tmp_path / "a.yaml"), "--data", study["data"], "--budget.steps", "1",
            "--threads", "1", "--save", str(model)]  # fmt: skip
    done = _limited(tmp_path, 20_000, argv)  # the checkpoint is larger than 20 kB
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and "no room to write it" in err[-1], err
    assert not model.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".m")]
    assert main(argv) == 0  # with room, the same command
    out = tmp_path / "hf"
    done = _limited(tmp_path, 20_000, ["export", "--checkpoint", str(model), "--hf", str(out)])
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and len(err) == 1 and "no room left to write" in err[0], err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".hf")]
