"""``best``: leaderboard (single objective), Pareto front (two objectives), table and JSON."""

from __future__ import annotations

import json

import optuna


def test_pareto_front_table(cli, multi: optuna.Study, runs) -> None:
    rc, out, err = cli("best", "--study", "multi", "--runs-dir", runs)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("study 'multi': 10 trials (7 complete, 1 pruned, 2 fail)")
    assert "objective loss+flops" in lines[0] and "budget 3 steps" in lines[0]
    assert "Pareto front" in lines[1]
    header = lines[2].split()
    assert header[:6] == ["trial", "loss", "ppl", "bpb", "FLOPs/tok", "params"]
    numbers = [int(line.split()[0]) for line in lines[4:]]
    # Dominated: 0 (vanilla 2.50 vs its child 9 at 2.45, same FLOPs) and 2 (synth: 2.90, more FLOPs than 4).
    # the front, lowest loss first, one row per architecture: 5 measured 1's again (a duplicate)
    assert numbers == [3, 1, 9, 4]
    row3 = lines[4]
    assert "2.2000" in row3 and "9.03" in row3 and "3.174" in row3  # loss, exp(loss), loss/ln 2
    assert "child of #1 (layers.0.attention)" in row3
    assert "[mix(mha+synth_random) gelux4] [mdha(k5) squared_relux2] [multi_branch silux4]" in row3
    assert "seed primer_ez" in lines[5] and lines[5].endswith("(also trial 5)")


def test_leaderboard_single_objective_and_top(cli, single: optuna.Study, runs) -> None:
    rc, out, _ = cli("best", "--study", "single", "--runs-dir", runs, "--top", "3")
    assert rc == 0
    lines = out.splitlines()
    assert "best 3 architecture(s) by val loss" in lines[1]
    assert [int(x.split()[0]) for x in lines[4:]] == [3, 1, 9]
    rc, out, _ = cli("best", "--study", "single", "--runs-dir", runs)
    # every COMPLETE architecture (5, a duplicate of 1, is in 1's row)
    assert [int(x.split()[0]) for x in out.splitlines()[4:]] == [3, 1, 9, 0, 4, 2]


def test_json_rows(cli, multi: optuna.Study, runs) -> None:
    rc, out, _ = cli("best", "--study", "multi", "--runs-dir", runs, "--json")
    assert rc == 0
    rows = json.loads(out)
    assert isinstance(rows, list) and [r["trial"] for r in rows] == [3, 1, 9, 4]
    first = rows[0]
    assert first["val_loss"] == 2.2 and first["pareto"] is True
    assert abs(first["val_ppl"] - 9.025013499434122) < 1e-12
    assert first["parent"] == 1 and first["mutated"] == "layers.0.attention"
    assert first["flops_per_token"] == multi.trials[3].values[1]
    assert first["params"] == multi.trials[3].user_attrs["params"]
    assert first["summary"].startswith("d48 h4 L3:")
    assert rows[1]["also"] == [5]  # trial 5 reused trial 1's result (duplicate_of 1): one row


def test_explicit_storage_url(cli, multi: optuna.Study, runs) -> None:
    url = f"sqlite:///{runs / 'multi' / 'study.db'}"
    rc, out, _ = cli("best", "--study", "multi", "--storage", url, "--json", "--top", "1")
    assert rc == 0 and [r["trial"] for r in json.loads(out)] == [3]


def test_study_without_completed_trials(cli, runs) -> None:
    from inspect_studies import add_trial, make_study
    from optuna.trial import TrialState

    study = make_study(runs, "young")
    add_trial(study, "vanilla", None, state=TrialState.FAIL, fail_reason="diverged")
    rc, out, _ = cli("best", "--study", "young", "--runs-dir", runs)
    assert rc == 0 and "(no completed trial yet)" in out
    rc, out, _ = cli("best", "--study", "young", "--runs-dir", runs, "--json")
    assert rc == 0 and json.loads(out) == []


def test_by_layer_counts_the_top_trials_against_every_sampled_one(cli, multi: optuna.Study, runs) -> None:
    rc, out, err = cli("best", "--study", "multi", "--runs-dir", runs, "--by-layer", "--top", "3", "--json")
    assert rc == 0, err
    table = json.loads(out)
    # top 3 by loss: #3 mixed (2.20), #1 and #5 primer (2.30); sampled: the 9 trials with an architecture
    # (the failed over-cap trial #8 has none): vanilla x2, primer x2, synth x2 (one pruned), mixed x2
    # (one failed), small
    assert (table["top"], table["sampled"]) == (3, 9)
    rows = {(r["gene"], r["layer"]): r for r in table["rows"]}
    assert rows[("attention", "0")]["top"] == {"mdha": 2, "mixture(mha+synth_random)": 1}
    assert rows[("attention", "0")]["sampled"] == {
        "mha": 3,
        "mdha": 2,
        "synth_dense": 2,
        "mixture(mha+synth_random)": 2,
    }
    assert rows[("activation", "1")]["top"] == {"squared_relu": 3}
    assert rows[("attention", "2")] == {
        "gene": "attention",
        "layer": "2",
        "top": {"multi_branch": 1},
        "sampled": {"multi_branch": 2},
    }
    rc, text, _ = cli("best", "--study", "multi", "--runs-dir", runs, "--by-layer", "--top", "3")
    assert text.splitlines()[0].split() == ["gene", "layer", "top", "3", "by", "loss", "all", "9", "sampled"]
    assert "mdha 2, mixture(mha+synth_random) 1" in text.splitlines()[1]


def test_by_layer_counts_from_the_top_too_when_the_depth_varies() -> None:
    """A pinned last layer is at index 1 in a 2-layer trial and 3 in a 4-layer one: counted from the top
    (-1) it lines up (issue 36, new-user items); with one depth only the bottom-up count is shown."""
    from nas.search.reports.layers import by_layer, format_by_layer

    def layer(block: str) -> dict[str, object]:
        return {"attention": {"type": block}, "ffn": {"activation": "relu", "mult": 2}}

    study = optuna.create_study()
    for depth, loss in ((2, 1.0), (4, 2.0), (3, 3.0)):
        arch = {"layers": [layer("synth_dense")] * (depth - 1) + [layer("mha")]}
        study.add_trial(optuna.trial.create_trial(value=loss, user_attrs={"arch": arch}))
    table = by_layer(study, top=3)
    rows = {(r["gene"], r["layer"]): r for r in table["rows"]}
    assert table["depths_vary"] and rows[("attention", "-1")]["top"] == {"mha": 3}
    assert rows[("attention", "1")]["top"] == {"mha": 1, "synth_dense": 2}
    assert "counted from the bottom (0 is the first) and then from the top" in format_by_layer(table)
    same = optuna.create_study()
    same.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={"arch": {"layers": [layer("mha")] * 2}}))
    assert not by_layer(same)["depths_vary"] and all(
        not r["layer"].startswith("-") for r in by_layer(same)["rows"]
    )


def test_a_probe_or_proxy_study_is_listed_by_its_own_value(cli, runs) -> None:
    """`best` of a probes study listed 1 - score as "loss", "lowest loss first", under the budget it never
    used; its JSON called it val_loss.  Each study's value is named for what it is, in its own units."""
    from inspect_studies import add_trial, make_study

    for name, evaluator, values in (
        ("probes", "probes@5", (0.75, 0.6)),
        ("proxy", "proxy:params", (9.5, 9.0)),
    ):
        study = make_study(runs, name, objective="loss")
        study.set_user_attr("settings", {**study.user_attrs["settings"], "evaluator": evaluator})
        add_trial(study, "vanilla", values[0])
        add_trial(study, "primer", values[1])
    rc, out, err = cli("best", "--study", "probes", "--runs-dir", runs)
    lines = out.splitlines()
    assert rc == 0 and "evaluator probes@5 (no budget used)" in lines[0] and "per trial" not in lines[0], err
    assert lines[1] == "best 2 architecture(s) by probe score (mean accuracy):"
    assert lines[2].split()[:4] == ["trial", "score", "FLOPs/tok", "params"]  # no ppl, no bpb
    assert [line.split()[:2] for line in lines[4:]] == [["1", "0.4000"], ["0", "0.2500"]]  # highest first
    rows = json.loads(cli("best", "--study", "probes", "--runs-dir", runs, "--json")[1])
    assert [r["probe_score"] for r in rows] == [0.4, 0.25] and "val_loss" not in rows[0]
    assert "val_ppl" not in rows[0] and "val_bpb" not in rows[0]
    rc, out, _ = cli("best", "--study", "proxy", "--runs-dir", runs)
    lines = out.splitlines()
    assert lines[1] == "best 2 architecture(s) by proxy:params value (ln params):"
    assert lines[2].split()[:3] == ["trial", "ln", "params"] and "loss" not in "\n".join(lines[1:])
    rows = json.loads(cli("best", "--study", "proxy", "--runs-dir", runs, "--json")[1])
    assert [r["proxy_value"] for r in rows] == [9.0, 9.5] and "val_loss" not in rows[0]


def test_by_layer_from_the_bottom_leaves_a_pinned_layer_out_of_the_free_layers_counts(tmp_path) -> None:
    """`best --by-layer` counted a pinned last layer (mha) at index 1 of 2-layer trials among the free
    layers at index 1 of 3-layer ones: the bottom-up rows now hold the free layers only."""
    from nas.cli import main
    from nas.search.reports.layers import by_layer

    space = tmp_path / "space.yaml"
    space.write_text(
        "name: pinned\nglobals: {d_model: 32, n_heads: 2, n_layers: [2, 3], max_len: 16}\n"
        "layers:\n  attention: {synth_dense: {}, synth_random: {}}\n  ffn: {activation: relu, mult: 2}\n"
        "  at:\n    - layers: -1\n      attention: mha\n"
    )
    argv = ["search", "--space", str(space), "--evaluator", "proxy:params", "--trials", "8", "--local",
            "--runs-dir", str(tmp_path / "runs"), "--sampler", "random", "--no-tensorboard"]  # fmt: skip
    assert main(argv) == 0
    study = optuna.load_study(study_name="pinned", storage=f"sqlite:///{tmp_path}/runs/pinned/study.db")
    table = by_layer(study, top=8)
    assert table["depths_vary"]
    rows = {(r["gene"], r["layer"]): r for r in table["rows"]}
    assert rows[("attention", "-1")]["sampled"] == {"mha": table["sampled"]}  # from the top: lined up
    bottom = [r for r in table["rows"] if r["gene"] == "attention" and not r["layer"].startswith("-")]
    assert bottom and all("mha" not in r["sampled"] for r in bottom)  # the pinned layer is not mixed in
