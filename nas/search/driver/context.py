"""What a search run reads: the validated spec plus the run's context (:class:`RunContext`).

The spec (:mod:`nas.spec`: the space file plus flags) is the one config object; a
run adds only what the spec cannot say: the study's name and storage, the runs
directory and the resolved corpus.  The driver, ``confirm``, the study storage,
the preflight and the trial payload read ``run.spec.SECTION.FIELD``; the few values
derived from several fields (the hurdles with the prescreen's, the number of
workers on this machine, the trials wanted) are properties here, computed from
the spec, never copied.  The rules between a spec's fields live in its sections'
``check`` (and :class:`~nas.spec.Spec`'s), so they hold wherever a spec is built;
what is checked here is the context, and the evaluator names against the
evaluator registry (which imports torch, so not in the torch-free spec).

Two stages: creation checks the values alone and touches nothing;
``check_environment`` checks what the values point at (the corpus, the runs
directory, the storage file, a Ray address) just before a search starts,
since that can change between making the run and running it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evaluators.result import measure_of
from nas.data import data_record
from nas.errors import ConfigError, UserError
from nas.files.paths import recorded
from nas.search.samplers.hurdles import Hurdles
from nas.search.space.load import SearchSpace
from nas.search.storage.urls import check_storage_url, default_storage, is_memory_sqlite, sqlite_path
from nas.spec import Spec
from nas.spec.sections import named
from nas.validate import check_output_file, check_study_name, check_writable_dir

__all__ = ["RunContext", "check_address", "tensorboard_dir", "weights_dir"]


@dataclasses.dataclass(frozen=True)
class RunContext:
    """One run of a spec: the spec, its validated space, and where the run keeps its study and files."""

    spec: Spec
    #: the spec's space, validated against the block registry (``nas.search.space.load``)
    space: SearchSpace
    study: str
    storage: str
    #: the corpus the trials train on, resolved (with a tokenizer: the token files); None: the default
    data: str | None = None
    #: where the study's files go by default (checked writable before anything starts)
    runs_dir: str | None = None
    #: the spec fields the command line gave (``budget.flops``, ``recipe.seq_len``), each with the text
    #: typed: an error about one of them names the flag, not the space file, and quotes that text
    flags: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: True for ``confirm`` and ``ladder``: what trains is a plan's architectures at the plan's scales of
    #: ``spec.budget``, each checked against its own budget by the plan (``nas.confirm.plan.check_runs``);
    #: the space's candidates never train at ``spec.budget`` itself, so it is not checked against them
    #: (a ladder's 1x budget with its rungs was, and refused ``--scale 8`` of a 2-step study)
    planned: bool = False

    def __post_init__(self) -> None:
        check_study_name(self.study, "--study")
        if is_memory_sqlite(self.storage):
            raise UserError(
                f"--storage {self.storage!r} keeps the study in memory: every trial would be lost when the "
                "search ends; use a file (sqlite:///path/study.db) or a database server (postgresql://...)"
            )
        from evaluators import registry  # the registry of evaluator names (torch: not in nas.spec)

        search = self.spec.search
        try:
            registry.check(search.evaluator)
        except ConfigError as err:
            raise self._search_error("evaluator", err.message) from None
        if search.prescreen is not None:
            try:
                registry.check(search.prescreen, kinds=registry.SCREENS)
            except ConfigError as err:
                raise self._search_error("prescreen", err.message) from None
        for field, name in (("evaluator", search.evaluator), ("prescreen", search.prescreen)):
            if self.space.task == "seq2seq" and str(name or "").startswith("probes"):
                from evaluators.probes import ENCODER_DECODER

                raise self._search_error(field, f"{name!r}: the space {ENCODER_DECODER}")

    def _search_error(self, field: str, message: str) -> ConfigError:
        """An error about ``search.FIELD``: naming its flag when the command line gave the value, else the
        spec file that did (a file's bad evaluator used to be blamed on --evaluator, and no file named)."""
        if f"search.{field}" in self.flags:
            return ConfigError(message, named("search", field))
        return ConfigError(message, f"search.{field}", self.space.source)

    @property
    def trials(self) -> int | None:
        """Finished trials wanted (None: as many as ``search.max_flops`` buys)."""
        return self.spec.search.wanted_trials()

    @property
    def workers(self) -> int:
        """Concurrent trials: ``resources.workers``, or the default for this machine."""
        return self.spec.resources.worker_count(os.cpu_count())

    @property
    def hurdles(self) -> Hurdles:
        """The search's hurdles; with a prescreen, one at fraction 0 first (``evaluators.prescreen``)."""
        s = self.spec.search
        return Hurdles((0.0,) * (s.prescreen is not None) + s.hurdles, percentile=s.hurdle_percentile,
                       min_trials=s.hurdle_min_trials)  # fmt: skip

    @property
    def tb_dir(self) -> str | None:
        """The study's TensorBoard runs (None: ``resources.tensorboard`` off, no runs directory, or an
        evaluator that writes none: the probes and the proxies log no curves)."""
        if not self.spec.resources.tensorboard or self.runs_dir is None:
            return None
        if not measure_of(self.spec.search.evaluator).logs_curves:
            return None
        return tensorboard_dir(self.runs_dir, self.study, self.storage)

    def blame_flag(self, err: ConfigError) -> ConfigError:
        """``err`` about a spec field the command line gave, naming the flag instead of the space file."""
        from nas.spec.flags import blame_flag

        return blame_flag(err, self.spec, self.flags) or err

    def _check_one_trial_fits(self) -> None:
        """With a FLOPs budget and ``--max-flops``, every launch reserves the most a trial can spend: its
        budget, what its wsd rungs' cooldowns may add (:func:`evaluators.budget.most_rung_share`) and
        the most its pre-screen can cost (:func:`nas.search.driver.allowance.screen_bound`); a limit
        below that would start nothing, so it is refused now."""
        s, b = self.spec.search, self.spec.budget
        if s.max_flops is None or b.kind != "flops" or not (s.prescreen or b.rungs):
            return  # the budget alone: the spec refuses a limit below it
        from evaluators.budget import most_rung_share
        from nas.search.driver.allowance import screen_bound

        rungs = b.value * most_rung_share(b, self.spec.recipe)
        bound = screen_bound(self.space, s.prescreen)
        if s.max_flops < b.value + rungs + bound:
            parts = [f"one candidate's budget ({b.value:g} flops)"]
            if rungs:
                parts.append(f"the most its rungs' cooldowns can add ({rungs:.3g})")
            if s.prescreen:
                parts.append(f"the most its pre-screen {s.prescreen} can cost ({bound:.3g})")
            raise UserError(
                f"search.max_flops (--max-flops) {s.max_flops:g} is less than {', '.join(parts[:-1])} and "
                f"{parts[-1]}: no trial could start; give at least {b.value + rungs + bound:.3g}"
            )

    @property
    def weights_dir(self) -> str | None:
        """Where the study keeps its best trials' weights (``resources.keep_weights``); None: no runs
        directory."""
        return None if self.runs_dir is None else weights_dir(self.runs_dir, self.study, self.storage)

    def check_environment(self) -> Any:
        """Refuse a run whose corpus, directories, storage or Ray address cannot work now;
        returns the corpus.  Creates nothing; the default corpus is fetched (once per process) here.
        """
        from nas.data import load_corpus
        from nas.preflight import check_devices, check_search, machine_memory

        r = self.spec.resources
        # a device the trials' machine does not have would fail every trial: refused before anything exists
        # joined: a cluster's GPUs are checked by the pool once joined (so is a Ray this process already
        # runs, which the pool uses as it is: a library caller's, or the tests' cluster)
        ray = sys.modules.get("ray")
        joined = not r.local and (r.address is not None or bool(ray and ray.is_initialized()))
        try:
            check_devices(r.device, r.gpus_per_trial, on_ray=not r.local, this_machine=not joined)
            corpus = load_corpus(self.data)  # a missing or empty corpus is refused now, not in every trial
        except UserError as err:
            from nas.spec.flags import from_source  # a file's value is not the flag's

            raise from_source(err, self.space.source, self.flags) from None
        # what every trial would refuse (a model no device holds, a corpus shorter than a window, ...)
        # the memory one trial gets: read here only where the trials run here (a joined cluster's
        # workers may have other GPUs); on Ray a worker trains on its share of a GPU, or on the CPU
        memory = None if joined else machine_memory(r.device, None if r.local else r.gpus_per_trial)
        try:
            check_search(self.space, self.spec.recipe, None if self.planned else self.spec.budget, corpus,
                         trains=self.spec.search.evaluator == "lm", memory=memory)  # fmt: skip
        except ConfigError as err:
            raise self.blame_flag(err) from None
        self._check_one_trial_fits()
        if self.runs_dir is not None:
            check_writable_dir(self.runs_dir, "--runs-dir")
        tb = self.tb_dir
        if tb is not None:
            check_writable_dir(tb, "--runs-dir")
        if r.keep_weights:
            if self.weights_dir is None:
                raise UserError(f"{named('resources', 'keep_weights')} needs a runs directory (--runs-dir)")
            check_writable_dir(self.weights_dir, "--runs-dir")
        check_storage_url(self.storage)
        db = sqlite_path(self.storage)
        if db is not None:  # the database file and its directory, as every output path
            check_output_file(db, f"--storage {self.storage!r}")
        if r.address is not None and not r.local:
            check_address(r.address)
        return corpus

    def fingerprint(self) -> dict[str, Any]:
        """What must match for a study to be continued."""
        return {
            "space_fingerprint": self.space.fingerprint,
            "space_file": recorded(self.space.source),  # a legacy study's confirm reads it from anywhere
            "objective": self.spec.search.objective,
            "budget": self.spec.budget.to_dict(),
            "recipe": self.spec.recipe.to_dict(),
            "data": data_record(self.data),  # by content: name, vocabulary, fingerprint, tokenizer
            "seed": self.spec.seed,
            "evaluator": self.spec.search.evaluator,
        }


def tensorboard_dir(runs_dir: str, study: str, storage: str) -> str:
    """``RUNS_DIR/STUDY/tb``, the study's TensorBoard runs; a study kept in another storage than
    the default gets a subdirectory of its own (``tb/storage-HASH``), so that two studies of one
    name in two databases never write into the same runs."""
    return _study_dir(runs_dir, study, storage, "tb")


def check_no_stale_runs(tb_dir: str | None) -> None:
    """Refuse a new study whose TensorBoard directory already holds trial runs: a deleted study of the
    same name left them (its database removed, its runs directory not), and the new trials' events would
    be written into its trials' directories, mixed with the old ones."""
    if tb_dir is None:
        return
    try:
        stale = sorted(p.name for p in Path(tb_dir).iterdir() if p.name.startswith("trial_"))
    except OSError:  # not there yet (the usual case), or unreadable: the writer says so when it opens
        return
    if stale:
        more = f" and {len(stale) - 1} more" if len(stale) > 1 else ""
        raise UserError(
            f"{tb_dir} holds TensorBoard runs ({stale[0]}{more}) of no trial of this new study (left by a "
            "deleted study of the same name?); move them away, or give another --runs-dir or --study"
        )


def weights_dir(runs_dir: str, study: str, storage: str) -> str:
    """``RUNS_DIR/STUDY/weights``, the study's kept weights (``trial_N.safetensors``); another storage
    than the default gets a subdirectory of its own (``weights/storage-HASH``), as :func:`tensorboard_dir`."""
    return _study_dir(runs_dir, study, storage, "weights")


def _study_dir(runs_dir: str, study: str, storage: str, kind: str) -> str:
    out = Path(runs_dir) / study / kind
    if storage != default_storage(runs_dir, study):
        out = out / f"storage-{hashlib.sha256(storage.encode()).hexdigest()[:8]}"
    return str(out)


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
