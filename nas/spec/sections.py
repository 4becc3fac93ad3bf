"""The experiment spec's own sections: ``data``, ``search`` and ``resources``.

Each is a frozen dataclass whose fields are the keys of its section in a
spec (space) file and, through :mod:`nas.spec.flags`, its ``--section.field``
flags.  A field's metadata carries its help text, the short flag users know
(``--trials`` for ``search.trials``), and its check; the checks run in
``__post_init__``, so a section built from a file, from flags or from Python
is held to the same rules.  ``None`` means "decided at run time" (the number
of workers: the machine's CPUs) and is said so in the help.

Torch-free: the read-only commands import this.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nas.errors import ConfigError
from nas.spec.fields import evaluator_name, field, fractions, integer, number, one_of, text
from nas.spec.training import TrainRecipe
from nas.validate import MAX_SECONDS, MAX_SEED, MAX_THREADS, yaml_number

OBJECTIVES = {
    "loss": ("minimize",), "loss+flops": ("minimize", "minimize"), "loss+flops+state": ("minimize",) * 3,
}  # fmt: skip
#: the trial metric behind each objective, in order (``study.metric_names`` too)
OBJECTIVE_METRICS = {
    "loss": ("val_loss",), "loss+flops": ("val_loss", "flops_per_token"),
    "loss+flops+state": ("val_loss", "flops_per_token", "state_bytes"),
}  # fmt: skip
SAMPLERS = ("auto", "nsga2", "evolution", "tpe", "random")
DEVICES = ("auto", "cpu", "cuda")
#: trials a search wants when neither ``search.trials`` nor ``search.max_flops`` says
DEFAULT_TRIALS = 20


def named(section: str, name: str) -> str:
    """``resources.workers (--workers)``: a field as messages name it, with its short flag when it has one."""
    cls = TrainRecipe if section == "recipe" else SECTIONS.get(section)
    fields_ = {f.name: f for f in dataclasses.fields(cls)} if cls is not None else {}
    alias = fields_[name].metadata.get("alias") if name in fields_ else ALIASES.get(f"{section}.{name}")
    return f"{section}.{name} ({alias})" if alias else f"{section}.{name}"


#: short flags of the budget's kinds (a budget is one kind and a value, not a dataclass of fields)
ALIASES = {"budget.steps": "--steps", "budget.tokens": "--tokens", "budget.flops": "--budget-flops",
           "budget.seconds": "--seconds"}  # fmt: skip


class Section:
    """What the three sections share: checks on creation, and plain data in and out."""

    #: the section's key in a spec file and the prefix of its flags
    NAME = ""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, list):  # YAML lists: frozen as tuples
                value = tuple(value)
                object.__setattr__(self, f.name, value)
            check = f.metadata.get("check")
            if check is not None and value is not None:
                check(value, f"{self.NAME}.{f.name}")
            elif value is None and f.default is not None:
                raise ConfigError(f"must be set (default {f.default!r}); leave it out for the default",
                                  f"{self.NAME}.{f.name}")  # fmt: skip
            if isinstance(f.default, bool) and not isinstance(value, bool):
                raise ConfigError(f"must be true or false, got {value!r}", f"{self.NAME}.{f.name}")
        self.check()

    def check(self) -> None:
        """Rules between fields (one field's check cannot see the others)."""

    @classmethod
    def from_dict(cls, raw: Any) -> Any:
        """The section from its mapping in a file; an unknown key is refused, naming the valid ones."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ConfigError(f"must be a mapping, got {raw!r}", cls.NAME)
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(str(k) for k in set(raw) - set(names))
        if unknown:
            raise ConfigError(f"unknown key; valid keys: {', '.join(names)}", f"{cls.NAME}.{unknown[0]}")
        return cls(**{k: yaml_number(v, keep_non_finite=True) for k, v in raw.items()})

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}  # type: ignore[call-overload]


#: the keys of a corpus's record as a study and an exported file store it (nas.data.corpus.corpus_record)
#: (a parallel corpus's adds its task: nas.data.parallel.ParallelCorpus.record)
DATA_RECORD_KEYS = (
    "corpus",
    "tokenizer",
    "text_field",
    "on_bad_record",
    "name",
    "vocab_size",
    "fingerprint",
    "tokenizer_fingerprint",
    "task",
)


#: the keys of a record that say how its corpus is read (the others say what it holds)
_READ_KEYS = ("tokenizer", "text_field", "on_bad_record")


@dataclasses.dataclass(frozen=True)
class DataSpec(Section):
    """What the candidates train on; the vocabulary comes from it."""

    NAME = "data"

    corpus: str | None = field(
        None, "text file or directory, a token-file directory (train.bin, val.bin, meta.json), or a parallel "
        "directory for seq2seq (default: Shakespeare; shakespeare-reversed for seq2seq); a relative path in "
        "a spec file is relative to the file, one given here to the working directory",
        alias="--data", check=text, metavar="PATH")  # fmt: skip
    tokenizer: str | None = field(
        None, "a Hugging Face tokenizer.json: tokenizes the text corpus once (cached); a relative path "
        "as data.corpus's",
        alias="--tokenizer", check=text, metavar="FILE")  # fmt: skip
    text_field: str = field(
        "text", "the field of each JSON Lines, Parquet or datasets record that holds its text", check=text,
        metavar="NAME")  # fmt: skip
    on_bad_record: str = field(
        "refuse", "a record that gives no text (no such field, not a string, not UTF-8, empty, or in a "
        "truncated shard): refuse stops the run naming the first; skip leaves such records out, counted",
        check=one_of(("refuse", "skip")))  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Any) -> DataSpec:
        if isinstance(raw, str):  # `data: PATH`, as architecture files write it
            return cls(corpus=raw)
        if isinstance(raw, Mapping) and "corpus" in raw and set(raw) - {"corpus", *_READ_KEYS}:
            # an exported record (corpus, vocab_size, fingerprint, ...): the corpus and how it is read train;
            # a key a record never has is a typo (tokenizr:), refused rather than dropped
            unknown = sorted(str(k) for k in set(raw) - set(DATA_RECORD_KEYS))
            if unknown:
                also = ", ".join(DATA_RECORD_KEYS[4:])
                valid = f"corpus, {', '.join(_READ_KEYS)} (an exported record also has {also})"
                raise ConfigError(f"unknown key; valid keys: {valid}", f"data.{unknown[0]}")
            return cls(corpus=raw["corpus"], **{k: raw[k] for k in _READ_KEYS if k in raw})
        return super().from_dict(raw)


@dataclasses.dataclass(frozen=True)
class SearchSection(Section):
    """How the search proceeds: objective, sampler, how many trials, hurdles."""

    NAME = "search"

    objective: str = field(
        "loss+flops",
        "loss+flops: Pareto front of validation loss and FLOPs/token; "
        "loss+flops+state: and the bytes a sequence keeps while generating (KV caches, "
        "recurrent states); loss: validation loss at the fixed budget",
        alias="--objective",
        check=one_of(tuple(OBJECTIVES)),
    )
    sampler: str = field(
        "auto", "auto: the sampler measured to reach a good loss in the fewest trials (docs/BENCHMARKS.md); "
        "a continued study keeps the one it ran with", alias="--sampler", check=one_of(SAMPLERS))  # fmt: skip
    population: int | None = field(
        None,
        "population of nsga2/evolution (default: a third of the trials, 4 to 50; 20 under max_flops "
        "alone); tpe starts with min(5, population) random trials",
        alias="--population",
        check=integer(2),
    )
    seed: int | None = field(None, "seed of the sampler (default: recipe.seed)", check=integer(0, MAX_SEED))
    trials: int | None = field(
        None, f"finished trials wanted in the study (default {DEFAULT_TRIALS}; with max_flops: no limit)",
        alias="--trials", check=integer(1))  # fmt: skip
    max_flops: float | None = field(
        None,
        "training FLOPs the whole search may spend (e.g. 2.4e12); with hurdles, every candidate stopped "
        "early buys more candidates",
        alias="--max-flops",
        check=number(),
        metavar="FLOPS",
    )
    hurdles: tuple[float, ...] = field(
        (), "budget fractions where weak candidates stop, e.g. 0.25,0.5", alias="--hurdles", check=fractions
    )
    hurdle_percentile: float = field(
        50.0, "a candidate continues if its loss is at or below this percentile of earlier architectures' "
        "losses at the hurdle", alias="--hurdle-percentile", check=number(high=100.0))  # fmt: skip
    hurdle_min_trials: int = field(
        3, "a hurdle stops candidates once this many earlier architectures reached it",
        alias="--hurdle-min-trials", check=integer(1), metavar="N")  # fmt: skip
    evaluator: str = field(
        "lm", "lm: train each candidate; proxy:params / proxy:flops: score without training; "
        "probes[:TASK,TASK][@STEPS]: the synthetic capability probes (docs/probes.md)",
        alias="--evaluator", check=evaluator_name("lm, proxy:params or probes@100"))  # fmt: skip
    prescreen: str | None = field(
        None, "a cheap evaluator run before each candidate trains, e.g. probes:selective_copying@100 or "
        "proxy:params; a candidate whose value is above hurdle_percentile of earlier architectures' values "
        "stops before training (a hurdle at budget fraction 0; docs/probes.md)", alias="--prescreen",
        check=evaluator_name("probes:memorization@100 or proxy:params"), metavar="EVALUATOR")  # fmt: skip

    def check(self) -> None:
        # the evaluator names are checked against the registry by the run (nas.search.driver.context): the
        # registry imports torch
        stops = self.hurdles != () or self.prescreen is not None
        if not stops and (self.hurdle_percentile != 50.0 or self.hurdle_min_trials != 3):
            which = "hurdle_percentile" if self.hurdle_percentile != 50.0 else "hurdle_min_trials"
            raise ConfigError(
                "applies to hurdles and the prescreen, and search has neither; set search.hurdles "
                "(--hurdles 0.25,0.5) or search.prescreen, or leave it out",
                named("search", which),
            )
        if self.max_flops is not None and self.evaluator.partition(":")[0] in ("proxy", "sleep"):
            # scored from the architecture alone: the limit would never be reached
            raise ConfigError(
                f"{self.evaluator} trains nothing, so no FLOPs are spent and the limit would never end "
                f"the search; give {named('search', 'trials')}", named("search", "max_flops"))  # fmt: skip
        if self.population is not None and self.sampler == "random":
            raise ConfigError(f"has no effect with {named('search', 'sampler')} random (it sizes nsga2 and "
                              "evolution, and tpe's random start); drop it or choose another sampler",
                              named("search", "population"))  # fmt: skip
        if self.prescreen is not None:
            if self.prescreen.partition(":")[0] == "lm":
                raise ConfigError(
                    "lm would train each candidate twice; a prescreen is a cheaper evaluator: "
                    "probes[:TASK,TASK][@STEPS] or proxy:NAME",
                    named("search", "prescreen"),
                )
            if self.prescreen == self.evaluator:
                raise ConfigError(
                    f"is the search's evaluator too ({self.evaluator}): each candidate would "
                    "be scored twice the same way; screen with a cheaper evaluator or leave it "
                    "out",
                    named("search", "prescreen"),
                )

    def wanted_trials(self) -> int | None:
        """Finished trials wanted: as given, else the default unless the compute ends the search."""
        if self.trials is not None:
            return self.trials
        return None if self.max_flops is not None else DEFAULT_TRIALS


@dataclasses.dataclass(frozen=True)
class Resources(Section):
    """Where and how the trials run.  These may change between runs of one study."""

    NAME = "resources"

    workers: int | None = field(None, "concurrent trials (default: one per CPU, at most 2; 1 with local)",
                                alias="--workers", check=integer(1))  # fmt: skip
    cpus_per_trial: float = field(1.0, "CPU threads per trial", alias="--cpus-per-trial",
                                  check=number(high=MAX_THREADS))  # fmt: skip
    gpus_per_trial: float = field(0.0, "GPUs per trial (fractions pack several trials on a GPU)",
                                  alias="--gpus-per-trial", check=number(positive=False))  # fmt: skip
    address: str | None = field(None, "join an existing Ray cluster (e.g. 10.0.0.1:6379 or auto)",
                                alias="--address", check=text)  # fmt: skip
    retries: int = field(2, "re-runs of a trial whose worker died", alias="--retries", check=integer(0))
    worker_timeout: float = field(
        300.0, "seconds a Ray worker may take to start or restart before the search goes on with fewer",
        alias="--worker-timeout", check=number(high=MAX_SECONDS), metavar="SECONDS")  # fmt: skip
    trial_timeout: float | None = field(
        None,
        "seconds a trial may run before its worker is killed and it ends FAIL 'timed out' "
        "(default: no limit)",
        alias="--trial-timeout",
        check=number(high=MAX_SECONDS),
        metavar="SECONDS",
    )
    device: str = field(
        "auto", "where to train (auto: CUDA if present)", alias="--device", check=one_of(DEVICES)
    )
    compile: bool = field(False, "train through torch.compile (compile time reported apart; "
                          "a model that fails to compile trains eager)", alias="--compile")  # fmt: skip
    local: bool = field(False, "no Ray: run the trials one at a time in this process (for debugging)",
                        alias="--local")  # fmt: skip
    dashboard: bool = field(False, "start the Ray dashboard", alias="--ray-dashboard")
    tensorboard: bool = field(True, "write per-trial TensorBoard runs")
    keep_weights: int = field(
        0, "keep the trained weights of the K best trials as they finish, as safetensors checkpoints in "
        "RUNS_DIR/STUDY/weights (several objectives: trials on the Pareto front, lowest loss first); files "
        "that drop out of the best K are deleted; `export --best --hf DIR` exports one (docs/export.md)",
        alias="--keep-weights", check=integer(0), metavar="K")  # fmt: skip

    def check(self) -> None:
        if self.gpus_per_trial > 0 and self.device == "cpu":
            raise ConfigError(f"> 0 with {named('resources', 'device')} cpu: choose one",
                              named("resources", "gpus_per_trial"))  # fmt: skip
        if self.local:  # one rule: a field given that has no effect in the chosen mode is refused
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            for name in (
                "address",
                "dashboard",
                "trial_timeout",
                "retries",
                "worker_timeout",
                "gpus_per_trial",
            ):
                if getattr(self, name) != defaults[name]:
                    raise ConfigError(
                        f"{named('resources', 'local')} runs trials one at a time in this process, "
                        f"without Ray; drop {named('resources', name)}{_undo(name, defaults[name])}",
                        named("resources", name),
                    )
            if (self.workers or 1) > 1:
                raise ConfigError(
                    f"{named('resources', 'local')} runs trials one at a time in this process, "
                    f"without Ray; drop {named('resources', 'workers')}{_undo('workers', None)}",
                    named("resources", "workers"),
                )
            if not float(self.cpus_per_trial).is_integer():  # threads are whole; only Ray packs fractions
                raise ConfigError(
                    f"{self.cpus_per_trial:g} with {named('resources', 'local')}: a trial there runs on "
                    "whole threads; give a whole number (fractions pack several trials per CPU on Ray)",
                    named("resources", "cpus_per_trial"),
                )

    def worker_count(self, cpus: int | None) -> int:
        """``workers``, or the default for this machine (``cpus`` CPUs)."""
        if self.workers is not None:
            return self.workers
        return 1 if self.local else max(1, min(2, cpus or 1))


def _undo(name: str, default: Any) -> str:
    """How a flag undoes a file's ``resources.NAME``: ``, or undo a file's value with --workers null``."""
    field_ = {f.name: f for f in dataclasses.fields(Resources)}[name]
    flag = field_.metadata.get("alias") or f"--resources.{name}"
    if default is None or isinstance(default, bool):
        value = "null" if default is None else str(default).lower()
    else:
        value = f"{default:g}"
    # local may itself be the file's or the study's stored spec's value, with the flag the user's: then
    # the way out is leaving local (a continued study's stored `local: true` beside a typed --workers 2)
    return f", or undo a file's value with {flag} {value}, or run on Ray with --local false"


SECTIONS: dict[str, type[Section]] = {"data": DataSpec, "search": SearchSection, "resources": Resources}
