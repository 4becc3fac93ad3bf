"""One experiment spec: the space and every setting of a run, from one YAML file.

A spec file is a search-space file (``name``, ``globals``, ``layers``, ...)
with up to five more sections, each a frozen dataclass checked on creation:
``recipe`` (:class:`~nas.spec.training.TrainRecipe`), ``budget``
(:class:`~nas.spec.training.Budget`), ``data``, ``search`` and ``resources``
(:mod:`nas.spec.sections`).  A section or field the file leaves out takes its
default, defined once, here and in those dataclasses.  Flags override fields
(:mod:`nas.spec.flags`); a field no flag names keeps the file's value.

The study keeps the resolved spec whole (:meth:`Spec.to_dict`); ``show
--spec`` prints it as a file ``search --space`` reads back, and
:func:`differences` says which fields a continuation changed.

Torch-free; the space part is kept as plain data here and validated by
:mod:`nas.search.space.load` (which needs the block registry).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nas.errors import ConfigError, UserError
from nas.spec.sections import DataSpec, Resources, SearchSection, named
from nas.spec.training import Budget, TrainRecipe, rungs_need_wsd
from nas.validate import short_repr

#: the budget of a run whose file and flags name none (search, train and the trainer share it)
DEFAULT_BUDGET = Budget("steps", 200)
#: the sections a spec adds to a space; the rest of the file is the space
SPEC_KEYS = ("recipe", "budget", "data", "search", "resources")
#: fields that may change between runs of one study: how many trials, where they run, which sampler
#: draws the next candidates.  Every other field changes what a trial measures.
MUTABLE = ("search.trials", "search.max_flops", "search.sampler", "search.population", "resources.")
#: space keys that say nothing about what is searched
COSMETIC = ("space.name", "space.description")


@dataclasses.dataclass(frozen=True)
class Spec:
    """The whole run: the space (plain data) and its five sections."""

    space: Mapping[str, Any]
    recipe: TrainRecipe = dataclasses.field(default_factory=TrainRecipe)
    budget: Budget = DEFAULT_BUDGET
    data: DataSpec = dataclasses.field(default_factory=DataSpec)
    search: SearchSection = dataclasses.field(default_factory=SearchSection)
    resources: Resources = dataclasses.field(default_factory=Resources)
    #: the file it came from ("" when built otherwise); not part of the spec's content
    source: str = dataclasses.field(default="", compare=False)

    def __post_init__(self) -> None:
        """Rules between sections (each section checks its own fields and the rules among them)."""
        s, b = self.search, self.budget
        if s.max_flops is not None and b.kind == "flops" and s.max_flops < b.value:
            raise UserError(
                f"search.max_flops (--max-flops) {s.max_flops:g} is less than one candidate's "
                f"budget ({b}): no trial could start"
            )
        if b.rungs and self.recipe.schedule != "wsd":
            raise ConfigError(rungs_need_wsd(self.recipe.schedule), "budget.rungs")
        if self.resources.keep_weights and s.evaluator.partition(":")[0] != "lm":
            raise ConfigError(
                f"keeps the weights of trained language models, and {named('search', 'evaluator')} "
                f"{s.evaluator} trains none; drop it or use the lm evaluator",
                named("resources", "keep_weights"),
            )

    @classmethod
    def from_dict(cls, raw: Any, source: str = "") -> Spec:
        """The spec in a file's plain data; errors name the file and the field."""
        if not isinstance(raw, Mapping):
            raise ConfigError("a spec must be a mapping with 'globals' and 'layers'", source=source)
        try:
            for key in SPEC_KEYS:
                if (
                    key in raw
                    and not isinstance(raw[key], Mapping)
                    and not (key == "data" and isinstance(raw[key], str))
                ):
                    raise ConfigError(f"must be a mapping, got {short_repr(raw[key])}", key)
            budget = Budget.from_dict(raw["budget"]) if "budget" in raw else DEFAULT_BUDGET
            return cls(
                space={k: v for k, v in raw.items() if k not in SPEC_KEYS},
                recipe=TrainRecipe.from_dict(raw.get("recipe")),
                budget=budget,
                data=DataSpec.from_dict(raw.get("data")),
                search=SearchSection.from_dict(raw.get("search")),
                resources=Resources.from_dict(raw.get("resources")),
                source=source,
            )
        except ConfigError as err:
            raise err.in_file(source) if source else err from None

    def to_dict(self, resources: bool = True) -> dict[str, Any]:
        """Plain data that :meth:`from_dict` reads back to an equal spec (the file ``show --spec`` prints)."""
        out = dict(self.space)
        out["recipe"] = dataclasses.asdict(self.recipe)
        out["budget"] = self.budget.to_dict()
        out["data"] = self.data.to_dict()
        out["search"] = self.search.to_dict()
        if resources:
            out["resources"] = self.resources.to_dict()
        return out

    @property
    def seed(self) -> int:
        """The sampler's seed: ``search.seed``, else the training seed ``recipe.seed``."""
        return self.recipe.seed if self.search.seed is None else self.search.seed

    def replace(self, **sections: Any) -> Spec:
        """A copy with whole sections replaced, or fields of them: ``replace(search={"trials": 3})``."""
        changes: dict[str, Any] = {}
        for name, value in sections.items():
            if isinstance(value, Mapping) and name != "space":
                changes[name] = dataclasses.replace(getattr(self, name), **value)
            else:
                changes[name] = value
        return dataclasses.replace(self, **changes)


#: recipe fields that shape wsd's cooldown, and mean nothing under another schedule
_ONLY_UNDER_WSD = ("cooldown_frac", "cooldown_shape")


def unused_settings(
    spec: Spec, given: Mapping[str, Mapping[str, Any]] | None = None
) -> list[tuple[str, str, str]]:
    """(setting, why it changes nothing, what to do instead) for every setting given whose condition the
    spec does not meet: the one rule every command applies before it runs, refusing each in one line
    rather than recording it as if it had been used.

    ``given``: the flags typed (section -> field -> value).  A flag counts whenever typed; a file's value
    counts where it contradicts the same section (a cooldown under a cosine schedule), not where another
    section makes it idle (a file's recipe under ``--evaluator probes``: one file may serve several
    evaluators).
    """
    given = given or {}
    typed = {(section, name) for section, fields in given.items() for name in fields}
    out: list[tuple[str, str, str]] = []
    if str(spec.search.evaluator or "lm").startswith("probes"):
        why = "the probes evaluator trains every task with its own fixed recipe and steps (docs/probes.md)"
        out += [(named(sec, name), why, "the probes' steps: --evaluator probes@STEPS")
                for sec, name in sorted(typed) if sec in ("recipe", "budget")]  # fmt: skip
    if spec.recipe.schedule != "wsd":
        defaults = TrainRecipe()
        for name in _ONLY_UNDER_WSD:
            if ("recipe", name) in typed or getattr(spec.recipe, name) != getattr(defaults, name):
                why = f"shapes wsd's cooldown only, and recipe.schedule is {spec.recipe.schedule}"
                if named("recipe", name) not in {k for k, *_ in out}:
                    out.append((named("recipe", name), why, "or set --recipe.schedule wsd"))
    return out


def proxy_note(spec: Spec, given: Mapping[str, Mapping[str, Any]] | None = None) -> str | None:
    """Notes for recipe and budget flags typed for a search scored by a proxy (or ``sleep``): no trial of
    it trains, but they are not idle: the study records them, and ``confirm`` and ``ladder`` train its
    finalists with them.  Said, so that a flag is never taken silently for one that shapes the search."""
    evaluator = str(spec.search.evaluator or "lm")
    if evaluator.split(":", 1)[0] not in ("proxy", "sleep"):
        return None
    typed = [named(sec, name) for sec, fields in (given or {}).items() if sec in ("recipe", "budget")
             for name in fields]  # fmt: skip
    if not typed:
        return None
    it = "it" if len(typed) == 1 else "them"
    return (f"{', '.join(typed)}: the {evaluator} evaluator trains nothing, so no trial of this search uses "
            f"{it}; the study records {it} for confirm and ladder, which train its finalists so")  # fmt: skip


def refuse_unused(
    spec: Spec, given: Mapping[str, Mapping[str, Any]] | None = None, source: str | None = None
) -> None:
    """Raise a one-line UserError for the first of :func:`unused_settings`; one the flags did not set is
    blamed on ``source``, the file it came from."""
    unused = unused_settings(spec, given)
    if not unused:
        return
    setting, why, instead = unused[0]
    typed = {named(sec, name) for sec, fields in (given or {}).items() for name in fields}
    where = f"{source}: " if source and setting not in typed else ""
    raise UserError(
        f"{where}{setting}: {why}, so it would change nothing; drop it" + (f" ({instead})" if instead else "")
    )


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists and scalars are leaves."""
    if not isinstance(data, Mapping) or not data:
        return {prefix: data}
    out: dict[str, Any] = {}
    for k, v in data.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differences(old: Mapping[str, Any], new: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None
                ) -> list[tuple[str, Any, Any]]:  # fmt: skip
    """(field, old value, new value) for every field two specs' ``to_dict`` disagree on.

    The space's keys are named ``space.KEY...``; the five sections by their own names.  With
    ``defaults`` (a spec's ``to_dict``), a field one side lacks counts as its default there: a spec
    recorded before the field existed ran with the default.
    """

    def flat(spec: Mapping[str, Any]) -> dict[str, Any]:
        space = {k: v for k, v in spec.items() if k not in SPEC_KEYS}
        rest = {k: v for k, v in spec.items() if k in SPEC_KEYS}
        return {**flatten(space, "space"), **flatten(rest)}

    a, b = flat(old), flat(new)
    missing = object()
    d = flat(defaults) if defaults else {}
    pairs = [
        (key, a.get(key, d.get(key, missing)), b.get(key, d.get(key, missing)))
        for key in sorted(set(a) | set(b))
    ]
    return [(key, x, y) for key, x, y in pairs if x != y]


def is_mutable(key: str) -> bool:
    """May ``key`` differ between runs of one study?"""
    return key.startswith(MUTABLE) or key in COSMETIC


def describe(diffs: list[tuple[str, Any, Any]]) -> str:
    """``search.hurdles: [0.5] -> []; recipe.lr: 0.003 -> 0.01``."""

    def show(value: Any) -> str:
        return (
            "(absent)"
            if not isinstance(value, (str, int, float, list, dict, type(None)))
            else short_repr(value)
        )

    return "; ".join(f"{key}: {show(a)} -> {show(b)}" for key, a, b in diffs)
