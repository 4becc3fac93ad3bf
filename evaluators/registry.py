"""Evaluators by name, resolved in one place: ``lm``, ``proxy:NAME``, ``sleep:SECONDS``,
``probes[:TASKS][@STEPS]``.

A name is a kind and an optional argument after a colon (or, for ``probes@STEPS``, an at sign).  :func:`check`
validates a name (the CLI, before anything starts); :func:`build` makes the
evaluator from the name and plain settings (a worker, from its payload: the
``recipe`` dict, ``data``, ``device``, ``compile``...).  A new evaluator is a
class with ``from_settings`` and ``evaluate`` (:class:`evaluators.base.Evaluator`)
registered with :func:`register` in :data:`EVALUATORS` (the same
:class:`nas.registry.Registry` type as blocks and samplers); docs/adding_an_evaluator.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evaluators.base import Evaluator
from evaluators.lm import LMEvaluator
from evaluators.probes import MAX_STEPS as PROBE_MAX_STEPS
from evaluators.probes import TASKS as PROBE_TASKS
from evaluators.probes import ProbeEvaluator, parse_tasks
from evaluators.proxies import PROXIES, ProxyEvaluator, SleepEvaluator
from nas.errors import ConfigError
from nas.registry import Registry


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of evaluator: how to read its name's argument, and how to build it."""

    usage: str  # how to write the name, for error messages and --help
    parse: Callable[[str | None], dict[str, Any]]  # the argument -> settings; raises ValueError when bad
    from_settings: Callable[[Mapping[str, Any]], Evaluator]
    #: a cheap valid name, which the evaluator contract suite (tests/evaluators/test_contract.py) runs
    example: str = ""


def _no_argument(arg: str | None) -> dict[str, Any]:
    if arg is not None:
        raise ValueError("takes no argument")
    return {}


def _proxy(arg: str | None) -> dict[str, Any]:
    if arg not in PROXIES:
        raise ValueError(f"NAME must be one of {', '.join(PROXIES)}")
    return {"proxy": arg}


def _seconds(arg: str | None) -> dict[str, Any]:
    try:
        seconds = float(arg or "")
    except ValueError:
        seconds = -1.0
    if not (seconds >= 0 and math.isfinite(seconds)):  # inf: every trial would wait forever
        raise ValueError("SECONDS must be a finite number >= 0")
    return {"sleep": seconds}


def _probe_tasks(arg: str | None) -> dict[str, Any]:
    """``TASK,TASK...`` and/or ``@STEPS`` (steps per task): ``memorization@100``, ``@500``."""
    if arg is None:
        return {}
    tasks, at, steps = arg.partition("@")
    out: dict[str, Any] = {}
    if at:
        if not steps.isdigit() or not 1 <= int(steps) <= PROBE_MAX_STEPS:
            raise ValueError(f"STEPS after @ must be a whole number in [1, {PROBE_MAX_STEPS}], got {steps!r}")
        out["probe_steps"] = int(steps)
    if tasks or not at:
        if not tasks.strip():
            raise ValueError(f"TASK must name at least one task: {', '.join(PROBE_TASKS)}")
        try:
            out["tasks"] = ",".join(parse_tasks(tasks))
        except ConfigError as err:
            raise ValueError(err.message) from None
    return out


EVALUATORS: Registry[Kind] = Registry("evaluator")


def register(
    name: str,
    usage: str | None = None,
    parse: Callable[[str | None], dict[str, Any]] = _no_argument,
    *,
    example: str | None = None,
) -> Callable[[type], type]:
    """Class decorator: the evaluator class (``from_settings``, ``evaluate``) under ``name``; ``usage``
    says how to write the name (default: the name), ``parse`` reads the argument after its colon,
    ``example`` is a cheap valid name the contract suite runs (default: the name)."""

    def decorator(cls: type) -> type:
        kind = Kind(usage or name, parse, cls.from_settings, example or name)  # type: ignore[attr-defined]
        EVALUATORS.register(name)(kind)
        return cls

    return decorator


register("lm")(LMEvaluator)
register("proxy", f"proxy:NAME (NAME: {', '.join(PROXIES)})", _proxy, example="proxy:params")(ProxyEvaluator)
register("sleep", "sleep:SECONDS", _seconds, example="sleep:0")(SleepEvaluator)
register("probes", "probes[:TASK,TASK...][@STEPS]", _probe_tasks, example="probes:memorization@4")(
    ProbeEvaluator
)


#: the kinds that may screen candidates before training (``--prescreen``): cheaper than training them.
#: ``lm`` would train each candidate twice and ``sleep`` measures nothing (it exists for benchmarks).
SCREENS = ("probes", "proxy")


def _parse(name: str, kinds: Sequence[str] | None = None) -> tuple[Kind, dict[str, Any]]:
    """The kind ``name`` names (one of ``kinds``, default any) and its parsed argument."""
    kind_name, colon, arg = str(name).partition(":")
    if "@" in kind_name:  # probes@STEPS: no tasks named, steps given
        kind_name, _, steps = kind_name.partition("@")
        arg, colon = "@" + steps + colon + arg, ":"
    allowed = {k: v for k, v in EVALUATORS.items() if kinds is None or k in kinds}
    kind = allowed.get(kind_name)
    valid = "; ".join(k.usage for k in allowed.values())
    if kind is None:
        what = (
            f"evaluator {name!r} cannot be used here"
            if kind_name in EVALUATORS
            else f"unknown evaluator {name!r}"
        )
        raise ConfigError(f"{what}; valid: {valid}")
    try:
        return kind, kind.parse(arg if colon else None)
    except ValueError as err:
        listed = "" if "valid:" in str(err) else f"; valid: {valid}"  # the argument's own list says it
        raise ConfigError(f"evaluator {name!r}: {kind_name} {err}{listed}") from None


def check(name: str, kinds: Sequence[str] | None = None) -> str:
    """``name`` if it names an evaluator (of one of ``kinds``, default any); otherwise a
    :class:`ConfigError` listing the valid names."""
    _parse(name, kinds)
    return name


def build(name: str, settings: Mapping[str, Any] | None = None) -> Evaluator:
    """The evaluator ``name`` from plain ``settings`` (what its ``from_settings`` reads)."""
    kind, own = _parse(name)
    return kind.from_settings({**(settings or {}), **own})
