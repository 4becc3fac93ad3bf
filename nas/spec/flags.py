"""Command-line flags derived from the spec's dataclasses: ``--section.field VALUE``.

Every field of ``recipe``, ``data``, ``search`` and ``resources`` becomes a
flag named after it (``--search.trials``), with its short alias where it has
one (``--trials``: one flag, two spellings, so they cannot disagree); the
budget's four kinds are ``--budget.steps`` ... (at most one).  A flag's
default is "not given" (``argparse.SUPPRESS``), so a field set in the file and
not on the command line keeps the file's value; :func:`spec_flags` collects
what was given (once per command) and :meth:`SpecFlags.apply` puts it into a
spec, where the sections' checks run.  Nothing here maps a field to a flag by hand.

Why not tyro or jsonargparse (both derive a CLI from dataclasses, and
jsonargparse reads a YAML file with ``--a.b`` overrides): the CLI is argparse
subcommands with a house rule for mistakes (one line, exit 2, the field and
what is valid), the spec file is read by our own YAML reader (duplicate keys
and non-finite numbers refused, errors with line numbers) and is also the
search-space file, and "not given" must be told apart from "given as the
default".  Each library would have to be bent on all three; the derivation
below is one loop over ``dataclasses.fields`` (docs/spec.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from nas.errors import ConfigError, UserError
from nas.spec.sections import ALIASES, SECTIONS, DataSpec, Resources, SearchSection, named
from nas.spec.spec import Spec
from nas.spec.training import BUDGET_KINDS, Budget, TrainRecipe

BUDGET_HELP = {
    "steps": "optimizer steps",
    "tokens": "training tokens (e.g. 2e6)",
    "flops": "training FLOPs (e.g. 1e13); bigger models see fewer tokens",
    "seconds": "wall-clock seconds of training",
}

BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
#: what an optional field's flag takes for None (its default), as YAML writes it
NULLS = ("null", "none", "~")
ALL_SECTIONS = ("recipe", "budget", "data", "search", "resources")


def _classes() -> dict[str, Any]:
    return {"recipe": TrainRecipe, **SECTIONS}


class _OneName(argparse.Action):
    """Store the value, refusing a field given through two of its names (``--trials 5 --search.trials 7``):
    which one wins would be a guess.  The same name given twice keeps argparse's rule (the last).  A name
    without a value (``nargs=0``: ``--no-tensorboard``) stores ``const``, and is one of the names too."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = namespace.__dict__.setdefault(GIVEN_AS, {})
        earlier = given.get(self.dest)
        if earlier is not None and earlier != option_string:
            parser.error(f"{earlier} and {option_string} both set {self.dest}; give it once")
        given[self.dest] = option_string
        texts = namespace.__dict__.setdefault(GIVEN_TEXT, {})
        if self.nargs == 0:
            values = _Typed(self.const, option_string or "")
        if isinstance(values, _Typed):
            texts[self.dest], values = values.text, values.value
        else:
            texts[self.dest] = str(values)
        setattr(namespace, self.dest, values)


#: the namespace attribute where :class:`_OneName` keeps which name set each field
GIVEN_AS = "_spec_flag_names"
#: ... and the text the user typed for each (``2``, which the field holds as ``2.0``)
GIVEN_TEXT = "_spec_flag_texts"


@dataclasses.dataclass(frozen=True)
class _Typed:
    """A flag's value and the text it was read from, from ``type=`` to :class:`_OneName`, which keeps the
    text so that an error quotes what the user wrote (``got 2``), not its conversion (``got 2.0``)."""

    value: Any
    text: str


def flag_texts(args: argparse.Namespace) -> dict[str, str]:
    """``{"recipe.lr": "-1"}``: the text of each spec flag given, as typed."""
    return dict(vars(args).get(GIVEN_TEXT, {}))


def as_written(err: ConfigError, value: Any, text: str | None, where: str) -> ConfigError:
    """``err`` about a flag's value, at ``where`` (the flag), quoting ``text`` (what was typed) where the
    message quotes the value converted: ``got 2.0`` for ``--recipe.warmup_frac 2`` reads ``got 2``."""
    message = err.message
    if text is not None:
        for shown in _shown(value):
            if f"got {shown}" in message:
                message = message.replace(f"got {shown}", f"got {text}", 1)
                break
    return ConfigError(message, where)


def blame_flag(err: ConfigError, spec: Spec, texts: Mapping[str, str]) -> ConfigError | None:
    """``err`` about a ``recipe``/``budget``/``data`` field the command line gave (``texts``:
    :func:`flag_texts`), naming the flag instead of the file and quoting what was typed; None when the
    field came from the file."""
    path = err.path
    given = [f for f in sorted(texts) if f == path or f.startswith(f"{path}.")]
    if not given or not path.startswith(("recipe", "budget", "data")):
        return None
    section, _, field_ = given[0].partition(".")
    part = getattr(spec, section)
    value = part.value if section == "budget" and field_ != "rungs" else getattr(part, field_, None)
    return as_written(err, value, texts[given[0]], "--" + named(section, field_))


#: the fields whose checks outside the spec (a device, a tokenizer file, the corpus's records) name
#: their flag or field but not the file
_NAMED_BY_FLAG = (
    ("data", "tokenizer"),
    ("data", "text_field"),
    ("data", "on_bad_record"),
    ("resources", "device"),
    ("resources", "gpus_per_trial"),
)


def from_source(err: UserError, source: str, texts: Mapping[str, str]) -> UserError:
    """``err`` naming a field's flag (``--tokenizer PATH: not found``, ``resources.device (--device)
    cuda: ...``) where the value came from ``source`` (the spec file, the study's stored spec), not
    the command line (``texts``: :func:`flag_texts`): it names that source and the field instead, as
    the user never typed the flag."""
    text = str(err)
    for section, field_ in _NAMED_BY_FLAG:
        flag = named(section, field_)  # resources.device (--device), or data.text_field
        short = flag.split("(", 1)[-1].rstrip(")")
        forms = (f"{flag} ", f"{short} ", f"{section}.{field_} ")
        lead = next((form for form in forms if text.startswith(form)), None)
        if lead is not None and f"{section}.{field_}" not in texts:
            return UserError(f"{source}: {section}.{field_} {text[len(lead) :]}")
    return err


def _shown(value: Any) -> list[str]:
    """How messages show ``value``: its repr (cut short or not), its str, a tuple as a list."""
    from nas.validate import short_repr

    out = [short_repr(value), repr(value), str(value)]
    if isinstance(value, tuple):
        out += [repr(list(value)), short_repr(list(value))]
    return list(dict.fromkeys(out))


def add_spec_flags(
    parser: argparse.ArgumentParser,
    sections: Iterable[str] = ALL_SECTIONS,
    only: Mapping[str, Iterable[str]] | None = None,
    hidden: Iterable[str] = (),
) -> None:
    """Add a ``--section.field`` flag for every field of ``sections`` (``only[section]``: those fields).
    ``hidden`` (``resources.keep_weights``): parsed, so the command refuses them in its own words, but
    left out of ``--help``, which lists what the command takes."""
    hidden = set(hidden)
    only = only or {}
    for section in sections:
        group = parser.add_argument_group(f"{section} (the spec file's `{section}:` section)")
        if section == "budget":
            excl = group.add_mutually_exclusive_group()
            for kind in BUDGET_KINDS:
                excl.add_argument(
                    f"--budget.{kind}",
                    ALIASES[f"budget.{kind}"],
                    dest=f"budget.{kind}",
                    action=_OneName,
                    type=_parser(float if kind != "steps" else int),
                    default=argparse.SUPPRESS,
                    metavar=kind.upper(),
                    help=BUDGET_HELP[kind],
                )
            group.add_argument(
                "--budget.rungs",
                dest="budget.rungs",
                action=_OneName,
                type=_parser(tuple),
                default=argparse.SUPPRESS,
                metavar="FRACTIONS",
                help="with --recipe.schedule wsd: fractions of the budget where a cooldown is branched off "
                "and evaluated, e.g. 0.25,0.5 (docs/training.md)",
            )
            continue
        cls = _classes()[section]
        hints = typing.get_type_hints(cls)
        wanted = set(only.get(section, ())) or None
        for f in dataclasses.fields(cls):
            if wanted is not None and f.name not in wanted:
                continue
            meta = f.metadata
            alias = meta.get("alias")
            names = [f"--{section}.{f.name}"] + ([alias] if alias else [])
            kind = _base_type(hints[f.name])
            optional = type(None) in typing.get_args(hints[f.name])  # `null` resets it, as in a file
            default = f.default if f.default is not dataclasses.MISSING else None
            help_text = meta.get("help", "")
            help_text = f"{help_text} (default: {_show(default)})" if default not in (None, ()) else help_text
            extra: dict[str, Any] = {"metavar": meta.get("metavar")}
            valid = getattr(meta.get("check"), "valid", None)
            if valid is not None:  # a choice: argparse lists the valid values
                extra["choices"] = valid
            if kind is bool:
                extra = {"nargs": "?", "const": True, "metavar": "BOOL"}
            group.add_argument(
                *names,
                dest=f"{section}.{f.name}",
                type=_parser(kind, optional),
                action=_OneName,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS if f"{section}.{f.name}" in hidden else help_text,
                **extra,
            )
    if "resources" in sections and (not only.get("resources") or "tensorboard" in only["resources"]):
        # the one negative alias: `--no-tensorboard` is `--resources.tensorboard false`
        parser.add_argument(
            "--no-tensorboard",
            dest="resources.tensorboard",
            action=_OneName,
            nargs=0,
            const=False,
            default=argparse.SUPPRESS,
            help="do not write TensorBoard runs",
        )


def overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The spec fields the command line gave: ``{"search": {"trials": 2}, "budget": {"steps": 5}}``."""
    out: dict[str, dict[str, Any]] = {}
    for dest, value in vars(args).items():
        section, dot, name = dest.partition(".")
        if dot and section in ALL_SECTIONS:
            out.setdefault(section, {})[name] = value
    return out


def apply(spec: Spec, given: Mapping[str, Mapping[str, Any]], texts: Mapping[str, str] | None = None) -> Spec:
    """``spec`` with the fields ``given`` replaced; the sections check the new values.  An error about
    one of them names its flag and quotes ``texts`` (:func:`flag_texts`), the values as typed."""
    changes: dict[str, Any] = {}
    for section, fields_ in given.items():
        try:
            if section == "budget":
                kinds = {k: v for k, v in fields_.items() if k != "rungs"}
                kind, value = next(iter(kinds.items())) if kinds else (spec.budget.kind, spec.budget.value)
                changes["budget"] = Budget(kind, value, fields_.get("rungs", spec.budget.rungs))
            else:
                changes[section] = dataclasses.replace(getattr(spec, section), **fields_)
        except ConfigError as err:  # a flag's value: name the flag (a file's value keeps the file's name)
            field_ = err.path.split(".", 1)[1] if err.path.startswith(f"{section}.") else ""
            if field_ in fields_:  # --search.trials (--trials): the flag and the alias one may have typed
                text = (texts or {}).get(f"{section}.{field_}")
                raise as_written(err, fields_[field_], text, "--" + named(section, field_)) from None
            # a rule between fields (warmup_frac + cooldown_frac) located at one the flags did not give:
            # the flag given that the message names is the one to change
            at = field_.split(" (")[0]  # "gpus_per_trial (--gpus-per-trial)": the section named its flag
            named_given = [f for f in fields_ if f"{section}.{f}" in err.message]
            if at not in fields_ and named_given:
                raise ConfigError(err.message, "--" + named(section, named_given[0])) from None
            raise
    try:
        return dataclasses.replace(spec, **changes)
    except ConfigError as err:  # a rule between sections (budget.rungs needs recipe.schedule: wsd)
        # the field it is located at, named by its flag when a flag gave it, else by the file that did
        at = err.path.split(" (")[0]
        section, _, field_ = at.partition(".")
        if field_ in given.get(section, {}):
            raise ConfigError(err.message, "--" + named(section, field_)) from None
        if spec.source and not err.source:
            raise err.in_file(spec.source) from None
        raise


@dataclasses.dataclass(frozen=True)
class SpecFlags:
    """The spec flags one command line gave, read from its ``args`` once (:func:`spec_flags`): the values
    by section (:func:`overrides`) and the text typed for each (:func:`flag_texts`)."""

    values: Mapping[str, Mapping[str, Any]]
    texts: Mapping[str, str]

    def section(self, name: str) -> Mapping[str, Any]:
        """The fields of section ``name`` the command line gave (empty: none)."""
        return self.values.get(name, {})

    def apply(self, spec: Spec) -> Spec:
        """``spec`` with these flags applied (:func:`apply`)."""
        return apply(spec, self.values, self.texts)

    def blame(self, err: ConfigError, spec: Spec) -> ConfigError | None:
        """``err`` naming the flag that gave its field (:func:`blame_flag`); None when the file did."""
        return blame_flag(err, spec, self.texts)


def spec_flags(args: argparse.Namespace) -> SpecFlags:
    """The spec flags of the command line ``args``: what a command resolves once, in its ``run``, and
    hands to whatever applies, checks or reads them."""
    return SpecFlags(overrides(args), flag_texts(args))


def _base_type(hint: Any) -> type:
    """``int | None`` -> int; ``tuple[float, ...]`` -> tuple."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _base_type(inner)
    if origin is tuple:
        return tuple
    return hint  # type: ignore[no-any-return]


def _parser(kind: type, optional: bool = False) -> Any:
    """argparse's ``type=`` for a field of ``kind``: the value's text to the value, or a one-line error.
    An ``optional`` field (default None) also takes ``null``, as a spec file writes it: the default, so a
    flag can undo a file's value (``--workers null`` beside ``--local``)."""

    def parse(text: str) -> Any:
        if not text.strip():
            raise argparse.ArgumentTypeError(
                "is empty; give a value, or leave the flag out (the file's value)"
            )
        if optional and text.strip().lower() in NULLS:
            return _Typed(None, text)
        if kind is bool:
            value = BOOLS.get(text.lower())
            if value is None:
                raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
            return _Typed(value, text)
        if kind is tuple:  # a list of numbers: 0.25,0.5
            items = [x.strip() for x in text.split(",")]
            if not all(items):
                raise argparse.ArgumentTypeError(
                    f"an empty item in {text!r}; give comma-separated numbers like 0.25,0.5"
                )
            return _Typed(tuple(_number(x, float) for x in items), text)
        if kind in (int, float):
            return _Typed(_number(text, kind), text)
        return text

    parse.__name__ = getattr(kind, "__name__", "value")  # argparse names the type in its messages
    return parse


def _number(text: str, kind: type) -> Any:
    try:
        value = float(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    if kind is int:
        if not value.is_integer():
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
        return int(value)
    return value


def _show(value: Any) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, tuple) else str(value)


__all__ = [
    "ALL_SECTIONS", "DataSpec", "Resources", "SearchSection", "SpecFlags", "add_spec_flags", "apply",
    "as_written", "blame_flag", "flag_texts", "overrides", "spec_flags",
]  # fmt: skip
