"""What a ladder trains: each architecture's sizes, their budgets, and what is refused before any run."""

from __future__ import annotations

import dataclasses

import pytest

from nas.confirm.plan import Entry, Run
from nas.errors import UserError
from nas.files.archfile import load_arch
from nas.ladder.plan import LadderPlan, Member, build_ladder
from nas.models.cost import compute
from nas.models.sizes import resize
from nas.shipped import arch_path
from nas.spec.training import Budget, TrainRecipe

RECIPE = TrainRecipe(batch_size=4, schedule="wsd")


def _entry(name: str = "vanilla", index: int = 0, role: str = "baseline") -> Entry:
    return Entry(index, load_arch(arch_path(name)), name, role)


def test_every_size_is_the_resized_architecture_and_size_one_is_the_entry_itself() -> None:
    e = _entry()
    every, plan, notes = build_ladder([], [e], [0.125, 1.0, 3.375], (0, 1), 1.0, Budget("steps", 200), RECIPE)
    assert notes == []
    by_size = {m.size: every[m.entry] for m in plan.members}
    assert by_size[1.0].arch_id == e.arch_id
    for size, entry in by_size.items():
        assert entry.arch == resize(e.arch, size)
        assert entry.name == f"vanilla size {size:g}" and entry.label == "vanilla"
    # one run per member and seed, the small sizes first
    runs = plan.runs()
    assert len(runs) == 3 * 2 and [r.scale for r in runs] == sorted(r.scale for r in runs)
    assert LadderPlan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize("kind", ["steps", "tokens", "flops"])
def test_tokens_follow_the_parameters_or_stay_the_same(kind: str) -> None:
    """per-param: a member's tokens are size 1's times its parameter ratio; same: size 1's tokens.
    A FLOPs budget scales by the FLOPs per token as well, so the tokens follow the same rule."""
    e = _entry()
    budget = Budget(kind, {"steps": 400, "tokens": 400 * 4 * 128, "flops": 1e13}[kind])
    c1 = compute(e.arch, 128)
    for rule in ("per-param", "same"):
        every, plan, _ = build_ladder([], [e], [0.125, 1.0, 8.0], (0,), 0.5, budget, RECIPE, rule)
        for m in plan.members:
            c = compute(every[m.entry].arch, 128)
            tokens = m.scale / 0.5  # size 1's tokens times this
            if kind == "flops":
                tokens *= c1.train_flops_per_token / c.train_flops_per_token
            want = c.params / c1.params if rule == "per-param" else 1.0
            assert tokens == pytest.approx(want, rel=1e-5)


def test_sizes_that_round_to_one_architecture_are_trained_once_with_a_note() -> None:
    e = _entry()  # 4 heads, 4 layers: 0.5 and 0.6 both give 3 heads and 3 layers
    steps = Budget("steps", 200)
    every, plan, notes = build_ladder([], [e], [0.5, 0.6, 1.0, 2.0], (0,), 1.0, steps, RECIPE)
    assert [m.size for m in plan.members] == [0.5, 1.0, 2.0]
    assert len(notes) == 1 and "size 0.6 rounds to the same architecture as size 0.5" in notes[0]


def test_a_size_that_rounds_to_the_entry_itself_is_size_one_and_too_few_sizes_are_refused() -> None:
    """Of 2 heads and 2 layers, size 0.7 gives the entry itself: it used to be trained and named as size
    0.7 (the first size listed), and a ladder left with two distinct sizes was trained, then fitted
    nothing (its report all '-')."""
    small = dataclasses.replace(_entry(), arch=resize(_entry().arch, 0.125))  # d64 h2 L2
    steps = Budget("steps", 200)
    every, plan, notes = build_ladder([], [small], [0.7, 1.0, 3.0, 8.0], (0,), 1.0, steps, RECIPE)
    assert [m.size for m in plan.members] == [1.0, 3.0, 8.0]
    assert every[plan.members[0].entry].arch_id == small.arch_id
    assert notes == [notes[0]] and "size 0.7 rounds to the same architecture as size 1" in notes[0]
    with pytest.raises(UserError, match=r"--sizes 0.7,1,3: vanilla takes only 2 distinct architectures"):
        build_ladder([], [small], [0.7, 1.0, 3.0], (0,), 1.0, steps, RECIPE)


def test_known_entries_keep_their_index_and_a_shared_architecture_is_one_entry() -> None:
    e = _entry()
    every, plan, _ = build_ladder([], [e], [0.125, 1.0, 3.375], (0,), 1.0, Budget("steps", 200), RECIPE)
    again, plan2, _ = build_ladder(
        every, [e], [0.125, 1.0, 3.375, 8.0], (0,), 1.0, Budget("steps", 200), RECIPE
    )
    assert again[: len(every)] == every and len(again) == len(every) + 1
    assert {m.entry for m in plan.members} <= {m.entry for m in plan2.members}
    twin = dataclasses.replace(e, index=1, name="copy", role="finalist")  # the same architecture again
    both, plan3, _ = build_ladder([], [e, twin], [0.125, 1.0, 3.375], (0,), 1.0, Budget("steps", 200), RECIPE)
    assert len(both) == 3 and len(plan3.members) == 6 and len(set(plan3.runs())) == 3


def test_a_size_whose_rungs_cannot_be_placed_is_refused_naming_it() -> None:
    budget = Budget("steps", 8, (0.25, 0.5))
    warm = dataclasses.replace(RECIPE, warmup_frac=0.5)
    refused = r"vanilla size \S+ trains on \d+ steps.*rung 0.25 of \d+ steps.*--scale"
    with pytest.raises(UserError, match=refused):
        build_ladder([], [_entry()], [0.5, 1.0, 2.0], (0,), 1.0, budget, warm)
    flops = Budget("flops", 1e9)
    with pytest.raises(UserError, match=r"size 0.5 trains on .*less than one training step"):
        build_ladder([], [_entry()], [0.5, 1.0, 2.0], (0,), 1.0, flops, RECIPE)


def test_a_size_the_architecture_refuses_is_refused_naming_it() -> None:
    with pytest.raises(UserError, match=r"--sizes 100: vanilla cannot take it"):
        build_ladder([], [_entry()], [1.0, 2.0, 100.0], (0,), 1.0, Budget("steps", 200), RECIPE)


def test_runs_are_confirm_runs_at_the_recipe_lr() -> None:
    every, plan, _ = build_ladder(
        [], [_entry()], [0.125, 1.0, 3.375], (4,), 2.0, Budget("steps", 200), RECIPE
    )
    assert all(isinstance(r, Run) and r.seed == 4 and r.lr == RECIPE.lr for r in plan.runs())
    assert {r.scale for r in plan.runs() if every[r.arch].name == "vanilla size 1"} == {2.0}


def test_the_families_without_an_interval_are_known_from_the_plan_family_by_family() -> None:
    """ladder's note before training counted the sizes of every family together: a family of three sizes
    beside one of four (near sizes of a small model coincide) got no note, and no interval in its report."""
    members = [Member("a", s, 0, 1.0) for s in (0.5, 1.0, 2.0)] + [
        Member("b", s, 1, 1.0) for s in (0.5, 0.7, 1.0, 2.0)
    ]
    families = (("a", "finalist", "a"), ("b", "baseline", "b"))
    plan = LadderPlan(families, tuple(members), (0,), 0.003)
    assert plan.sizes() == [0.5, 0.7, 1.0, 2.0] and plan.sizes("a") == [0.5, 1.0, 2.0]
    assert plan.without_interval() == ["a"]
    assert dataclasses.replace(plan, seeds=(0, 1)).without_interval() == []


def test_a_size_that_would_lose_a_layer_kind_is_refused_before_training(monkeypatch) -> None:
    """A ladder never fits one curve through two layer patterns: a member without one of its
    architecture's kinds of layer (what the old size rule made of a two-layer winner at size 1/8) is
    refused naming the size and what it would lose; the size rule itself keeps every kind."""
    import nas.ladder.plan as plan_module

    two = dataclasses.replace(
        _entry(),
        arch=dataclasses.replace(
            _entry().arch, layers=(_entry("primer_ez").arch.layers[0], _entry().arch.layers[0])
        ),
    )
    steps = Budget("steps", 200)
    every, plan, _ = build_ladder([], [two], [0.125, 1.0, 3.0], (0,), 1.0, steps, RECIPE)
    for m in plan.members:  # the rule: every size keeps both kinds
        assert len(set(every[m.entry].arch.layers)) == 2

    def one_layer(arch, size):  # the old rule at small sizes: the last layer alone
        out = resize(arch, size)
        return out if size >= 1 else dataclasses.replace(out, layers=out.layers[-1:])

    monkeypatch.setattr(plan_module, "resize", one_layer)
    with pytest.raises(UserError, match=r"--sizes 0.125: vanilla would lose its layer\(s\) .* at that size"):
        build_ladder([], [two], [0.125, 1.0, 3.0], (0,), 1.0, steps, RECIPE)


def test_each_size_trains_its_own_count_of_seeds_and_a_plan_without_counts_trains_every_seed() -> None:
    """``--seeds 2,2,1``: two seeds at the fitted sizes, one at the expensive held-out one."""
    from nas.ladder.plan import seed_counts

    counts = seed_counts("2,1,2", [0.125, 3.375, 1.0])  # in --sizes' order, not sorted
    assert counts == {0.125: 2, 3.375: 1, 1.0: 2}
    every, plan, _ = build_ladder(
        [], [_entry()], [0.125, 1.0, 3.375], (0, 1), 1.0, Budget("steps", 200), RECIPE, counts=counts
    )
    seeds = {every[r.arch].name: [] for r in plan.runs()}
    for r in plan.runs():
        seeds[every[r.arch].name].append(r.seed)
    assert seeds == {"vanilla size 0.125": [0, 1], "vanilla size 1": [0, 1], "vanilla size 3.375": [0]}
    assert plan.uneven_seeds() == "size 3.375: seed 0" and plan.without_interval() == []
    assert LadderPlan.from_dict(plan.to_dict()) == plan
    recorded = plan.to_dict()  # a plan recorded before counts: its members train every seed
    for m in recorded["members"]:
        del m["seeds"]
    old = LadderPlan.from_dict(recorded)
    assert len(old.runs()) == 6 and old.uneven_seeds() is None
    assert seed_counts("3", [0.5, 1.0, 2.0]) == {0.5: 3, 1.0: 3, 2.0: 3}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (
            "2,1",
            "give one count for every size .* or one per --sizes entry, in its order \\(3 here\\); got 2",
        ),
        ("2,x,1", "each count must be a whole number >= 1, got 'x'"),
        ("2,0,1", "each count must be a whole number >= 1, got '0'"),
        ("1.5", "each count must be a whole number >= 1, got '1.5'"),
    ],
)
def test_a_seed_count_list_that_does_not_fit_the_sizes_is_refused_naming_it(text: str, why: str) -> None:
    from nas.ladder.plan import seed_counts

    with pytest.raises(UserError, match=f"--seeds '{text}': {why}"):
        seed_counts(text, [0.5, 1.0, 2.0])
