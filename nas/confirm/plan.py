"""What a confirmation trains: the finalists and baselines, the scales, seeds and learning rates.

The finalists come from a finished search study (its top K, or trials named
by number); the baselines are the space's seed architectures as the search
ran them, or architecture files.  Each architecture is one :class:`Entry`;
each (architecture, scale, seed, lr) is one run.  Nothing here writes anything.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from nas.errors import ConfigError, UserError
from nas.files.archfile import load_arch
from nas.models import ArchConfig
from nas.search.reports.tables import leaderboard
from nas.search.storage.records import is_infeasible, trained
from nas.shipped import arch_path

#: the ranges of a run's ``scale`` and ``lr`` parameters (wide: the values are always fixed by the
#: queue, never sampled; ``--scales`` and ``--lrs`` are refused outside them)
SCALE_RANGE = (1e-9, 1e9)
LR_RANGE = (1e-12, 1e3)
#: Every run is enqueued as a trial of the confirm study before the first one trains, at about 30 ms
#: a run (measured: SQLite, Optuna 5, growing with the study): 10**4 runs take minutes to enqueue,
#: and ``--seeds 1000000000`` filled memory and the study before any training.
MAX_RUNS = 10_000


@dataclasses.dataclass(frozen=True)
class Entry:
    """One architecture under confirmation; ``index`` is its number in the confirm study's ``arch`` param."""

    index: int
    arch: ArchConfig
    name: str  # "trial 17", "vanilla", or an architecture file's stem
    role: str  # "finalist" or "baseline"
    search_trial: int | None = None  # the search trial that measured it, if any
    search_loss: float | None = None  # its single-seed loss in the search
    #: a baseline rebuilt at a finalist's shape: the baseline's own name ("vanilla"; ``name`` adds the shape)
    label: str = ""
    #: (d_model, layers) completep's multipliers are relative to when the recipe states none: a ladder
    #: member's architecture at size 1; None: the entry's own shape
    base: tuple[int, int] | None = None

    @property
    def arch_id(self) -> str:
        return self.arch.arch_id

    @property
    def base_name(self) -> str:
        """The name the reports compare against: a reshaped baseline's ``label``, else ``name``."""
        return self.label or self.name

    @property
    def shape(self) -> tuple[int, ...]:
        return shape_of(self.arch)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "arch": self.arch.to_dict(),
            "name": self.name,
            "role": self.role,
            "search_trial": self.search_trial,
            "search_loss": self.search_loss,
            **({"label": self.label} if self.label else {}),
            **({"base": list(self.base)} if self.base else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Entry:
        return cls(
            int(d["index"]),
            ArchConfig.from_dict(d["arch"]),
            str(d["name"]),
            str(d["role"]),
            d.get("search_trial"),
            d.get("search_loss"),
            str(d.get("label") or ""),
            tuple(d["base"]) if d.get("base") else None,  # type: ignore[arg-type]
        )


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run: an architecture at a scale of the study's budget, a seed and a learning rate."""

    arch: int  # Entry.index
    scale: float
    seed: int
    lr: float

    def params(self) -> dict[str, Any]:
        """The confirm study's trial parameters for this run (what Optuna's dashboard shows)."""
        return {"arch": self.arch, "scale": self.scale, "seed": self.seed, "lr": self.lr}

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> Run | None:
        try:
            return cls(int(p["arch"]), float(p["scale"]), int(p["seed"]), float(p["lr"]))
        except (KeyError, TypeError, ValueError):
            return None


def run_label(name: str, run: Run, recipe_lr: float) -> str:
    """``vanilla size 0.35, budget 7.241x, seed 0``: what a run's progress line and ``show`` call it; the
    budget is the run's as a multiple of the search's, the learning rate only when it is not the recipe's."""
    lr = "" if run.lr == recipe_lr else f", lr {run.lr:g}"
    return f"{name}, budget {run.scale:.4g}x, seed {run.seed}{lr}"


def check_runs(budget: Any, recipe: Any, arch: ArchConfig, seq_len: int, label: str, hint: str) -> None:
    """Refuse a planned run whose budget buys no step or whose rungs cannot be placed, naming it (``label``)
    and what to change (``hint``): the run would fail, and with it every seed of it, after the queue was
    written."""
    from evaluators.budget import plan_rungs, plan_steps
    from nas.models.cost import compute

    try:
        steps = plan_steps(budget, compute(arch, seq_len), recipe.batch_size, seq_len)
        plan_rungs(budget, recipe, steps)
    except ConfigError as err:
        raise UserError(f"{label} trains on {budget}: {err}; {hint}") from None


def parse_list(
    text: str, flag: str, kind: type = float, bounds: tuple[float, float] | None = None
) -> list[Any]:
    """``"1,4,16"`` as numbers, each > 0 (``kind`` int: each >= 0) and within ``bounds``; a UserError
    names ``flag``.  A value given twice is refused (a typo, never silently merged)."""
    out = []
    for part in str(text).split(","):
        try:
            value = kind(part.strip())
        except ValueError:
            raise UserError(
                f"{flag} {text!r}: {part.strip()!r} is not a number; give e.g. {flag} 1,4"
            ) from None
        bad = (value < 0) if kind is int else (not math.isfinite(value) or value <= 0)
        if bad:
            need = "an integer >= 0" if kind is int else "a number > 0"
            raise UserError(f"{flag} {text!r}: each value must be {need}, got {part.strip()}")
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise UserError(
                f"{flag} {text!r}: each value must be in [{bounds[0]:g}, {bounds[1]:g}], got {part.strip()}"
            )
        if value in out:
            raise UserError(f"{flag} {text!r}: lists {part.strip()} twice; give each value once")
        out.append(value)
    return out


def finalists(study: optuna.Study, top: int | None, trials: Sequence[int] | None) -> list[FrozenTrial]:
    """The trials to confirm: numbered ones, else the top ``top`` of the Pareto front or leaderboard.

    Trials measuring the same architecture (a duplicate) count once.
    """
    complete = {t.number: t for t in trained(study)}  # over-cap candidates were never trained
    if not complete:
        raise UserError(f"--study {study.study_name!r} has no trained COMPLETE trial to confirm")
    if trials:
        every = {t.number: t for t in study.get_trials(deepcopy=False)}
        chosen = []
        for n in trials:
            if n not in every:
                raise UserError(f"--trial {n}: study {study.study_name!r} has trials 0..{max(every)}")
            if n not in complete:
                over = is_infeasible(every[n])
                state = "INFEASIBLE (over the caps, never trained)" if over else every[n].state.name
                raise UserError(
                    f"--trial {n}: trial {n} of study {study.study_name!r} is "
                    f"{state}; only trained COMPLETE trials can be confirmed"
                )
            chosen.append(complete[n])
    else:
        chosen = [complete[r["trial"]] for r in leaderboard(study)]
    out, seen = [], set()
    for t in chosen:
        if "arch" not in t.user_attrs:
            raise UserError(f"trial {t.number} of study {study.study_name!r} has no architecture recorded")
        if t.user_attrs.get("arch_id") not in seen:
            seen.add(t.user_attrs.get("arch_id"))
            out.append(t)
    return out if trials else out[:top]


#: shipped architectures every LM confirmation compares with besides the space's seeds, unless
#: ``--baseline`` names others: Transformer++, the baseline recent architecture papers report against
ALWAYS_BASELINES = ("transformer_pp",)


def default_baselines(study: optuna.Study, seed_archs: Sequence[str]) -> list[tuple[str, FrozenTrial]]:
    """The space's seed architectures as the search measured them (its ``seed_arch`` trials)."""
    out = []
    for name in seed_archs:
        for t in trained(study):
            if t.user_attrs.get("seed_arch") == name and "arch" in t.user_attrs:
                out.append((name, t))
                break
    return out


def baseline_file(path: str, vocab_size: int, task: str = "lm") -> tuple[str, ArchConfig]:
    """An architecture file given to ``--baseline`` (its recipe and budget are not used: the study's are);
    its ``task`` must be the search's, or every one of its runs would fail."""
    p = arch_path(path)  # --baseline vanilla: the shipped file
    try:
        arch = load_arch(p).with_vocab(vocab_size)
    except ConfigError as err:
        raise UserError(f"--baseline {path}: {err}") from None
    if arch.task != task:
        raise UserError(
            f"--baseline {path}: a task: {arch.task} architecture; the search is task: {task}, "
            "so a baseline must be one too"
        )
    return p.stem, arch


def shape_of(arch: ArchConfig) -> tuple[int, ...]:
    """What a baseline takes from a finalist: width, heads, depth (decoder and encoder) and context."""
    return (arch.d_model, arch.n_heads, arch.n_layers, len(arch.encoder_layers), arch.max_len)


def shape_text(arch: ArchConfig) -> str:
    enc = f" enc L{len(arch.encoder_layers)}" if arch.encoder_layers else ""
    return f"d{arch.d_model} h{arch.n_heads}{enc} L{arch.n_layers} T{arch.max_len}"


def _layers_at(layers: tuple[Any, ...], n: int) -> tuple[Any, ...] | None:
    """A baseline's layers for a depth of ``n``: one repeated layer repeats, a stack of the same depth
    stays; a mixed stack of another depth has no such form (None)."""
    if len(layers) == n:
        return layers
    if layers and all(layer == layers[0] for layer in layers):
        return (layers[0],) * n
    return None


def at_shape(base: ArchConfig, target: ArchConfig) -> ArchConfig | None:
    """``base``'s blocks, positions and norm at ``target``'s width, heads, depth and context, or None
    when they do not fit there (a mixed stack of another depth, options the new sizes refuse)."""
    if shape_of(base) == shape_of(target):
        return base
    layers = _layers_at(base.layers, target.n_layers)
    encoder = _layers_at(base.encoder_layers, len(target.encoder_layers)) if base.encoder_layers else ()
    if layers is None or encoder is None:
        return None
    try:
        return dataclasses.replace(
            base,
            d_model=target.d_model,
            n_heads=target.n_heads,
            max_len=target.max_len,
            layers=layers,
            encoder_layers=encoder,
        )
    except ConfigError:
        return None


def reshaped_baselines(
    baselines: Sequence[tuple[str, ArchConfig, FrozenTrial | None, str]],
    finals: Sequence[FrozenTrial],
    study: optuna.Study,
) -> tuple[list[tuple[str, ArchConfig, FrozenTrial | None, str]], list[str]]:
    """Each baseline at each finalist's shape (``confirm --baseline-shape finalist``), and a note for each
    one that cannot take a finalist's shape (it then keeps its own).

    A comparison then isolates the blocks: a finalist of width 64 is measured against vanilla of
    width 64, not against the search's width-96 vanilla.  Finalists of one shape share the baselines.
    """
    out: list[tuple[str, ArchConfig, FrozenTrial | None, str]] = []
    notes: list[str] = []
    seen: set[str] = set()

    def add(name: str, arch: ArchConfig, t: FrozenTrial | None, label: str) -> None:
        if arch.arch_id not in seen:
            seen.add(arch.arch_id)
            out.append((name, arch, t, label))

    for name, arch, t, _ in baselines:
        for final in finals:
            target = ArchConfig.from_dict(final.user_attrs["arch"])
            moved = at_shape(arch, target)
            if moved is None:
                notes.append(
                    f"baseline {name} cannot take trial {final.number}'s shape ({shape_text(target)}); "
                    f"it keeps its own ({shape_text(arch)})"
                )
                add(name, arch, t, name)
            elif moved is arch:
                add(name, arch, t, name)
            else:
                add(f"{name} ({shape_text(moved)})", moved, search_twin(study, moved), name)
        if not finals:
            add(name, arch, t, name)
    return out, notes


def build_entries(
    known: Sequence[Entry],
    finals: Sequence[FrozenTrial],
    baselines: Sequence[tuple[str, ArchConfig, FrozenTrial | None, str]],
) -> tuple[list[Entry], list[Entry], list[Entry]]:
    """Every entry (``known`` ones keep their index), the ones this confirmation asks for, and its baselines.

    A baseline that is also a finalist is one entry (role finalist) and still the baseline: its ``label``
    is the baseline's name, which the reports compare against.
    """
    by_id = {e.arch_id: e for e in known}
    every = list(known)
    wanted: list[Entry] = []

    def add(arch: ArchConfig, name: str, role: str, t: FrozenTrial | None, label: str = "") -> Entry:
        e = by_id.get(arch.arch_id)
        if e is None:
            loss = float(t.values[0]) if t is not None and t.values else None
            e = Entry(len(every), arch, name, role, t.number if t is not None else None, loss, label)
            by_id[arch.arch_id] = e
            every.append(e)
        elif label and e.label != label:  # a finalist (or an earlier entry) that is this baseline too
            old, e = e, dataclasses.replace(e, label=label)
            by_id[arch.arch_id] = e
            every[every.index(old)] = e
            wanted[:] = [e if w is old else w for w in wanted]
        if e not in wanted:
            wanted.append(e)
        return e

    for t in finals:
        seed = t.user_attrs.get("seed_arch")
        name = f"trial {t.number}" + (f" ({seed})" if seed else "")
        add(ArchConfig.from_dict(t.user_attrs["arch"]), name, "finalist", t)
    base = [add(arch, name, "baseline", t, label) for name, arch, t, label in baselines]
    return every, wanted, base


def search_twin(study: optuna.Study, arch: ArchConfig) -> FrozenTrial | None:
    """A COMPLETE search trial of the same architecture (so a baseline file has a search score too)."""
    for t in trained(study):
        if t.user_attrs.get("arch_id") == arch.arch_id:
            return t
    return None
