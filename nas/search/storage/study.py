"""Optuna studies: open or create one with its settings record, resume after a crash.

The Optuna storage is the single record of a search.  The study's user
attributes hold what every trial must share (space fingerprint, objective,
budget, recipe, data, seed), so a second run continues the same experiment
or is refused with a clear line, never silently mixed.  Storage URLs and how
a database is opened are in :mod:`nas.search.storage.urls`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import optuna
from optuna.trial import TrialState

from nas.data import describe_record, same_data
from nas.errors import UserError
from nas.files.paths import recorded
from nas.program import prog_name
from nas.redact import mask_url
from nas.search.samplers.build import make_sampler, resolve_sampler, run_seed
from nas.search.space.load import SearchSpace
from nas.search.storage.lease import DriverLease, Holder, any_holder, refuse_if_held
from nas.search.storage.records import (
    CONFIRM_OF,
    REQUEUED,
    SAMPLER,
    SETTINGS,
    SPEC,
    UNRECORDED_SAMPLER,
    derived_kind,
    study_exists,
)
from nas.search.storage.urls import (
    fast_sqlite_commits,
    open_storage,
    storage_exists,
)
from nas.spec import Spec, describe, differences, is_mutable
from nas.spec.sections import OBJECTIVE_METRICS, OBJECTIVES


class StudyRun(Protocol):
    """What opening or creating a search study reads of a run: its spec and where its study is.

    The driver's :class:`~nas.search.driver.context.RunContext` is one; the storage
    sits below the driver and does not import it.
    """

    study: str
    storage: str
    space: SearchSpace
    spec: Spec

    @property
    def trials(self) -> int | None:
        """Finished trials wanted (None: no limit)."""
        ...

    def fingerprint(self) -> dict[str, Any]:
        """What must match for a study to be continued (:func:`check_settings`)."""
        ...


def check_spec(study: optuna.Study, spec: Spec | None) -> None:
    """Refuse to continue ``study`` with a spec whose fields differ where trials would no longer compare.

    Names every field that differs.  Fields that may change between runs
    (``nas.spec.MUTABLE``: trial counts, sampler, resources) and the space's name
    and description pass; the data is compared by content (:func:`check_settings`).
    """
    old = study.user_attrs.get(SPEC)
    if spec is None or not isinstance(old, dict):
        return
    # A field added since the study was recorded ran at its default; the budget is one of several
    # forms (steps, flops, ...), so a form the old spec lacks is a real difference, not a default.
    defaults = {k: v for k, v in Spec(space={}).to_dict().items() if k != "budget"}
    diffs = [d for d in differences(old, spec.to_dict(), defaults=defaults) if not d[0].startswith("data.")]
    fixed = [d for d in diffs if not is_mutable(d[0])]
    if fixed:
        raise UserError(
            f"--study {study.study_name!r} was run with other values of {len(fixed)} field(s) that decide "
            f"what a trial measures: {describe(fixed)}; continue it with its own spec (`search --study "
            f"{study.study_name}` without --space or those flags; `show --study {study.study_name} --spec` "
            "prints it) or choose a new --study name"
        )


def record_spec(study: optuna.Study, spec: Spec | None) -> None:
    """Keep ``spec`` whole in ``study`` (the driver, under its lease): what ``show --spec`` prints, and what
    ``search --study S`` without ``--space`` continues with, from any directory: so a corpus or tokenizer
    path is kept absolute (``--data text.txt`` was kept as typed, and the same command run elsewhere
    said the corpus was not found)."""
    if spec is None:
        return
    paths = {key: recorded(getattr(spec.data, key)) for key in ("corpus", "tokenizer")}
    spec = spec.replace(data=paths)
    if study.user_attrs.get(SPEC) != spec.to_dict():
        study.set_user_attr(SPEC, spec.to_dict())


def check_data(study: optuna.Study, now: dict[str, Any], remedy: str) -> None:
    """Refuse data whose record ``now`` (:func:`nas.data.data_record`) is not the data ``study`` ran on.

    By content: the same text elsewhere is fine, new text at the same path is not.  Used
    wherever a study's trials are continued or compared with new runs (``search``, ``confirm``);
    ``remedy`` says what to do instead.  A study that records no data is not checked.
    """
    old = (study.user_attrs.get(SETTINGS) or {}).get("data", _NO_RECORD)
    if old is not _NO_RECORD and not same_data(old, now):
        raise UserError(
            f"--study {study.study_name!r} was run on other data ({describe_record(old)}, "
            f"now {describe_record(now)}); {remedy}"
        )


_NO_RECORD = object()


def check_settings(study: optuna.Study, settings: dict[str, Any], spec_checked: bool = False) -> None:
    """Refuse to continue a study under different settings (the results would not compare).

    With ``spec_checked`` (the study keeps its spec, compared field by field already)
    only the data is compared here, by content.
    """
    old = study.user_attrs[SETTINGS]
    keys = (
        ("data",)
        if spec_checked
        else ("space_fingerprint", "objective", "budget", "recipe", "data", "seed", "evaluator")
    )
    for key in keys:
        if key == "space_fingerprint" and key in old and old[key] != settings.get(key):
            raise UserError(
                f"--study {study.study_name!r} was run with a different search space "
                f"({old.get('space_file', '?')}, fingerprint {old[key]}; now --space "
                f"{settings.get('space_file')}, fingerprint {settings.get(key)}); "
                "continue it with the same space or choose a new --study name"
            )
        if key == "data" and key in old:
            check_data(study, settings[key], "continue it on the same data or choose a new --study name")
            continue
        if key in old and old[key] != settings.get(key):
            raise UserError(
                f"--study {study.study_name!r} was run with a different {key.replace('_', ' ')} "
                f"({old[key]!r}, now {settings.get(key)!r}); continue it with the same settings "
                "or choose a new --study name"
            )


def load_existing_study(settings: StudyRun, confirmation: bool = False) -> optuna.Study | None:
    """The study ``settings`` names if it exists (None otherwise), after checking it may be continued.

    Reads only: a missing SQLite file is not created, and a study run under other
    settings is refused before anything is written to it.
    """
    if not storage_exists(settings.storage):
        return None
    storage = open_storage(settings.storage, create_dirs=False)
    if not study_exists(storage, settings.study):
        return None
    refuse_if_held(storage, settings.study)  # before any other check: another driver runs it now
    # RandomSampler: a placeholder until the study's own record says which sampler continues it (below)
    study = optuna.load_study(
        study_name=settings.study, storage=storage, sampler=optuna.samplers.RandomSampler()
    )
    kind = derived_kind(study)
    if kind is not None and not confirmation:  # fixed runs: sampling into it would corrupt them
        command = kind[1]
        what = "the ladder" if command == "ladder" else "the confirmation"
        raise UserError(
            f"--study {settings.study!r} is {what} of study {study.user_attrs[CONFIRM_OF]!r} (made by "
            f"`{command}`), not a search; continue it with `{prog_name()} {command} --study "
            f"{study.user_attrs[CONFIRM_OF]}`, or give a new --study name to search"
        )
    if SETTINGS not in study.user_attrs:
        if _never_ran(study):  # its creation was interrupted: create_new_study replaces it
            return None
        raise UserError(
            f"--study {settings.study!r} has trials but no settings record (it was not made by "
            "`search`), so nothing says what they were run with; choose a new --study name"
        )
    objective = settings.spec.search.objective
    if len(study.directions) != len(OBJECTIVES[objective]):
        raise UserError(
            f"--study {settings.study!r} has {len(study.directions)} objective(s); "
            f"--objective {objective} needs {len(OBJECTIVES[objective])}"
        )
    check_spec(study, settings.spec)
    check_settings(study, settings.fingerprint(), spec_checked=SPEC in study.user_attrs)
    study.sampler = _sampler(settings, sampler_name(settings, study), len(study.get_trials(deepcopy=False)))
    fast_sqlite_commits(storage)  # only now: a study refused above is left exactly as it was
    return study


def create_new_study(
    settings: StudyRun, heartbeat: float | None = None
) -> tuple[optuna.Study, list[str], DriverLease]:
    """Create the search study (and its SQLite file and directory) under this driver's lease.

    Returns the study, the seed archs queued and the lease (renewing; the caller releases it).
    """
    storage = open_storage(settings.storage)  # fast commits once nothing is refused (create_under_lease)
    seeds: list[str] = []

    def record(study: optuna.Study) -> None:
        set_metric_names(study)
        seeds.extend(enqueue_seed_archs(study, settings.space))
        study.set_user_attr(SAMPLER, sampler_name(settings))
        record_spec(study, settings.spec)
        study.set_user_attr(SETTINGS, settings.fingerprint())

    study, lease = create_under_lease(
        storage, settings.study, settings.storage, list(OBJECTIVES[settings.spec.search.objective]),
        _sampler(settings, sampler_name(settings)), record, heartbeat,
    )  # fmt: skip
    return study, seeds, lease


def create_under_lease(
    storage: optuna.storages.RDBStorage,
    name: str,
    url: str,
    directions: list[str],
    sampler: optuna.samplers.BaseSampler | None,
    record: Callable[[optuna.Study], None],
    heartbeat: float | None = None,
) -> tuple[optuna.Study, DriverLease]:
    """Create study ``name`` and write its records (``record``, the settings record last) under a lease.

    Optuna writes a study and each of its attributes in separate transactions.  So the lease
    is taken first (``creating=True``) and the settings record is the commit point: a study
    that fails while being made is deleted here (it is this call's own), and one left by a
    driver killed while making it (a study without a settings record and whose lease row its
    gone maker still holds) is replaced.  Any other study of that name, one made with Optuna
    outside this tool included, is refused and left exactly as it is.
    """
    exists = f"--study {name!r} exists already in --storage {mask_url(url)!r}"

    def check_replaceable(maker: Holder | None) -> bool:
        """Whether the study of that name (if any) is a half-made one of a killed driver; else refuse."""
        if not study_exists(storage, name):
            return False
        old = optuna.load_study(study_name=name, storage=storage)
        if SETTINGS in old.user_attrs:
            # this driver found no study when it started (else it would continue it): another made it since
            raise UserError(
                f"{exists}: another driver created it while this one was starting (two searches of one "
                "study at once); it is left to that driver: run the same command again later to continue it"
            )
        if maker is None or not _never_ran(old):
            raise UserError(
                f"{exists} and was not made by this tool (it has no settings record); it is left "
                "as it is: choose a new --study name"
            )
        return True

    check_replaceable(any_holder(storage, name))  # reads only: a study refused here is left exactly as it was
    fast_sqlite_commits(storage)
    lease = DriverLease(storage, name, heartbeat, creating=True)
    gone = lease.acquire()  # LeaseHeld: a live driver runs or creates the study
    try:
        if check_replaceable(gone):  # again under the lease: what is found now is this driver's to judge
            optuna.delete_study(study_name=name, storage=storage)  # the half-made study of a killed driver
        try:
            study = optuna.create_study(
                study_name=name, storage=storage, directions=directions, sampler=sampler
            )
        except optuna.exceptions.DuplicatedStudyError:  # made a moment ago by something that takes no lease
            raise UserError(exists) from None
        try:
            lease.bind()
            record(study)
        except BaseException:
            try:  # this call's own half-made study: nothing half-written is left
                optuna.delete_study(study_name=name, storage=storage)
            except Exception:  # noqa: BLE001 - the storage may be what failed; the next start replaces it
                pass
            raise
    except BaseException:
        lease.release()
        raise
    return study, lease


def drop_if_empty(study: optuna.Study) -> bool:
    """Delete ``study`` (made by this run, under its lease) if no trial of it ever finished: a search
    that failed or was stopped before its first result leaves no empty study behind."""
    finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    if any(t.state in finished and not t.user_attrs.get(REQUEUED) for t in study.get_trials(deepcopy=False)):
        return False
    try:
        # private: Study has no public accessor for its storage (see take_lease)
        optuna.delete_study(study_name=study.study_name, storage=study._storage)
    except Exception:  # noqa: BLE001 - the storage may be what failed; the next start continues it
        return False
    return True


def take_lease(study: optuna.Study, heartbeat: float | None = None) -> tuple[DriverLease, Holder | None]:
    """This driver's lease on an existing ``study`` (renewing), and the gone holder it replaced, if any.

    Raises :class:`~nas.search.storage.lease.LeaseHeld` when a live driver holds it.
    """
    # private: Study has no public accessor for its storage, and load_study wraps the RDBStorage in a cache
    storage = getattr(study._storage, "_backend", study._storage)
    lease = DriverLease(storage, study.study_name, heartbeat)
    return lease, lease.acquire()


#: what the objectives are called in optuna-dashboard and ``study.metric_names``, in objective order
METRIC_NAMES = OBJECTIVE_METRICS["loss+flops+state"]


def set_metric_names(study: optuna.Study) -> None:
    """Name the objectives (optuna-dashboard shows ``0`` and ``1`` otherwise); a new study only."""
    import warnings

    with warnings.catch_warnings():  # set_metric_names is marked experimental in Optuna 5
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(list(METRIC_NAMES[: len(study.directions)]))


def _never_ran(study: optuna.Study) -> bool:
    """No trial of ``study`` was ever asked: at most the seed architectures are queued."""
    return all(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))


def sampler_name(settings: StudyRun, study: optuna.Study | None = None) -> str:
    """The sampler a run of ``settings`` uses on ``study`` (None: a study it is about to create).

    A sampler named explicitly is used as named (a study may change samplers between
    runs, as it always could).  ``auto`` resolves, for a new study, to the measured best
    for its number of objectives (``nas.search.samplers.build.AUTO``); an existing study
    continues with the sampler it recorded, or, without a record (made before there was
    one), with aging evolution if its trials show it ran (an evolved trial records its
    ``parent``), else :data:`UNRECORDED_SAMPLER`, the default it then ran with.
    """
    if settings.spec.search.sampler != "auto":
        return settings.spec.search.sampler
    if study is None:
        return resolve_sampler("auto", len(OBJECTIVES[settings.spec.search.objective]))
    if SAMPLER in study.user_attrs:
        return str(study.user_attrs[SAMPLER])
    evolved = any(t.user_attrs.get("parent") is not None for t in study.get_trials(deepcopy=False))
    return "evolution" if evolved else UNRECORDED_SAMPLER


def record_sampler(study: optuna.Study, settings: StudyRun) -> str:
    """Record in ``study`` the sampler this run uses (the driver, under its lease); returns its name."""
    name = sampler_name(settings, study)
    if study.user_attrs.get(SAMPLER) != name:
        study.set_user_attr(SAMPLER, name)
    return name


def _sampler(settings: StudyRun, name: str, n_trials: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler ``name`` for a run starting on a study of ``n_trials`` trials (0: a new study)."""
    seed = run_seed(settings.spec.seed, n_trials)
    return make_sampler(name, settings.spec.search.population, seed, settings.trials)


def enqueue_seed_archs(study: optuna.Study, space: SearchSpace) -> list[str]:
    """Put the known architectures the space contains at the front of the queue."""
    queued = []
    for name in space.seed_archs:
        params = space.seed_params(name)
        if params is not None:
            study.enqueue_trial(params, user_attrs={"seed_arch": name})
            queued.append(name)
    return queued


def recover_stale(study: optuna.Study) -> list[int]:
    """Fail trials a dead driver left RUNNING and queue their parameters again.

    Only the driver writes the study, and it calls this only once it holds the
    study's lease (:mod:`nas.search.storage.lease`), so a RUNNING trial at start-up
    belongs to a driver that is gone.
    """
    requeued = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        requeue(study, t, "driver stopped while it ran")
        requeued.append(t.number)
    return requeued


def requeue(study: optuna.Study, trial: optuna.trial.FrozenTrial, reason: str) -> None:
    """End a RUNNING trial FAIL with ``reason`` and queue its parameters to run again.

    The failed record is marked ``requeued_as`` so it does not count toward
    ``--trials``; the new trial carries ``requeued_from``.  A trial stopped
    while its parameters were being sampled re-queues the ones it had (the
    sampler fills in the rest).
    """
    # private: tell() sets no attrs and a RUNNING trial has no public handle (no public trial id nor storage)
    study._storage.set_trial_user_attr(trial._trial_id, "fail_reason", reason)
    study._storage.set_trial_user_attr(trial._trial_id, REQUEUED, True)
    study.tell(trial.number, state=TrialState.FAIL)
    params = dict(trial.params)
    if CONFIRM_OF in study.user_attrs:
        # a confirm or ladder run (queued with all its parameters fixed) stopped while they were being
        # read holds only some: queued again with all of them, or the sampler would fill in the rest at
        # random (a run at a random scale and seed)
        fixed = trial.system_attrs.get("fixed_params")
        params = {**(fixed if isinstance(fixed, dict) else {}), **params}
    study.enqueue_trial(params, user_attrs={"requeued_from": trial.number})


def count_done(study: optuna.Study) -> int:
    """Trials that count toward ``--trials``: finished, except failures that were re-queued."""
    n = 0
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            n += 1
        elif t.state == TrialState.FAIL and not t.user_attrs.get(REQUEUED):
            n += 1
    return n
