"""What a study keeps beside Optuna's own fields, and how the read side finds it.

The names of the study's and its trials' user attributes, loading a study by
name, and the questions every command asks of a stored trial (was it trained?
what state do we call it?).  No torch and nothing of the driver: ``best``,
``show`` and ``plot`` start from here.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from evaluators.result import Measure
from evaluators.result import measure_of as result_measure
from nas.errors import UserError
from nas.spec import Spec

REQUEUED = "requeued_as"  # user attr on a trial a dead driver left RUNNING
SETTINGS = "settings"  # study user attr: RunContext.fingerprint() of the run that created it
SPEC = "spec"  # study user attr: the experiment spec (nas.spec) of the study's latest run, whole
CONFIRM_OF = (
    "confirm_of"  # study user attr of a confirmation (made by `confirm`): the search study it confirms
)
#: study user attr of a ladder's runs (nas.ladder.plan.LADDER; named here so storage code can tell the two)
LADDER_PLAN = "ladder_plan"


def derived_kind(study: Any) -> tuple[str, str] | None:
    """(what it is, the command that runs it) for a study ``confirm`` or ``ladder`` made; None for others:
    ``("a ladder's runs", "ladder")`` or ``("a confirmation", "confirm")``."""
    attrs = study.user_attrs
    if CONFIRM_OF not in attrs:
        return None
    return ("a ladder's runs", "ladder") if LADDER_PLAN in attrs else ("a confirmation", "confirm")


SAMPLER = "sampler"  # study user attr: the sampler (``auto`` resolved) the latest run of the study used
#: what ``--sampler auto`` continues a study with that has no SAMPLER record: the default before the record
UNRECORDED_SAMPLER = "nsga2"
#: user attr of a candidate over the caps: why it was not trained
INFEASIBLE = "infeasible"
INTERMEDIATE = "intermediate"  # user attr: {"0.25": loss, ...}, the losses a trial reported at its hurdles
#: user attr of a trial whose trained weights the search kept (``resources.keep_weights``):
#: ``{"file": absolute path, "sha256": hex, "bytes": size}``, set before the trial is told; the file may
#: since have been deleted (the trial dropped out of the best K) or changed: check it against the record
WEIGHTS = "weights"
#: user attributes an evaluator records beside the Result's fields (evaluators.probes: ``probe_*``;
#: evaluators.prescreen: ``prescreen_*``); a twin copies them with the metrics
EVALUATOR_PREFIXES = ("probe_", "prescreen_")


def study_exists(storage: optuna.storages.BaseStorage, name: str) -> bool:
    return any(s.study_name == name for s in storage.get_all_studies())


def load_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study:
    if not study_exists(storage, name):
        names = [s.study_name for s in storage.get_all_studies()]
        raise UserError(
            f"--study {name!r} not found in this storage; studies there: {', '.join(names) or '(none)'}"
        )
    return optuna.load_study(study_name=name, storage=storage)


def stored_spec(study: optuna.Study) -> Spec | None:
    """The spec ``study`` keeps (None: made before studies kept one, or not by ``search``)."""
    raw = study.user_attrs.get(SPEC)
    return Spec.from_dict(raw, f"the spec of study {study.study_name!r}") if isinstance(raw, dict) else None


def settings_of(study: optuna.Study) -> dict[str, Any]:
    """What the driver recorded for the whole study (space, objective, budget, recipe, data, seed)."""
    return dict(study.user_attrs.get(SETTINGS) or {})


def evaluator_of(study: optuna.Study) -> str:
    """The evaluator that scored the study's trials (``lm`` when the study does not say): only ``lm``'s
    value is a language model's loss, whose perplexity and bits per byte mean something."""
    return str(settings_of(study).get("evaluator") or "lm")


def is_infeasible(t: FrozenTrial) -> bool:
    """A COMPLETE trial told without training because it was over the caps."""
    return t.state == TrialState.COMPLETE and (
        bool(t.user_attrs.get(INFEASIBLE)) or any(v > 0 for v in t.constraints.values())
    )


def state_name(t: FrozenTrial) -> str:
    """The trial's state as the commands say it: INFEASIBLE for a candidate over the caps (never trained),
    REQUEUED for one a stopped driver interrupted and queued again (Optuna's FAIL: no failure of the
    candidate's, and its run again is another trial)."""
    if is_infeasible(t):
        return "INFEASIBLE"
    if t.state == TrialState.FAIL and t.user_attrs.get(REQUEUED) is not None:
        return "REQUEUED"
    return t.state.name


def trained(study: optuna.Study) -> list[FrozenTrial]:
    """COMPLETE trials with a measured result: what leaderboards, fronts, plots and exports may show."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return [t for t in complete if not is_infeasible(t)]


def measure_of(study: optuna.Study) -> Measure:
    """What the study's recorded value is (a loss, a probe score, a proxy's value): how to name and show
    it."""
    return result_measure(evaluator_of(study))
