"""Real searches: Ray workers on a simulated two-node cluster, SQLite studies, resume, hurdles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from nas.cli import main
from nas.search.driver.context import tensorboard_dir
from nas.search.reports.tables import leaderboard

ROOT = Path(__file__).resolve().parents[2]
TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")

pytestmark = pytest.mark.usefixtures("ray_cluster")


def search_args(tmp_path, corpus, *extra, study="s"):
    return [
        "search",
        "--space",
        str(TINY_SPACE),
        "--study",
        study,
        "--storage",
        f"sqlite:///{tmp_path}/s.db",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--data",
        str(corpus),
        "--workers",
        "2",
        *extra,
    ]


def load(tmp_path, study="s"):
    return optuna.load_study(study_name=study, storage=f"sqlite:///{tmp_path}/s.db")


def test_search_finishes_the_requested_trials_and_continues(tmp_path, text_corpus, capsys):
    assert main(search_args(tmp_path, text_corpus, "--steps", "6", "--trials", "4")) == 0
    study = load(tmp_path)
    states = [t.state for t in study.trials]
    assert len(states) == 4 and TrialState.RUNNING not in states
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert complete, [t.user_attrs.get("fail_reason") for t in study.trials]
    for t in complete:
        assert len(t.values) == 2  # loss and FLOPs per token
        assert t.values[0] == pytest.approx(t.user_attrs["val_loss"])
        assert t.values[1] == pytest.approx(t.user_attrs["flops_per_token"])
        assert t.user_attrs["arch"]["d_model"] in (16, 32)
    # the first candidates are the seed architectures the space contains
    assert study.trials[0].user_attrs.get("seed_arch") == "vanilla"
    assert study.trials[1].user_attrs.get("seed_arch") == "primer_ez"
    out = capsys.readouterr().out
    assert "Pareto front" in out and "tensorboard --logdir" in out
    # one TensorBoard run per trained trial; a study outside the default storage has runs of its own
    tb = Path(tensorboard_dir(str(tmp_path / "runs"), "s", f"sqlite:///{tmp_path}/s.db"))
    assert tb.parent == tmp_path / "runs" / "s" / "tb" and tb.name.startswith("storage-")
    assert len([p for p in tb.iterdir() if p.name.startswith("trial_")]) >= len(complete) - sum(
        "duplicate_of" in t.user_attrs for t in complete
    )

    before = {t.number: t.values for t in study.trials if t.state == TrialState.COMPLETE}
    assert main(search_args(tmp_path, text_corpus, "--steps", "6", "--trials", "6")) == 0
    study = load(tmp_path)
    assert len(study.trials) == 6
    assert all(t.state != TrialState.RUNNING for t in study.trials)
    for number, values in before.items():
        assert study.trials[number].values == values  # nothing finished is run again or changed

    # different settings on the same study are refused, and nothing is added
    assert main(search_args(tmp_path, text_corpus, "--steps", "7", "--trials", "8")) == 2
    assert "budget.steps: 6 -> 7" in capsys.readouterr().err
    assert len(load(tmp_path).trials) == 6


def test_trials_spread_over_both_nodes(tmp_path, text_corpus, ray_cluster):
    assert (
        main(search_args(tmp_path, text_corpus, "--trials", "4", "--sampler", "random", "--no-tensorboard"))
        == 0
    )
    nodes = {t.user_attrs.get("worker_node") for t in load(tmp_path).trials if "worker_node" in t.user_attrs}
    assert len(nodes) == 2


def test_hurdles_prune_weak_candidates(tmp_path, text_corpus):
    args = search_args(
        tmp_path,
        text_corpus,
        "--objective",
        "loss",
        "--sampler",
        "random",
        "--trials",
        "8",
        "--hurdles",
        "0.5",
        "--hurdle-percentile",
        "5",
        "--workers",
        "1",
        "--no-tensorboard",
        "--steps",
        "12",
    )
    assert main(args) == 0
    study = load(tmp_path)
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert pruned and complete
    for t in pruned:
        loss_at_half = t.user_attrs["intermediate"]["0.5"]
        earlier = [
            u.user_attrs["intermediate"]["0.5"]
            for u in study.trials[: t.number]
            if u.state in (TrialState.COMPLETE, TrialState.PRUNED) and "intermediate" in u.user_attrs
        ]
        assert len(earlier) >= 3 and loss_at_half > min(earlier)
        assert t.intermediate_values  # single-objective trials also carry Optuna intermediate values
    for t in complete:
        assert len(t.values) == 1 and "0.5" in t.user_attrs["intermediate"]


@pytest.mark.parametrize("sampler", ["random", "auto"])
def test_caps_and_duplicates_cost_no_training(tmp_path, text_corpus, sampler):
    space = tmp_path / "fixed.yaml"
    space.write_text(
        "globals: {d_model: 16, n_heads: 2, n_layers: [1, 2], max_len: 16}\n"
        "layers: {attention: [mha], ffn: {activation: relu, mult: 2}}\n"
        "constraints: {max_params: 7000}\n"
        "recipe: {batch_size: 4, eval_batches: 1}\nbudget: {steps: 4}\nseed_archs: []\n"
    )
    args = search_args(
        tmp_path, text_corpus, "--trials", "6", "--sampler", sampler, "--no-tensorboard", "--workers", "1"
    )
    args[args.index("--space") + 1] = str(space)
    assert main(args) == 0
    trials = load(tmp_path).trials
    one = [t for t in trials if t.params["n_layers"] == 1]
    two = [t for t in trials if t.params["n_layers"] == 2]
    assert one and two
    # Over the cap: COMPLETE with an infinite loss and a positive constraint, so the sampler learns
    # from it; never trained, and no leaderboard shows it.
    for t in two:
        assert t.state == TrialState.COMPLETE and "over cap" in t.user_attrs["infeasible"]
        assert t.values[0] == float("inf") and t.constraints["max_params"] > 0
    assert all(t.constraints["max_params"] <= 0 for t in one)
    assert {r["trial"] for r in leaderboard(load(tmp_path))} <= {t.number for t in one}
    assert "worker_pid" not in "".join(str(t.user_attrs) for t in two)
    trained = [t for t in one if "duplicate_of" not in t.user_attrs]
    assert len(trained) == 1
    assert all(t.values == trained[0].values for t in one)


def test_resume_after_the_driver_is_killed(tmp_path, text_corpus, ray_cluster):
    args = search_args(
        tmp_path,
        text_corpus,
        "--trials",
        "6",
        "--seconds",
        "4",
        "--no-tensorboard",
        "--address",
        ray_cluster.address,
    )
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run_search.py"), *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        seen_running = False
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if not (tmp_path / "s.db").exists():
                continue
            try:
                trials = load(tmp_path).trials
            except Exception:  # noqa: BLE001 - the study may not exist yet
                continue
            done = [t for t in trials if t.state == TrialState.COMPLETE]
            running = [t for t in trials if t.state == TrialState.RUNNING]
            if done and len(running) == 2:  # both workers busy: a trial is surely mid-training
                seen_running = True
                break
        assert seen_running, proc.stderr.read().decode() if proc.poll() is not None else "timed out"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    study = load(tmp_path)
    finished_before = {t.number: t.values for t in study.trials if t.state == TrialState.COMPLETE}
    left_running = [t for t in study.trials if t.state == TrialState.RUNNING]
    assert left_running, [(t.number, t.state.name) for t in study.trials]

    assert main(args[:-2]) == 0  # same command, local driver this time
    study = load(tmp_path)
    assert all(t.state != TrialState.RUNNING for t in study.trials)
    for number, values in finished_before.items():
        assert study.trials[number].values == values
    for t in left_running:
        old = study.trials[t.number]
        assert old.state == TrialState.FAIL and old.user_attrs["requeued_as"]
        rerun = [u for u in study.trials if u.user_attrs.get("requeued_from") == t.number]
        assert len(rerun) == 1
        if "arch" in t.user_attrs:  # it had reached a worker: the same candidate runs again
            assert rerun[0].params == t.params
        else:  # killed while its parameters were being sampled: those it had are kept
            assert rerun[0].params.items() >= t.params.items()
    counted = [t for t in study.trials if t.state != TrialState.FAIL or not t.user_attrs.get("requeued_as")]
    assert len(counted) == 6


def test_the_printed_next_command_finds_the_study_again(tmp_path, text_corpus, capsys):
    runs = tmp_path / "elsewhere"
    assert (
        main(
            [
                "search",
                "--space",
                str(TINY_SPACE),
                "--study",
                "hint",
                "--runs-dir",
                str(runs),
                "--data",
                str(text_corpus),
                "--trials",
                "2",
                "--evaluator",
                "proxy:params",
                "--no-tensorboard",
            ]
        )
        == 0
    )
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("next:"))
    words = line.split()[1:]
    assert words[words.index("best") - 1].endswith(("run_search.py", "pytest", "nas", "__main__.py"))
    assert main(words[words.index("best") :]) == 0  # exactly what the user is told to type
    assert "hint" in capsys.readouterr().out


def test_a_finite_loss_past_exps_range_is_told_not_a_crash():
    """A diverging model can end with a finite loss above 709.78, whose exp overflows: the progress line's
    perplexity raised OverflowError in the driver.  The trial is told with its loss; the line caps the
    perplexity, and without a language model's loss (a probe score, a proxy) gives none."""
    from evaluators.result import measure_of
    from nas.search.driver.outcome import tell_result

    study = optuna.create_study()
    for evaluator in ("lm", "proxy:params"):
        trial = study.ask()
        result = {"status": "ok", "metrics": {"val_loss": 800.0}}
        measure = measure_of(evaluator)
        state, text, loss, frozen = tell_result(study, trial, result, "loss", ("val_loss",), measure)
        assert (state, loss, frozen.values) == ("COMPLETE", 800.0, [800.0])
        lm = evaluator == "lm"
        assert text.startswith("loss 800.0000 ppl 1.01e+304" if lm else "ln params 800.0000 "), text
        assert lm or "ppl" not in text


def test_a_probes_search_reports_its_score_and_a_proxy_search_no_tensorboard(tmp_path, text_corpus, capsys):
    """The progress line and the closing front of a probes search said "loss 0.9272 ... best 0.9272" (1 -
    score, best the lowest), and a proxy or probes search pointed TensorBoard at runs nothing writes."""
    from evaluators.result import measure_of
    from nas.search.driver.outcome import tell_result

    study = optuna.create_study()
    measure = measure_of("probes:selective_copying@5")
    for value in (0.9, 0.7):
        result = {"status": "ok", "metrics": {"val_loss": value}}
        _, text, _, _ = tell_result(study, study.ask(), result, "loss", ("val_loss",), measure)
    assert text.startswith("score 0.3000 "), text
    result = {"status": "pruned", "intermediate": {"0.5": 0.8}, "metrics": {"val_loss": 0.8}}
    assert tell_result(study, study.ask(), result, "loss", ("val_loss",), measure)[1] == (
        "stopped at hurdle 0.5: score 0.2000"
    )
    argv = search_args(tmp_path, text_corpus, "--evaluator", "proxy:params", "--trials", "2", "--local")
    at = argv.index("--workers")
    assert main(argv[:at] + argv[at + 2 :]) == 0  # one process: --local takes no --workers
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("[")]
    assert len(lines) == 2 and all(" COMPLETE ln params " in x and "loss" not in x for x in lines), out
    assert (
        "Pareto front (proxy:params value (ln params) vs FLOPs/token)" in out or "Leaderboard (proxy" in out
    )
    assert "tensorboard:" not in out and not any(tmp_path.rglob("events.out.*"))


def test_a_new_study_where_a_deleted_one_left_its_tensorboard_runs_is_refused(tmp_path, text_corpus, capsys):
    """The database deleted, the runs directory left: a new study of that name wrote its trials' events
    into the old trials' directories, mixed with the old ones."""
    argv = ["search", "--space", str(TINY_SPACE), "--study", "s", "--runs-dir", str(tmp_path / "runs"),
            "--data", str(text_corpus), "--trials", "1", "--local", "--budget.steps", "2"]  # fmt: skip
    assert main(argv) == 0
    tb = Path(tensorboard_dir(str(tmp_path / "runs"), "s", f"sqlite:///{tmp_path}/runs/s/study.db"))
    old = sorted(p.name for p in tb.iterdir())
    assert old and all(n.startswith("trial_") for n in old)
    before = {p: p.stat().st_mtime_ns for p in tb.rglob("*") if p.is_file()}
    for db in (tmp_path / "runs" / "s").glob("study.db*"):
        db.unlink()
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds TensorBoard runs (trial_" in err and "deleted study" in err
    assert {p: p.stat().st_mtime_ns for p in tb.rglob("*") if p.is_file()} == before  # nothing written
    assert not list((tmp_path / "runs" / "s").glob("study.db*"))  # and no study made
    # moved away, a new study starts; continued, it writes on into its own trials' runs
    tb.rename(tmp_path / "old_tb")
    assert main(argv) == 0
    grown = [a if a != "1" else "2" for a in argv]  # --trials 2
    assert main(grown) == 0 and len(list(tb.iterdir())) >= 2
