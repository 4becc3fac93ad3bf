"""``show``: one trial layer by layer, metrics, hurdles, parent and duplicate."""

from __future__ import annotations

import json
import math

import optuna
from inspect_studies import add_trial, make_study

from nas.models import ArchConfig
from nas.models.cost import compute, layer_flops, layer_params


def test_layer_table_matches_compute(cli, multi: optuna.Study, runs) -> None:
    rc, out, err = cli("show", "--study", "multi", "--trial", "3", "--runs-dir", runs)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"study 'multi', trial 3: COMPLETE   arch {multi.trials[3].user_attrs['arch_id']}"
    assert "evolved from trial 1, mutated gene layers.0.attention" in out
    arch = ArchConfig.from_dict(multi.trials[3].user_attrs["arch"])
    start = next(i for i, line in enumerate(lines) if line.startswith("layer")) + 2
    table = {line.split()[0]: line for line in lines[start : start + arch.n_layers]}
    assert set(table) == {"0", "1", "2"}
    assert "mixture(mha + synth_random; learned)" in table["0"] and "gelu x4" in table["0"]
    assert "mdha kernel=5" in table["1"] and "squared_relu x2" in table["1"]
    assert "multi_branch" in table["2"] and "silu x4 (branches)" in table["2"]
    for i, layer in enumerate(arch.layers):
        f = layer_flops(arch, layer, 16)
        assert f"{layer_params(arch, layer):,}" in table[str(i)]
        assert f"{f.fwd:,.0f}" in table[str(i)] and f"{f.train:,.0f}" in table[str(i)]
    total = next(line for line in lines if line.startswith("total"))
    c = compute(arch, 16)
    assert f"{c.params:,}" in total and f"{c.fwd_flops_per_token:,.0f}" in total
    assert "val loss         2.2000 nats/token  (perplexity 9.025, 3.1739 bits/byte)" in out
    assert "3 steps, 192 tokens" in out


def test_bits_per_byte_are_the_recorded_ones_on_a_token_corpus(cli, runs) -> None:
    # A token corpus of 4 bytes per token: bits per byte are loss / ln 2 / 4, as the trainer recorded
    # them (and `best` prints); show used to print loss / ln 2 (bits per token) as bits per byte.
    study = make_study(runs, "tok")
    add_trial(study, "vanilla", 2.2, val_bpb=2.2 / math.log(2) / 4)
    add_trial(study, "primer", 2.4, val_bpb=None)  # a corpus that does not know its bytes per token
    _, out, _ = cli("show", "--study", "tok", "--trial", "0", "--runs-dir", runs)
    assert "val loss         2.2000 nats/token  (perplexity 9.025, 0.7935 bits/byte)" in out
    _, best, _ = cli("best", "--study", "tok", "--runs-dir", runs)
    assert " 0.793 " in next(line for line in best.splitlines() if line.split()[:1] == ["0"])
    _, out, _ = cli("show", "--study", "tok", "--trial", "1", "--runs-dir", runs)
    assert "val loss         2.4000 nats/token  (perplexity 11.023)" in out and "bits/byte" not in out


def test_a_score_that_is_not_a_loss_has_no_perplexity(cli, runs) -> None:
    """A proxy's value was shown as "val loss" with the trial "trained 0 steps": it is ln of the proxy's
    quantity, named so, and nothing trained."""
    study = make_study(runs, "proxy")
    study.set_user_attr("settings", {**study.user_attrs["settings"], "evaluator": "proxy:params"})
    add_trial(study, "vanilla", 10.5)
    _, out, _ = cli("show", "--study", "proxy", "--trial", "0", "--runs-dir", runs)
    assert "ln params        10.5000  (proxy:params value (ln params), of proxy:params)" in out
    assert "perplexity" not in out and "bits/byte" not in out
    assert "val loss" not in out and "trained" not in out
    _, out, _ = cli("show", "--study", "proxy", "--trial", "0", "--runs-dir", runs, "--json")
    metrics = json.loads(out)["metrics"]  # nor in what --json and export write
    assert metrics["proxy_value"] == 10.5 and "val_loss" not in metrics
    assert "val_ppl" not in metrics and "val_bpb" not in metrics


def test_a_probe_studys_trial_shows_its_score_not_one_minus_it(cli, runs) -> None:
    """A probes trial showed "val loss 0.7500" (1 - score) and its hurdles as 1 - the partial score."""
    study = make_study(runs, "probes")
    study.set_user_attr("settings", {**study.user_attrs["settings"], "evaluator": "probes@5"})
    add_trial(study, "vanilla", 0.75, intermediate={"0.5": 0.9}, probe_score=0.25)
    _, out, _ = cli("show", "--study", "probes", "--trial", "0", "--runs-dir", runs)
    assert "score            0.2500  (probe score (mean accuracy), of probes@5)" in out
    assert "val loss" not in out and "0.7500" not in out
    hurdles = out[out.index("hurdles (probe score (mean accuracy)") :].splitlines()[1:3]
    assert [line.split()[:2] for line in hurdles] == [["0.5", "0.1000"], ["1", "0.2500"]]
    metrics = json.loads(cli("show", "--study", "probes", "--trial", "0", "--runs-dir", runs, "--json")[1])
    assert metrics["metrics"]["probe_score"] == 0.25 and "val_loss" not in metrics["metrics"]


def test_a_trial_whose_recorded_architecture_this_version_refuses_is_still_shown(cli, runs) -> None:
    # an older version ran sliding_window as a mixture component (mha's logits under its name); show of
    # such a trial ended in one line about the architecture, not naming the trial, and showed nothing
    study = make_study(runs, "old")
    raw = ArchConfig.from_dict({"d_model": 32, "n_heads": 2, "max_len": 16, "layers": [{"attention": "mha"}]})
    raw = raw.to_dict()
    raw["layers"][0]["attention"] = {"type": "mixture", "components": ["mha", "sliding_window"]}
    add_trial(study, "vanilla", 2.2, arch=raw)
    rc, out, err = cli("show", "--study", "old", "--trial", "0", "--runs-dir", runs)
    assert rc == 0, err
    assert "layers: not shown: its recorded architecture is not one this version builds" in out
    assert "'sliding_window' cannot be mixed" in out and "val loss         2.2000 nats/token" in out
    rc, out, _ = cli("show", "--study", "old", "--trial", "0", "--runs-dir", runs, "--json")
    assert rc == 0 and "cannot be mixed" in json.loads(out)["arch_error"]


def test_hurdles_and_final_loss(cli, multi: optuna.Study, runs) -> None:
    _, out, _ = cli("show", "--study", "multi", "--trial", "0", "--runs-dir", runs)
    # the space's sizes, not vanilla's: said so, with what vanilla itself is (issue 36, seed labels)
    assert "seeded with the blocks of the known architecture 'vanilla'" in out
    assert "(not 'vanilla' itself, which is d128 h4 L4: 4x[mha relux4])" in out
    hurdles = out[out.index("hurdles") :].splitlines()[1:]
    assert [line.split()[:2] for line in hurdles] == [["0.25", "3.9000"], ["0.5", "3.1000"], ["1", "2.5000"]]


def test_pruned_trial(cli, multi: optuna.Study, runs) -> None:
    _, out, _ = cli("show", "--study", "multi", "--trial", "6", "--runs-dir", runs)
    assert "trial 6: PRUNED" in out and "stopped at hurdle 0.25 of the budget" in out
    assert "val loss at stop 4.6000" in out
    assert "0.25  4.6000  (missed it: stopped here)" in out
    assert "(final)" not in out


def test_failed_trials(cli, multi: optuna.Study, runs) -> None:
    _, out, _ = cli("show", "--study", "multi", "--trial", "7", "--runs-dir", runs)
    assert "trial 7: FAIL" in out and "failed: diverged" in out and "mdha kernel=5" in out
    rc, out, _ = cli("show", "--study", "multi", "--trial", "8", "--runs-dir", runs)
    assert rc == 0 and "failed: over cap: params 2,000,000 > max_params" in out and "layer" not in out


def test_duplicate_and_json(cli, multi: optuna.Study, runs) -> None:
    _, out, _ = cli("show", "--study", "multi", "--trial", "5", "--runs-dir", runs)
    assert "same architecture as trial 1: its result was reused" in out
    assert "evolved from trial 3, mutated gene layers.0.ffn.activation" in out
    rc, out, _ = cli("show", "--study", "multi", "--trial", "5", "--runs-dir", runs, "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["trial"] == 5 and d["state"] == "COMPLETE" and d["values"] == list(multi.trials[5].values)
    assert d["duplicate_of"] == 1 and d["parent"] == 3 and d["mutated"] == "layers.0.ffn.activation"
    assert d["intermediate"] == {"0.25": 3.7, "0.5": 2.9}
    assert d["metrics"]["val_loss"] == 2.3 and d["metrics"]["steps"] == 3
    assert ArchConfig.from_dict(d["arch"]) == ArchConfig.from_dict(multi.trials[5].user_attrs["arch"])
    assert [row["attention"] for row in d["layers"]] == [{"type": "mdha", "kernel": 3}] * 2
    assert d["total"]["params"] == multi.trials[5].user_attrs["params"]
    assert d["optuna_params"]["layers.0.attention"] == "mdha"


def test_tensorboard_run_is_pointed_to(cli, multi: optuna.Study, runs) -> None:
    (runs / "multi" / "tb" / "trial_00003").mkdir(parents=True)
    _, out, _ = cli("show", "--study", "multi", "--trial", "3", "--runs-dir", runs)
    assert f"TensorBoard run: {runs / 'multi' / 'tb' / 'trial_00003'}" in out


def test_diverged_trial_gives_valid_json(cli, runs) -> None:
    from inspect_studies import add_trial, make_study
    from optuna.trial import TrialState

    study = make_study(runs, "nan")
    add_trial(study, "vanilla", None, state=TrialState.FAIL, fail_reason="diverged", val_loss=float("nan"))
    rc, out, _ = cli("show", "--study", "nan", "--runs-dir", runs, "--trial", "0")
    assert rc == 0 and "failed: diverged" in out and "not a finite number" in out
    rc, out, _ = cli("show", "--study", "nan", "--runs-dir", runs, "--trial", "0", "--json")
    assert rc == 0 and json.loads(out)["metrics"]["val_loss"] is None  # strict JSON: no NaN token


def test_a_failed_trial_shows_the_training_it_spent(cli, runs) -> None:
    from inspect_studies import add_trial, make_study
    from optuna.trial import TrialState

    study = make_study(runs, "spent")
    add_trial(
        study,
        "vanilla",
        None,
        state=TrialState.FAIL,
        fail_reason="diverged",
        steps=2,
        tokens=128,
        train_flops=3.5e6,
        seconds=0.5,
    )
    rc, out, _ = cli("show", "--study", "spent", "--runs-dir", runs, "--trial", "0")
    assert rc == 0 and "failed: diverged" in out and "val loss" not in out
    assert "trained          2 steps, 128 tokens, 3.5e+06 FLOPs  (until it failed)" in out
    assert "time             0.5 s" in out


def test_a_seed_trial_is_called_the_seed_only_when_it_is_the_seed_itself() -> None:
    import dataclasses

    from nas.search.reports.trial import _seed_itself
    from nas.search.space.sampling import seed_arch

    vanilla = seed_arch("vanilla")
    assert _seed_itself("vanilla", dataclasses.replace(vanilla, vocab_size=300).to_dict()) == (
        True,
        vanilla.summary(),
    )
    assert _seed_itself("vanilla", dataclasses.replace(vanilla, d_model=64, n_heads=2).to_dict())[0] is False


def _two_step_study(runs) -> optuna.Study:
    """Hurdles 0.25, 0.5 and 0.75 of a 2-step budget: the first two are both measured after step 1."""
    study = make_study(runs, "short", objective="loss")
    study.set_user_attr("settings", {**study.user_attrs["settings"], "budget": {"steps": 2}})
    study.set_user_attr("spec", {"search": {"hurdles": [0.25, 0.5, 0.75]}})
    return study


def test_hurdles_on_one_step_are_each_shown_and_say_so(cli, runs) -> None:
    # an older record kept one value for the two (the worker recorded the nearer): show dropped 0.25
    study = _two_step_study(runs)
    add_trial(study, "vanilla", 2.5, intermediate={"0.5": 3.1, "0.75": 2.9})
    _, out, _ = cli("show", "--study", "short", "--trial", "0", "--runs-dir", runs)
    hurdles = out[out.index("hurdles") :].splitlines()[1:5]
    assert hurdles == [
        "   0.25  3.1000  (step 1, the same step as hurdle 0.5)",
        "    0.5  3.1000  (step 1, the same step as hurdle 0.25)",
        "   0.75  2.9000",
        "      1  2.5000  (final)",
    ], out


def test_a_hurdle_past_the_one_that_stopped_a_trial_is_shown_not_reached(cli, runs) -> None:
    study = _two_step_study(runs)
    add_trial(study, "vanilla", 4.6, state=optuna.trial.TrialState.PRUNED, pruned_at=0.5,
              intermediate={"0.25": 4.6, "0.5": 4.6})  # fmt: skip
    _, out, _ = cli("show", "--study", "short", "--trial", "0", "--runs-dir", runs)
    assert "    0.5  4.6000  (step 1, the same step as hurdle 0.25)  (missed it: stopped here)" in out, out
    assert "   0.75       -  (not reached)" in out and "(final)" not in out, out
    _, out, _ = cli("show", "--study", "short", "--trial", "0", "--runs-dir", runs, "--json")
    assert json.loads(out)["hurdle_steps"] == {"0.25": 1, "0.5": 1, "0.75": 2}
