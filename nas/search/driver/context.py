"""What a search run needs: ``SearchSettings``, made from an experiment spec.

:meth:`SearchSettings.from_spec` is the one place a spec (``nas.spec``: the
space file plus flags) becomes the settings a driver runs; ``search`` and
``confirm`` both come through it.  The values' rules live in the spec's
sections (``nas.spec.sections``); settings built field by field (tests,
Python callers) are checked by building those sections from them, so there
is one set of rules, and messages name the spec field (``search.trials``,
the file key and the ``--search.trials`` flag).

Two stages: creation checks the values alone and touches nothing;
``check_environment`` checks what the values point at (the corpus, the runs
directory, the storage file, a Ray address) just before a search starts,
since that can change between making the settings and running them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import sys
from pathlib import Path
from typing import Any

from nas.data import data_record
from nas.errors import ConfigError, UserError
from nas.search.samplers.hurdles import Hurdles
from nas.search.space.load import SearchSpace
from nas.search.storage.urls import check_storage_url, default_storage, is_memory_sqlite, sqlite_path
from nas.spec import Budget, Resources, SearchSection, Spec, TrainRecipe
from nas.spec.sections import DEVICES, OBJECTIVES
from nas.validate import check_output_file, check_study_name, check_writable_dir

__all__ = ["DEVICES", "OBJECTIVES", "SearchSettings", "check_address", "flag"]


@dataclasses.dataclass
class SearchSettings:
    """Everything a search run needs; see :meth:`from_spec`."""

    study: str
    storage: str
    space: SearchSpace
    #: finished trials wanted; None: as many as ``max_flops`` buys
    trials: int | None
    budget: Budget
    recipe: TrainRecipe
    objective: str = "loss+flops"
    #: ``auto``: the measured best for the objective (``nas.search.samplers.build.AUTO``; ``nas.search.storage.study.sampler_name``)
    sampler: str = "auto"
    population: int | None = None
    seed: int = 0
    #: training FLOPs the whole search may spend (nas.search.driver.allowance); None: no such limit
    max_flops: float | None = None
    hurdles: Hurdles = dataclasses.field(default_factory=Hurdles)
    workers: int = 1
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    address: str | None = None
    device: str = "auto"
    data: str | None = None
    tb_dir: str | None = None
    #: where the study's files go by default (checked writable before anything starts)
    runs_dir: str | None = None
    retries: int = 2
    #: seconds a Ray worker may take to start or restart before the search goes on without it
    worker_timeout: float = 300.0
    trial_timeout: float | None = None  # seconds a trial may run before its worker is killed
    #: run trials one at a time in the driver's process, without Ray (``--local``)
    local: bool = False
    dashboard: bool = False
    #: "lm" trains; "proxy:params" etc. scores without training; "sleep:S" is for overhead benchmarks
    evaluator: str = "lm"
    #: an evaluator run before each candidate trains; its value meets a hurdle at fraction 0
    #: (``hurdles.fractions`` then starts with 0.0; :mod:`evaluators.prescreen`)
    prescreen: str | None = None
    #: train through torch.compile; not in the fingerprint: it changes speed, not what is measured
    compile: bool = False
    #: the spec this run was made from, kept whole in the study (None: settings built by hand)
    spec: Spec | None = None

    @classmethod
    def from_spec(cls, spec: Spec, space: SearchSpace, *, study: str, storage: str, runs_dir: str,
                  data: str | None) -> SearchSettings:  # fmt: skip
        """The settings of a run of ``spec`` (``space`` is its validated space, ``data`` its resolved corpus)."""
        s, r = spec.search, spec.resources
        return cls(
            study=study, storage=storage, space=space, trials=s.wanted_trials(), budget=spec.budget,
            recipe=spec.recipe, objective=s.objective, sampler=s.sampler, population=s.population,
            seed=spec.seed, max_flops=s.max_flops,
            hurdles=Hurdles((0.0,) * (s.prescreen is not None) + s.hurdles, percentile=s.hurdle_percentile,
                            min_trials=s.hurdle_min_trials),
            workers=r.worker_count(os.cpu_count()), cpus_per_trial=r.cpus_per_trial,
            gpus_per_trial=r.gpus_per_trial, address=r.address, device=r.device, data=data,
            tb_dir=tensorboard_dir(runs_dir, study, storage) if r.tensorboard else None, runs_dir=runs_dir,
            retries=r.retries, worker_timeout=r.worker_timeout, trial_timeout=r.trial_timeout,
            local=r.local, dashboard=r.dashboard, evaluator=s.evaluator, prescreen=s.prescreen, compile=r.compile,
            spec=spec,
        )  # fmt: skip

    def __post_init__(self) -> None:
        check_study_name(self.study, "--study")
        if is_memory_sqlite(self.storage):
            raise UserError(
                f"--storage {self.storage!r} keeps the study in memory: every trial would be lost when the "
                "search ends; use a file (sqlite:///path/study.db) or a database server (postgresql://...)"
            )
        if self.trials is None and self.max_flops is None:
            raise UserError("give search.trials, search.max_flops or both: a search needs something that ends it")
        h = self.hurdles
        # the spec's sections hold the rules; building them from these fields applies them
        SearchSection(objective=self.objective, sampler=self.sampler, population=self.population,
                      seed=self.seed, trials=self.trials, max_flops=self.max_flops,
                      hurdles=tuple(f for f in h.fractions if f > 0), hurdle_percentile=h.percentile,
                      hurdle_min_trials=h.min_trials, prescreen=self.prescreen)  # fmt: skip
        if (0.0 in h.fractions) != (self.prescreen is not None):
            raise ValueError("a hurdle at fraction 0 is the prescreen's: hurdles start with 0.0 exactly when "
                             "prescreen is set")  # fmt: skip
        Resources(workers=self.workers, cpus_per_trial=self.cpus_per_trial, gpus_per_trial=self.gpus_per_trial,
                  address=self.address, retries=self.retries, worker_timeout=self.worker_timeout,
                  trial_timeout=self.trial_timeout, device=self.device, compile=self.compile, local=self.local,
                  dashboard=self.dashboard)  # fmt: skip
        from evaluators import registry  # the registry of evaluator names (torch: not in nas.spec)

        try:
            registry.check(self.evaluator)
        except ConfigError as err:
            raise ConfigError(err.message, "search.evaluator (--evaluator)") from None
        if self.prescreen is not None:
            if self.prescreen.partition(":")[0] == "lm":
                raise ConfigError("lm would train each candidate twice; a prescreen is a cheaper evaluator: "
                                  "probes[:TASK,TASK][@STEPS] or proxy:NAME", "search.prescreen (--prescreen)")  # fmt: skip
            try:
                registry.check(self.prescreen, kinds=registry.SCREENS)
            except ConfigError as err:
                raise ConfigError(err.message, "search.prescreen (--prescreen)") from None
            if self.prescreen == self.evaluator:
                raise ConfigError(f"is the search's evaluator too ({self.evaluator}): each candidate would be "
                                  "scored twice the same way; screen with a cheaper evaluator or leave it out",
                                  "search.prescreen (--prescreen)")  # fmt: skip
        if self.max_flops is not None and self.budget.kind == "flops" and self.max_flops < self.budget.value:
            raise UserError(f"search.max_flops (--max-flops) {self.max_flops:g} is less than one candidate's budget "
                            f"({self.budget}): no trial could start")  # fmt: skip

    def check_environment(self) -> Any:
        """Refuse settings whose corpus, directories, storage or Ray address cannot work now;
        returns the corpus.  Creates nothing; the default corpus is fetched (once per process) here.
        """
        from nas.data import load_corpus
        from nas.preflight import check_devices, check_search

        # a device the trials' machine does not have would fail every trial: refused before anything exists
        # joined: a cluster's GPUs are checked by the pool once joined (so is a Ray this process already
        # runs, which the pool uses as it is: a library caller's, or the tests' cluster)
        ray = sys.modules.get("ray")
        joined = not self.local and (self.address is not None or bool(ray and ray.is_initialized()))
        check_devices(self.device, self.gpus_per_trial, on_ray=not self.local, this_machine=not joined)

        corpus = load_corpus(self.data)  # a missing or empty corpus is refused now, not in every trial
        # what every trial would refuse (a model no device holds, a corpus shorter than a window, ...)
        check_search(self.space, self.recipe, self.budget, corpus, trains=self.evaluator == "lm")
        if self.runs_dir is not None:
            check_writable_dir(self.runs_dir, "--runs-dir")
        if self.tb_dir is not None:
            check_writable_dir(self.tb_dir, "--runs-dir")
        check_storage_url(self.storage)
        db = sqlite_path(self.storage)
        if db is not None:  # the database file and its directory, as every output path
            check_output_file(db, f"--storage {self.storage!r}")
        if self.address is not None and not self.local:
            check_address(self.address)
        return corpus

    def fingerprint(self) -> dict[str, Any]:
        """What must match for a study to be continued."""
        return {
            "space_fingerprint": self.space.fingerprint,
            "space_file": self.space.source,
            "objective": self.objective,
            "budget": self.budget.to_dict(),
            "recipe": self.recipe.to_dict(),
            "data": data_record(self.data),  # by content: name, vocabulary, fingerprint, tokenizer
            "seed": self.seed,
            "evaluator": self.evaluator,
        }


def tensorboard_dir(runs_dir: str, study: str, storage: str) -> str:
    """``RUNS_DIR/STUDY/tb``, the study's TensorBoard runs; a study kept in another storage than
    the default gets a subdirectory of its own (``tb/storage-HASH``), so that two studies of one
    name in two databases never write into the same runs."""
    tb = Path(runs_dir) / study / "tb"
    if storage != default_storage(runs_dir, study):
        tb = tb / f"storage-{hashlib.sha256(storage.encode()).hexdigest()[:8]}"
    return str(tb)


def flag(field: str) -> str:
    """The spec field (and ``--`` flag) that sets the settings field ``field``."""
    section = "resources" if field in {f.name for f in dataclasses.fields(Resources)} else "search"
    return f"{section}.{field}"


def check_address(address: str) -> None:
    """Refuse a Ray address that is malformed or unreachable now (Ray itself would retry for minutes)."""
    if address in ("auto", "local"):
        return
    target = address[len("ray://") :] if address.startswith("ray://") else address
    host, sep, port = target.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(
            f"--address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379), ray://HOST:PORT or auto"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=10):
            pass
    except OSError as err:
        raise UserError(
            f"--address {address!r}: cannot reach {host}:{port} ({err.strerror or err}); "
            "is the Ray head running?"
        ) from None
