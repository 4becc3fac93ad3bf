"""``--prescreen``: a cheap evaluator scores each candidate first; a hurdle at fraction 0 stops the weak ones
before any training.  And ``--evaluator probes``: the probe accuracies become the trial's metrics."""

from __future__ import annotations

import copy
import json
from typing import Any

import optuna
import pytest
import yaml

from evaluators import registry
from evaluators.base import Diverged, Progress, Spent
from evaluators.prescreen import Prescreened
from evaluators.prescreen import planned_flops as screen_flops
from evaluators.proxies import ProxyEvaluator
from nas.cli import main
from nas.models import ArchConfig
from nas.search.driver.allowance import trained_flops
from nas.spec.training import Budget

RAW: dict[str, Any] = {
    "globals": {"d_model": 32, "n_heads": 2, "n_layers": 2, "max_len": 16},
    "layers": {
        "attention": {"mha": {}, "synth_fixed_random": {}, "synth_random": {}},
        "ffn": {"activation": ["relu", "squared_relu"], "mult": [2, 4]},
    },
    "recipe": {"batch_size": 4, "eval_batches": 2, "log_every": 2},
    "budget": {"steps": 4},
}
ARCH = ArchConfig.from_dict({"vocab_size": 64, "d_model": 16, "n_heads": 2, "max_len": 16,
                             "layers": {"repeat": 1, "attention": "mha",
                                        "ffn": {"activation": "relu", "mult": 2}}})  # fmt: skip


class Recorder:
    """A main evaluator that records what it was asked (a proxy underneath)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, ...]] = []

    def evaluate(self, arch, budget=None, callback=None, *, eval_at=(), logdir=None, log_hparams=None):
        self.calls.append(tuple(eval_at))
        return ProxyEvaluator("flops").evaluate(arch, budget, callback, eval_at=eval_at)


def test_a_candidate_that_misses_the_screen_never_reaches_the_main_evaluator() -> None:
    main_ev, seen = Recorder(), []

    def stop(p: Progress) -> bool:
        seen.append((p.fraction, p.val_loss))
        return p.fraction == 0.0

    screen = ProxyEvaluator("params")
    result = Prescreened(screen, main_ev).evaluate(ARCH, Budget("steps", 4), stop, eval_at=(0.0, 0.5))
    assert main_ev.calls == [] and result.stopped_early and result.stopped_at == 0.0
    value = screen.evaluate(ARCH).val_loss
    assert seen == [(0.0, pytest.approx(value))] and result.intermediate == {0.0: pytest.approx(value)}
    assert result.train_flops == 0.0 and result.extra["prescreen_value"] == pytest.approx(value)
    assert result.extra["prescreen_proxy"] == "params"


def test_a_candidate_that_passes_trains_with_the_other_hurdles_only() -> None:
    main_ev = Recorder()
    result = Prescreened(ProxyEvaluator("params"), main_ev).evaluate(
        ARCH, Budget("steps", 4), lambda p: False, eval_at=(0.0, 0.5)
    )
    assert main_ev.calls == [(0.5,)]  # fraction 0 is the screen's: the main evaluator never sees it
    assert not result.stopped_early and result.extra["proxy"] == "flops" and "prescreen_value" in result.extra


class Failing:
    """An evaluator that spends ``flops`` and then diverges."""

    def __init__(self, flops: float) -> None:
        self.flops = flops

    def evaluate(self, arch, budget=None, callback=None, **_: Any):
        err = Diverged("loss nan")
        Spent(3, 48, self.flops).attach_to(err)
        raise err


def test_a_candidate_that_fails_after_the_screen_still_counts_the_screens_cost() -> None:
    screen = ProxyEvaluator("params")
    with pytest.raises(Diverged) as err:
        Prescreened(screen, Failing(7.0)).evaluate(ARCH, Budget("steps", 4), lambda p: False)
    spent = Spent.of(err.value).to_dict()
    assert spent["train_flops"] == 7.0 and spent["steps"] == 3 and "prescreen_value" in spent
    assert trained_flops(spent) == 7.0 + spent["prescreen_flops"]


def test_a_screen_that_fails_counts_as_the_screens_cost_not_training() -> None:
    with pytest.raises(Diverged) as err:
        Prescreened(Failing(5.0), Recorder()).evaluate(ARCH, Budget("steps", 4), lambda p: False)
    spent = Spent.of(err.value).to_dict()
    assert spent["train_flops"] == 0.0 and spent["steps"] == 0 and spent["prescreen_flops"] == 5.0


def test_a_probe_screens_cost_is_known_before_it_runs() -> None:
    """What the driver reserves under --max-flops is what the screen then spends."""
    name = "probes:memorization,compression@3"
    assert screen_flops(name, ARCH) == registry.build(name, {"device": "cpu"}).evaluate(ARCH).train_flops > 0
    assert screen_flops("proxy:params", ARCH) == 0.0


def test_the_search_counts_the_screens_flops() -> None:
    assert trained_flops({"train_flops": 5.0, "prescreen_flops": 2.0}) == 7.0
    assert trained_flops({"prescreen_flops": 2.0}) == 2.0
    assert trained_flops({"train_flops": 5.0, "prescreen_flops": 2.0, "duplicate_of": 1}) == 0.0


def test_probe_steps_are_part_of_the_evaluator_name() -> None:
    assert registry.build("probes:memorization@7", {"device": "cpu"}).steps == 7
    assert registry.build("probes@9", {"device": "cpu"}).steps == 9
    for bad in ("probes@0", "probes@x", "probes:memorization@", "probes:", "probes@3:x", "probes@1000001"):
        with pytest.raises(Exception, match="probes"):
            registry.check(bad)


def _search(tmp_path, corpus, name: str, *extra: str, trials: int = 6) -> optuna.Study:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(copy.deepcopy(RAW)))
    storage = f"sqlite:///{tmp_path}/{name}.db"
    assert main(["search", "--space", str(space), "--study", name, "--storage", storage, "--runs-dir",
                 str(tmp_path / "runs"), "--data", str(corpus), "--trials", str(trials), "--local",
                 "--no-tensorboard", *extra]) == 0  # fmt: skip
    return optuna.load_study(study_name=name, storage=storage)


def test_a_prescreened_search_stops_weak_candidates_before_training(tmp_path, text_corpus, capsys) -> None:
    study = _search(tmp_path, text_corpus, "pre", "--prescreen", "probes:memorization@3",
                    "--hurdle-min-trials", "2", "--hurdle-percentile", "40", "--sampler", "random",
                    trials=8)  # fmt: skip
    out = capsys.readouterr().out
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert pruned and done, out
    assert (
        "screened out before training" in out and "misses hurdle 0 " not in out
    )  # a twin: "misses the prescreen"
    for t in pruned:  # nothing trained: the screen's cost is all it spent
        assert t.user_attrs["pruned_at"] == 0.0 and t.user_attrs.get("train_flops", 0.0) == 0.0
        assert t.user_attrs["prescreen_flops"] > 0 and list(t.user_attrs["intermediate"]) == ["0"]
        assert "val_loss" not in t.user_attrs  # the screen's value is not a loss of the model
    for t in done:
        assert t.user_attrs["train_flops"] > 0 and t.user_attrs["prescreen_flops"] > 0
        assert 0.0 <= t.user_attrs["prescreen_probe_memorization"] <= 1.0
    assert main(["show", "--study", "pre", "--storage", f"sqlite:///{tmp_path}/pre.db", "--trial",
                 str(pruned[0].number)]) == 0  # fmt: skip
    assert "screened out by the prescreen" in capsys.readouterr().out
    assert main(["plot", "--study", "pre", "--storage", f"sqlite:///{tmp_path}/pre.db", "--out",
                 str(tmp_path / "figs")]) == 0  # fmt: skip
    assert (tmp_path / "figs" / "pareto.png").is_file()


def test_confirm_trains_every_run_of_a_prescreened_search(tmp_path, text_corpus, capsys) -> None:
    """confirm retrains the winners in full: the search's screen would stop finalists and baselines (a
    hurdle at fraction 0 that every run after the third must pass) and leave seeds out of the report."""
    _search(tmp_path, text_corpus, "scr", "--prescreen", "probes:memorization@2", "--hurdle-min-trials", "1",
            "--hurdle-percentile", "1", "--sampler", "random", trials=3)  # fmt: skip
    url = f"sqlite:///{tmp_path}/scr.db"
    assert main(["confirm", "--study", "scr", "--storage", url, "--top", "1", "--seeds", "2", "--scales", "1",
                 "--baseline", "vanilla", "--local", "--no-tensorboard"]) == 0  # fmt: skip
    runs = optuna.load_study(study_name="scr-confirm", storage=url).trials
    assert len(runs) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in runs), (
        capsys.readouterr().out
    )
    assert not any("prescreen_flops" in t.user_attrs for t in runs)


def test_a_probes_search_records_each_tasks_accuracy(tmp_path, text_corpus, capsys) -> None:
    study = _search(tmp_path, text_corpus, "pr", "--evaluator", "probes:memorization,selective_copying@2",
                    "--objective", "loss", trials=2)  # fmt: skip
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 2
    # the progress lines gave "ppl 2.70" (the exp of 1 - score) and the start line the unused budget
    out = capsys.readouterr().out
    progress = [ln for ln in out.splitlines() if " COMPLETE " in ln]
    assert len(progress) == 2 and not any("ppl" in ln for ln in progress), out
    assert "evaluator probes:memorization,selective_copying@2 (the budget is not used)" in out, out
    for t in done:
        a = t.user_attrs
        assert a["probe_steps"] == 2 and a["probe_tasks"] == "memorization,selective_copying"
        assert t.value == pytest.approx(1 - a["probe_score"])
        assert a["probe_score"] == pytest.approx((a["probe_memorization"] + a["probe_selective_copying"]) / 2)
    # its value is 1 - score: no perplexity or bits per byte derived from it (issue 36, output hygiene),
    # in the search's progress lines (above), `best` and `show` alike
    assert main(["show", "--study", "pr", "--storage", f"sqlite:///{tmp_path}/pr.db", "--trial",
                 str(done[0].number)]) == 0  # fmt: skip
    shown = capsys.readouterr().out
    score = 1 - done[0].value  # shown as the score it is, not as 1 - score called a loss
    assert f"score            {score:.4f}  (probe score (mean accuracy), of probes:" in shown
    assert "perplexity" not in shown and "bits/byte" not in shown and "val loss" not in shown
    assert main(["best", "--study", "pr", "--storage", f"sqlite:///{tmp_path}/pr.db", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(set(r).isdisjoint({"val_loss", "val_ppl", "val_bpb"}) for r in rows)
    assert main(["best", "--study", "pr", "--storage", f"sqlite:///{tmp_path}/pr.db"]) == 0
    out = capsys.readouterr().out
    assert "ppl" not in out and "bpb" not in out


def test_confirm_of_a_probes_search_trains_the_lm(tmp_path, text_corpus, capsys) -> None:
    """The probe score stands in for the loss: confirm measures the loss (a probe run would give every
    seed the same score), and reports the search's value as a value, with no gap to the loss."""
    _search(
        tmp_path, text_corpus, "pv", "--evaluator", "probes:memorization@2", "--objective", "loss", trials=2
    )
    url = f"sqlite:///{tmp_path}/pv.db"
    capsys.readouterr()
    assert main(["confirm", "--study", "pv", "--storage", url, "--top", "1", "--seeds", "2", "--scales", "1",
                 "--local", "--no-tensorboard", "--json"]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    runs = optuna.load_study(study_name="pv-confirm", storage=url).trials
    finalist = [t for t in runs if t.user_attrs.get("role") == "finalist"]
    assert len(finalist) == 2 and all(t.user_attrs["train_flops"] > 0 for t in finalist)
    assert not any("probe_score" in t.user_attrs for t in runs)
    assert finalist[0].user_attrs["val_loss"] != finalist[1].user_attrs["val_loss"]  # two seeds, two runs
    assert report["search_evaluator"] == "probes:memorization@2"
    assert all(r["search_gap"] is None for r in report["summary"])
    # the report's table shows the probe score itself (the study records 1 - score), under its name
    from nas.confirm.markdown import curse_table

    table = "\n".join(curse_table(report))
    recorded = next(r["search_loss"] for r in report["summary"] if r["search_loss"] is not None)
    assert "search probe score (mean accuracy) (probes:memorization@2)" in table
    assert f"| {1 - recorded:.4f} |" in table and f"| {recorded:.4f} |" not in table


@pytest.mark.parametrize("value", [5, ["probes"], True, "", "  "])
def test_a_prescreen_in_the_spec_that_is_not_a_name_says_what_is(
    tmp_path, text_corpus, capsys, value
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**copy.deepcopy(RAW), "search": {"prescreen": value}}))
    code = main(["search", "--space", str(space), "--study", "bad", "--runs-dir", str(tmp_path / "runs"),
                 "--data", str(text_corpus), "--trials", "2", "--local"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "search.prescreen" in err and "must be an evaluator name such as probes:" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs" / "bad").exists()


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("lm", "search.prescreen (--prescreen): lm would train each candidate twice"),
        ("probes:nope", "search.prescreen (--prescreen): evaluator 'probes:nope'"),
        ("sleep:1", "evaluator 'sleep:1' cannot be used here; valid: proxy:NAME"),
        ("probes@0", "probes STEPS after @ must be a whole number in [1, 1000000]"),
        (
            "proxy:params --evaluator proxy:params",
            "search.prescreen (--prescreen): is the search's evaluator too",
        ),
    ],
)
def test_a_bad_prescreen_is_one_line(tmp_path, text_corpus, capsys, flag: str, message: str) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(copy.deepcopy(RAW)))
    code = main(["search", "--space", str(space), "--study", "bad", "--runs-dir", str(tmp_path / "runs"),
                 "--data", str(text_corpus), "--trials", "2", "--local",
                 "--prescreen", *flag.split()])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs" / "bad").exists()  # nothing half-written


def test_the_screen_bound_covers_every_candidate_of_the_space(tmp_path) -> None:
    """Before a candidate is sampled its screen's cost is unknown: a launch reserves the most any
    candidate can cost, which is at least every candidate's (here: exactly the largest one's)."""
    import itertools

    from nas.search.driver.allowance import screen_bound
    from nas.search.space.load import load_spec

    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(copy.deepcopy(RAW)))
    _, space = load_spec(space_file)
    name = "probes:memorization@3"
    bound = screen_bound(space, name)
    layers = [{"attention": a, "ffn": {"activation": f, "mult": m}}
              for a in ("mha", "synth_fixed_random", "synth_random") for f in ("relu", "squared_relu")
              for m in (2, 4)]  # fmt: skip
    costs = [
        screen_flops(
            name, ArchConfig.from_dict({"d_model": 32, "n_heads": 2, "max_len": 16, "layers": [one, two]})
        )
        for one, two in itertools.product(layers, repeat=2)
    ]
    assert max(costs) == pytest.approx(bound) and bound > min(costs) > 0
    assert screen_bound(space, None) == 0.0


def test_a_flops_limit_is_never_passed_by_a_prescreen(tmp_path, text_corpus, capsys) -> None:
    """``--max-flops`` with a pre-screen: every launch reserved its budget and the most its screen can
    cost, so what the study spent stays under the limit; a limit below one trial's is refused at once."""
    from nas.search.driver.allowance import screen_bound, spent_flops
    from nas.search.space.load import load_spec

    raw = {**copy.deepcopy(RAW), "budget": {"flops": 1e8}}
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(raw))
    bound = screen_bound(load_spec(space_file)[1], "probes:memorization@3")
    limit = 2 * (1e8 + bound)
    argv = ["search", "--space", str(space_file), "--runs-dir", str(tmp_path / "runs"), "--data",
            str(text_corpus), "--trials", "6", "--local", "--no-tensorboard", "--prescreen",
            "probes:memorization@3"]  # fmt: skip
    assert main([*argv, "--study", "lim", "--max-flops", f"{limit:.6g}"]) == 0
    study = optuna.load_study(study_name="lim", storage=f"sqlite:///{tmp_path}/runs/lim/study.db")
    assert 1 <= len(study.trials) <= 2 and spent_flops(study.trials) <= limit
    capsys.readouterr()
    assert main([*argv, "--study", "low", "--max-flops", f"{1e8 + bound / 2:.6g}"]) == 2
    err = capsys.readouterr().err
    assert "no trial could start" in err and err.count("\n") == 1
    assert not (tmp_path / "runs" / "low").exists()
