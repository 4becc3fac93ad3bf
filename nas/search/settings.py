"""What a search run needs, checked where it is made: ``SearchSettings``.

The CLI maps flags to fields and nothing more; every rule about the values
lives here, so a search built from Python is held to the same rules as one
built from the command line.  Messages name the flag (``--trials``) because a
field is the flag of the same name (``cpus_per_trial`` is ``--cpus-per-trial``).

Two stages: ``__post_init__`` checks the values alone (ranges, names, flags
that exclude each other) and touches nothing; ``check_environment`` checks
what the values point at (the corpus, the runs directory, the storage file,
a Ray address) just before a search starts, since that can change between
making the settings and running them.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import Any

from evaluators import Budget, TrainRecipe
from nas.data import data_record
from nas.errors import UserError
from nas.search.hurdles import Hurdles
from nas.search.samplers import SAMPLERS
from nas.search.space import SearchSpace
from nas.search.storage import check_storage_url, is_memory_sqlite, sqlite_path
from nas.validate import (
    MAX_SECONDS,
    MAX_SEED,
    MAX_THREADS,
    check_number,
    check_output_file,
    check_study_name,
    check_writable_dir,
)

OBJECTIVES = {"loss": ("minimize",), "loss+flops": ("minimize", "minimize")}
DEVICES = ("auto", "cpu", "cuda")


@dataclasses.dataclass
class SearchSettings:
    """Everything a search run needs; the CLI fills it from flags and the space file."""

    study: str
    storage: str
    space: SearchSpace
    #: finished trials wanted; None: as many as ``max_flops`` buys
    trials: int | None
    budget: Budget
    recipe: TrainRecipe
    objective: str = "loss+flops"
    #: ``auto``: the measured best for the objective (``nas.search.samplers.AUTO``; ``nas.search.study.sampler_name``)
    sampler: str = "auto"
    population: int | None = None
    seed: int = 0
    #: training FLOPs the whole search may spend (nas.search.allowance); None: no such limit
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
    #: train through torch.compile; not in the fingerprint: it changes speed, not what is measured
    compile: bool = False

    def __post_init__(self) -> None:
        check_study_name(self.study, "--study")
        if is_memory_sqlite(self.storage):
            raise UserError(
                f"--storage {self.storage!r} keeps the study in memory: every trial would be lost when the "
                "search ends; use a file (sqlite:///path/study.db) or a database server (postgresql://...)"
            )
        if self.trials is None and self.max_flops is None:
            raise UserError("give --trials, --max-flops or both: a search needs something that ends it")
        if self.trials is not None:
            _check_int("trials", self.trials, low=1)
        if self.max_flops is not None:
            _check_number("max_flops", self.max_flops, positive=True)
            if self.budget.kind == "flops" and self.max_flops < self.budget.value:
                raise UserError(f"--max-flops {self.max_flops:g} is less than one candidate's budget "
                                f"({self.budget}): no trial could start")
        _check_int("seed", self.seed, low=0, high=MAX_SEED)
        _check_int("workers", self.workers, low=1)
        _check_int("retries", self.retries, low=0)
        if self.population is not None:
            _check_int("population", self.population, low=2)  # a population of one has nothing to select from
        _check_number("cpus_per_trial", self.cpus_per_trial, positive=True, high=MAX_THREADS)  # torch threads
        _check_number("gpus_per_trial", self.gpus_per_trial, positive=False)
        _check_number("worker_timeout", self.worker_timeout, positive=True, high=MAX_SECONDS)
        if self.trial_timeout is not None:
            _check_number("trial_timeout", self.trial_timeout, positive=True, high=MAX_SECONDS)
        _check_choice("objective", self.objective, tuple(OBJECTIVES))
        _check_choice("sampler", self.sampler, SAMPLERS)
        _check_choice("device", self.device, DEVICES)
        if self.gpus_per_trial > 0 and self.device == "cpu":
            raise UserError("--gpus-per-trial > 0 with --device cpu: choose one")
        if self.local:
            for field, given in (("address", self.address is not None), ("dashboard", self.dashboard),
                                 ("workers", self.workers > 1), ("trial_timeout", self.trial_timeout is not None)):
                if given:
                    raise UserError(f"--local runs trials one at a time without Ray; drop {flag(field)}")

    def check_environment(self) -> None:
        """Refuse settings whose corpus, directories, storage or Ray address cannot work now.

        Creates nothing; the default corpus is fetched (once per process) here.
        """
        from nas.data import load_corpus
        from nas.preflight import check_search

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


#: fields whose flag is not ``--`` plus the field name with dashes
_FLAGS = {"dashboard": "--ray-dashboard"}


def flag(field: str) -> str:
    """The command-line flag that sets ``field``."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def _check_int(field: str, value: Any, low: int, high: int | None = None) -> None:
    check_number(value, flag(field), integer=True, low=low, high=high)


def _check_number(field: str, value: Any, positive: bool, high: float | None = None) -> None:
    check_number(value, flag(field), low=0, low_open=positive, high=high)


def _check_choice(field: str, value: Any, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise UserError(f"{flag(field)} {value!r}; valid: {', '.join(valid)}")


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
