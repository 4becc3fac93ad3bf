"""What a ladder trains: each architecture at several sizes, one wsd run per size and seed.

The architectures are a confirmation's (a study's finalists and the baselines at
their shape, :mod:`nas.confirm.plan`); each is grown or shrunk by
:func:`nas.models.sizes.resize` to every ``--sizes`` multiplier.  A member (an
architecture at a size) trains on ``scale`` times the study's budget at size 1 and,
at the other sizes, on tokens in proportion to its parameters (the same tokens per
parameter at every size, as model ladders train each size at fixed multiples of
Chinchilla's 20; the rungs add shorter runs of each size), or with ``tokens="same"``
on size 1's tokens at every size (then the small sizes are not starved of steps,
and the rungs alone vary the tokens).  Each run is a
:class:`nas.confirm.plan.Run` of the ladder study, so the confirm machinery
(queue, pool, resume) runs it.  Nothing here writes anything.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from nas.confirm.plan import SCALE_RANGE, Entry, Run, check_runs
from nas.errors import ConfigError, UserError
from nas.models.cost import compute
from nas.models.sizes import dropped, reached, resize
from nas.search.storage.records import LADDER_PLAN
from nas.spec.training import Budget, TrainRecipe

LADDER = LADDER_PLAN  # ladder study user attr: LadderPlan.to_dict() (named once, in the storage records)
DEFAULT_SIZES = "0.5,0.71,1,1.41,2"
DEFAULT_RUNGS = "0.25,0.5"
DEFAULT_SEEDS = 1


def ladder_study_name(study: str) -> str:
    """The name of the study that holds the ladder of the search study ``study``."""
    return f"{study}-ladder"


@dataclasses.dataclass(frozen=True)
class Member:
    """One architecture (``family``, its name in the reports) at one size."""

    family: str
    size: float
    entry: int  # Entry.index in the ladder study
    scale: float  # multiple of the study's budget its runs train on
    seeds: int = 0  # how many of the plan's seeds it trains (0: all; plans recorded before counts)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class LadderPlan:
    """The families (name, role, label) in report order, their members, the seeds and the lr."""

    families: tuple[tuple[str, str, str], ...]
    members: tuple[Member, ...]
    seeds: tuple[int, ...]
    lr: float
    scale: float = 1.0
    tokens: str = "per-param"
    bases: tuple[dict[str, Any], ...] = ()  # each family's architecture at size 1 (ArchConfig.to_dict())

    def runs(self) -> list[Run]:
        """Every run, the cheap ones first (smaller sizes), so early results come early."""
        order = sorted(self.members, key=lambda m: (m.size, m.family))
        return [Run(m.entry, m.scale, seed, self.lr) for m in order for seed in self.seeds_of(m)]

    def seeds_of(self, member: Member) -> tuple[int, ...]:
        """The seeds ``member`` trains: the first ``member.seeds`` of the plan's (``--seeds 2,2,1``)."""
        return self.seeds[: member.seeds or None]

    def uneven_seeds(self) -> str | None:
        """Where the sizes train fewer seeds than the plan's (``size 8, 16: seed 0``), else None."""
        fewer: dict[tuple[int, ...], set[float]] = {}
        for m in self.members:
            if len(self.seeds_of(m)) < len(self.seeds):
                fewer.setdefault(self.seeds_of(m), set()).add(m.size)
        return (
            "; ".join(
                f"size {', '.join(f'{s:g}' for s in sorted(sizes))}: seed {', '.join(map(str, seeds))}"
                for seeds, sizes in sorted(fewer.items())
            )
            or None
        )

    def sizes(self, family: str | None = None) -> list[float]:
        """The sizes of ``family`` (every family's when None)."""
        return sorted({m.size for m in self.members if family is None or m.family == family})

    def without_interval(self) -> list[str]:
        """The families whose bootstrap cannot vary (:func:`nas.ladder.fit.can_vary`: each of three sizes
        one run), so that their report will give no interval and no p(best)."""
        from nas.ladder.fit import can_vary

        out = []
        for name, _, _ in self.families:
            runs = sum(len(self.seeds_of(m)) for m in self.members if m.family == name)
            if not can_vary(runs, len(self.sizes(name))):
                out.append(name)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "families": [list(f) for f in self.families],
            "members": [m.to_dict() for m in self.members],
            "seeds": list(self.seeds),
            "lr": self.lr,
            "scale": self.scale,
            "tokens": self.tokens,
            "bases": list(self.bases),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LadderPlan:
        return cls(
            tuple(tuple(f) for f in d.get("families") or ()),  # type: ignore[misc]
            tuple(Member(**m) for m in d.get("members") or ()),
            tuple(d.get("seeds") or ()),
            float(d.get("lr") or 0.0),
            float(d.get("scale") or 1.0),
            str(d.get("tokens") or "per-param"),
            tuple(d.get("bases") or ()),
        )


#: how a member's tokens follow its size: ``per-param`` (the same tokens per parameter as size 1) or
#: ``same`` (size 1's tokens at every size; the rungs alone vary the tokens)
TOKEN_RULES = ("per-param", "same")


def seed_counts(text: str, sizes: Sequence[float]) -> dict[float, int]:
    """``--seeds``: one count for every size (``2``), or one per ``--sizes`` entry in its order
    (``2,2,2,1,1``: the expensive sizes of a ladder on fewer seeds), as {size: count}."""
    parts = [part.strip() for part in str(text).split(",")]
    if len(parts) not in (1, len(sizes)):
        raise UserError(
            f"--seeds {text!r}: give one count for every size (e.g. 2) or one per --sizes entry, in its "
            f"order ({len(sizes)} here); got {len(parts)}"
        )
    counts = []
    for part in parts:
        if not part.isdigit() or int(part) < 1:
            raise UserError(f"--seeds {text!r}: each count must be a whole number >= 1, got {part!r}")
        counts.append(int(part))
    return dict(zip(sizes, counts * len(sizes) if len(counts) == 1 else counts, strict=False))


def _budget_ratio(budget: Budget, base: Any, grown: Any, tokens: str) -> float:
    """How many times size 1's budget a member gets for its tokens to follow ``tokens``."""
    ratio = grown.params / base.params if tokens == "per-param" else 1.0
    if budget.kind == "flops":  # FLOPs follow the tokens and the FLOPs per token
        ratio *= grown.train_flops_per_token / base.train_flops_per_token
    return ratio


def build_ladder(
    known: Sequence[Entry],
    wanted: Sequence[Entry],
    sizes: Sequence[float],
    seeds: Sequence[int],
    scale: float,
    budget: Budget,
    recipe: TrainRecipe,
    tokens: str = "per-param",
    counts: dict[float, int] | None = None,
) -> tuple[list[Entry], LadderPlan, list[str]]:
    """Every entry of the ladder study (``known`` ones keep their index), the plan for ``wanted``
    (a confirmation's entries, at size 1) at ``sizes``, each size on ``counts[size]`` of ``seeds``
    (every seed without counts), and notes on sizes that coincide; refuses a size an architecture
    cannot take."""
    every = list(known)
    by_id = {e.arch_id: e for e in every}
    members: list[Member] = []
    notes: list[str] = []
    families: list[tuple[str, str, str]] = []
    for e in wanted:
        families.append((e.name, e.role, e.base_name))
        seq_len = recipe.seq_len or e.arch.max_len
        base = compute(e.arch, seq_len)
        archs = {}
        for size in sizes:
            try:
                archs[size] = resize(e.arch, size)
            except ConfigError as err:
                raise UserError(f"--sizes {size:g}: {e.name} cannot take it: {err}") from None
        # heads and layers are whole: near sizes of a small model coincide.  The size nearest what the
        # architecture reaches names it (size 1, the entry itself, used to be named after a smaller size)
        shapes: dict[str, float] = {}
        for size in sorted(sizes, key=lambda s: abs(math.log(s / reached(e.arch, archs[s])))):
            shapes.setdefault(archs[size].arch_id, size)
        for size in sizes:
            arch = archs[size]
            if shapes[arch.arch_id] != size:
                notes.append(
                    f"{e.name}: size {size:g} rounds to the same architecture as size "
                    f"{shapes[arch.arch_id]:g} ({arch.summary()}); it is trained once, as size "
                    f"{shapes[arch.arch_id]:g}"
                )
                continue
            lost = dropped(e.arch, arch)
            if lost:  # resize keeps every kind; a curve through two layer patterns would be no one's law
                raise UserError(
                    f"--sizes {size:g}: {e.name} would lose its layer(s) {', '.join(lost)} at that size "
                    f"({arch.summary()}); a ladder fits one curve per layer pattern: give other sizes"
                )
            run_scale = float(f"{scale * _budget_ratio(budget, base, compute(arch, seq_len), tokens):.6g}")
            if not SCALE_RANGE[0] <= run_scale <= SCALE_RANGE[1]:
                raise UserError(f"--sizes {size:g}: {e.name} would train on {run_scale:g} times the budget")
            name = f"{e.name} size {size:g}"
            check_runs(_scaled(budget, run_scale), recipe, arch, seq_len, name,
                       "give a larger --scale, later --rungs or other --sizes")  # fmt: skip
            entry = by_id.get(arch.arch_id)
            if entry is None:
                one = size == 1
                entry = Entry(
                    len(every),
                    arch,
                    name,
                    e.role,
                    e.search_trial if one else None,
                    e.search_loss if one else None,
                    e.base_name,
                    (e.arch.d_model, len(e.arch.layers)),  # completep's default base: size 1
                )
                by_id[arch.arch_id] = entry
                every.append(entry)
            members.append(Member(e.name, float(size), entry.index, run_scale, (counts or {}).get(size, 0)))
        if len(shapes) < 3:  # the fit has five coefficients: fewer sizes were trained and reported '-'
            raise UserError(
                f"--sizes {','.join(f'{s:g}' for s in sizes)}: {e.name} takes only {len(shapes)} distinct "
                f"architectures at them (heads and layers are whole numbers); a ladder needs 3 or more: "
                "give sizes further apart"
            )
    bases = tuple(e.arch.to_dict() for e in wanted)
    return (
        every,
        LadderPlan(tuple(families), tuple(members), tuple(seeds), recipe.lr, scale, tokens, bases),
        notes,
    )


def _scaled(budget: Budget, scale: float) -> Budget:
    from nas.confirm.runner import scaled_budget

    return scaled_budget(budget, scale)
