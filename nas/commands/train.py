"""``train``: train one architecture file for a budget and print its metrics.

The file's ``recipe``, ``budget`` and ``data`` sections are the spec's
(:mod:`nas.spec`; ``data`` as exported records the corpus and tokenizer with
their fingerprints, see :func:`load_data`); the same ``--recipe.*``,
``--budget.*``, ``--data.*`` and ``--resources.device/compile`` flags as
``search`` override them field by field; the model's vocabulary is the
corpus's; with no budget anywhere it trains :data:`nas.spec.DEFAULT_BUDGET`.
``--json`` makes the last line of stdout one JSON object of metrics; progress
goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evaluators.base import Diverged, Spent
from evaluators.lm import stderr_log, train_lm
from evaluators.result import sample_lines
from nas.commands.common import data_or_default, in_range, jsonable, non_empty, positive_int
from nas.data import (
    DEFAULT_CORPUS,
    DEFAULT_PARALLEL,
    VOCAB_SIZE,
    AnyCorpus,
    describe_record,
    load_corpus,
    resolve_data,
)
from nas.data.tokens import is_token_dir
from nas.errors import ConfigError, UserError
from nas.files.archfile import load_arch_file
from nas.files.outputs import Planned, plan_output
from nas.files.paths import in_file
from nas.models.parametrization import with_base
from nas.models.sizes import MAX_SIZE, missed, reached, resize
from nas.plural import plural
from nas.preflight import check_training
from nas.shipped import arch_path, shipped_archs
from nas.spec import DEFAULT_BUDGET, Spec
from nas.spec.flags import SpecFlags, add_spec_flags, spec_flags
from nas.spec.sections import DataSpec
from nas.spec.spec import refuse_unused
from nas.spec.training import Budget, TrainRecipe
from nas.validate import MAX_THREADS, check_number, check_writable_dir


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train",
        help="train one architecture file and report its validation loss",
        description="Train the architecture in an architecture file (a shipped name such as vanilla or "
        "primer_ez, an examples/archs/*.yaml or an exported winner) on the corpus and print its validation "
        "loss, perplexity, bits per byte, parameters, FLOPs and throughput.  Flags override the file's "
        f"recipe, budget and data field by field; without a budget anywhere it trains {DEFAULT_BUDGET}.",
    )
    p.add_argument(
        "--arch",
        required=True,
        type=non_empty,
        metavar="FILE",
        help=f"architecture file (YAML), or a shipped one's name: {', '.join(shipped_archs())}",
    )
    p.add_argument(
        "--size",
        type=in_range(0, MAX_SIZE),
        default=None,
        metavar="M",
        help="train the architecture's member of about M times its non-embedding parameters, its per-layer "
        "pattern kept (docs/training.md, sizes of one architecture); below 1 shrinks it",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="torch CPU threads (default: the count the file's metrics record for a CPU run, as an exported "
        "trial has, so that it retrains to the same loss; else torch's)",
    )
    p.add_argument("--logdir", metavar="DIR", default=None, help="write TensorBoard scalars and hparams here")
    p.add_argument(
        "--save",
        metavar="PATH",
        default=None,
        help="save the trained weights (nas.load_model reads them): PATH.safetensors writes safetensors "
        "(the architecture, recipe and metrics in its metadata), any other name a torch file",
    )
    p.add_argument("--force", action="store_true", help="replace --save if a file is there (even our own)")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON line on stdout")
    add_spec_flags(p, ("recipe", "budget", "data", "resources"), only={"resources": ("device", "compile")})
    p.set_defaults(func=run)


def resolve(args: argparse.Namespace, flags: SpecFlags) -> tuple[Any, Spec, Any]:
    """The architecture, the run's spec (the file's sections, then ``flags``, the command line's spec
    flags) and the file's ``data``."""
    source = str(args.arch)
    doc = load_arch_file(arch_path(source))  # messages name `source`, what was typed
    data = doc.get("data")
    record = isinstance(data, dict) and isinstance(data.get("corpus"), str)
    if not (data is None or isinstance(data, str) or record):
        raise ConfigError(
            f"must be '{DEFAULT_CORPUS}', a path, or a record {{corpus: ..., vocab_size: ..., "
            f"fingerprint: ...}} as export writes it; got {data!r}",
            "data",
            source,
        )
    try:
        recipe = TrainRecipe.from_dict(doc.get("recipe"))
        budget = Budget.from_dict(doc["budget"]) if "budget" in doc else DEFAULT_BUDGET
        # a spec's rules for its data section: paths non-empty strings, no unknown key (`tokenizr:` was
        # dropped and the text trained as bytes; `corpus: ""` trained on the file's own directory)
        DataSpec.from_dict(data)
        spec = Spec(space={}, recipe=recipe, budget=budget, source=source)  # rules between its sections
    except ConfigError as err:
        raise err.in_file(source) from None
    spec = flags.apply(spec)
    refuse_unused(spec, flags.values, source)  # a cooldown under a cosine schedule, a flag's or the file's
    return doc["arch"], spec, data


def data_paths(args: argparse.Namespace, given: Mapping[str, Any], data: str | dict[str, Any] | None,
               arch: Any) -> tuple[str | None, str | None]:  # fmt: skip
    """The corpus and tokenizer this run reads: a flag's (``given``: the data flags), relative to the
    working directory, else the file's (relative to the file, :mod:`nas.files.paths`); a corpus's name as
    it is."""
    data_flag, tokenizer_flag = given.get("corpus"), given.get("tokenizer")
    rec = data if isinstance(data, dict) else None
    file = arch_path(args.arch)
    spec = data_flag
    if data_flag is None:
        task = arch.task
        spec = (
            in_file(rec["corpus"], file, "data.corpus")
            if rec
            else in_file(data_or_default(data, task), file, "data")
        )
    tokenizer = tokenizer_flag
    if data_flag is not None and tokenizer_flag is None and is_token_dir(Path(data_flag).expanduser()):
        tokenizer = None  # token files need no tokenizer, whatever the file used (its path is not read)
    elif tokenizer_flag is None and rec:
        tokenizer = in_file(rec.get("tokenizer"), file, "data.tokenizer")
    return spec, tokenizer


def load_data(
    args: argparse.Namespace,
    given: Mapping[str, Any],
    data: str | dict[str, Any] | None,
    paths: tuple[str | None, str | None],
) -> AnyCorpus:
    """The corpus to train on: ``paths`` (:func:`data_paths`): the flags' (``given``), else the one the file
    records.

    An exported file records its corpus and tokenizer by path and fingerprint
    (``Corpus.record``).  Without flags both must still be where they were and hold
    the same tokens, else one line says which flag to pass.  ``--data`` replaces the
    recorded corpus (keeping a recorded tokenizer for text), ``--tokenizer`` the
    recorded tokenizer; data that then differs from the record is trained on with
    a note.
    """
    data_flag, tokenizer_flag = given.get("corpus"), given.get("tokenizer")
    rec = data if isinstance(data, dict) else None
    spec, tokenizer = paths
    explicit = data_flag is not None or tokenizer_flag is not None
    if rec and not explicit:
        if spec not in (DEFAULT_CORPUS, DEFAULT_PARALLEL) and not Path(spec).expanduser().exists():
            raise UserError(
                f"{args.arch}: its corpus {spec} is not there (trained on {describe_record(rec)}); "
                "pass --data PATH with a copy of it"
            )
        if tokenizer and not Path(tokenizer).expanduser().is_file():
            raise UserError(
                f"{args.arch}: its tokenizer {tokenizer} is not there (fingerprint "
                f"{rec.get('tokenizer_fingerprint')}); pass --tokenizer PATH with a copy of it"
            )
    # how a records corpus is read: the flags', else (the file's corpus) the file's
    reading = {k: v for k, v in (rec or {}).items() if k in ("text_field", "on_bad_record") and not data_flag}
    reading.update({k: v for k, v in given.items() if k in ("text_field", "on_bad_record")})
    corpus = load_corpus(resolve_data(spec, tokenizer, **reading))
    if rec and rec.get("fingerprint") and rec["fingerprint"] != corpus.fingerprint:
        differs = (
            f"{args.arch} was trained on {describe_record(rec)}; {corpus.name} holds {corpus.fingerprint}"
        )
        if not explicit:
            raise UserError(f"{differs}; pass --data (and --tokenizer) to train on this data anyway")
        stderr_log(f"note: {differs}")
    return corpus


def recorded_threads(args: argparse.Namespace, device: str = "auto") -> int | None:
    """The CPU thread count a measured run used, when the file records one and no flag overrides it.

    CPU sums depend on how work is split across threads, so retraining an exported
    trial on its own thread count is what reproduces its loss to the last digits.
    """
    if args.threads is not None:
        return check_number(args.threads, "--threads", integer=True, low=1, high=MAX_THREADS)
    metrics = load_arch_file(arch_path(args.arch)).get("metrics") or {}
    threads = metrics.get("threads")
    if metrics.get("device") == "cpu" and threads is not None and device != "cuda":
        try:  # a value that cannot be a thread count is refused, never ignored (3.5 and -5 used to be)
            return check_number(threads, "metrics.threads", integer=True, low=1, high=MAX_THREADS)
        except ConfigError as err:
            raise err.in_file(args.arch) from None
    return None


def check_outputs(
    args: argparse.Namespace, given: Mapping[str, Any], data: tuple[str | None, str | None]
) -> Planned | None:
    """Refuse an output path that cannot be written now, before any data is read or any step taken;
    the ``--save`` path as planned (nas.files.outputs: checked again when the weights are written).  ``data``:
    the corpus and tokenizer the run reads (:func:`data_paths`), which ``--save`` never replaces;
    ``given``: the data flags, which named them."""
    save = None
    if args.save is not None:
        # a checkpoint is a user's work: even one this tool saved is replaced only with --force; an input
        # never, wherever it was named (`data:` in the file too: --save corpus.txt --force replaced it)
        reads = [("--arch", arch_path(args.arch)), ("--data" if "corpus" in given else "corpus", data[0]),
                 ("--tokenizer" if "tokenizer" in given else "tokenizer", data[1])]  # fmt: skip
        save = plan_output(
            args.save, "--save", force=args.force, example="model.safetensors", replace_own=False, reads=reads
        )
    if args.logdir is not None:
        check_writable_dir(args.logdir, "--logdir")
        if args.save is not None and Path(args.save).resolve() == Path(args.logdir).resolve():
            raise UserError(
                f"--save {args.save!r} is the --logdir directory; give the weights a file name "
                f"such as {Path(args.logdir) / 'model.pt'}"
            )
    return save


def run(args: argparse.Namespace) -> int:
    flags = spec_flags(args)
    arch, spec, data = resolve(args, flags)
    # completep's base shape, when unstated, is the architecture at size 1: taken before --size resizes it
    recipe = with_base(spec.recipe, arch)
    if args.size is not None:
        arch = sized(arch, args.size)
    budget, device = spec.budget, spec.resources.device
    threads = recorded_threads(args, device)
    given = flags.section("data")
    paths = data_paths(args, given, data, arch)
    save = check_outputs(args, given, paths)
    corpus = load_data(args, given, data, paths)  # before any progress output: a missing corpus is one line
    file_vocab = arch.vocab_size
    try:  # all that training would refuse, and a model this machine cannot hold, before it is built
        arch = arch.with_vocab(corpus.vocab_size)
        check_training(arch, recipe, budget, corpus, device)
    except ConfigError as err:  # a flag's value is the flag's fault, not the file's
        raise flags.blame(err, spec) or err.in_file(args.arch) from None
    if threads is not None and args.threads is None:
        stderr_log(f"using {threads} CPU thread(s), as the recorded run did (--threads overrides)")
    stderr_log(corpus.describe())
    if file_vocab != corpus.vocab_size:
        stderr_log(f"vocabulary {corpus.vocab_size:,} from the corpus (the file says {file_vocab:,})")
    try:
        metrics = train_lm(
            arch,
            recipe,
            budget,
            corpus,
            device=device,
            logdir=args.logdir,
            threads=threads,
            save_to=save,
            log=stderr_log,
            compile=spec.resources.compile,
        ).to_dict()
    except Diverged as err:
        spent = Spent.of(err)
        cost = (
            "" if spent is None else f" (after {plural(spent.steps, 'step')}: {spent.train_flops:.4g} FLOPs)"
        )
        print(f"error: {args.arch}: training diverged: {err}{cost}", file=sys.stderr)
        return 1
    if args.save:
        stderr_log(f"saved weights to {args.save}")
    if args.json:
        print(json.dumps(jsonable(metrics), sort_keys=False))
    else:
        print(format_metrics(metrics))
        for line in sample_lines(metrics.get("samples")):  # seq2seq: what the model does with a few sources
            print(line)
    return 0


def sized(arch: Any, size: float) -> Any:
    """``arch`` resized to ``--size`` (nas.models.sizes), saying what it became."""
    try:
        out = resize(arch, size)
    except ConfigError as err:
        raise UserError(f"--size {size:g}: {err.message}") from None
    stderr_log(f"size {size:g}: {_shape(out)} (from {_shape(arch)})")
    note = missed(size, reached(arch, out))
    if note is not None:
        stderr_log(f"note: {note}")
    return out


def _shape(arch: Any) -> str:
    """``d_model 64, 4 heads, 1 layer``"""
    return f"d_model {arch.d_model}, {plural(arch.n_heads, 'head')}, {plural(len(arch.layers), 'layer')}"


def _where(m: dict[str, Any]) -> str:
    """``cpu (1 thread)``: the device, and the CPU threads when the run recorded them."""
    threads = m.get("threads")
    return m["device"] if threads is None else f"{m['device']} ({plural(threads, 'thread')})"


def format_metrics(m: dict[str, Any]) -> str:
    rows = [
        ("architecture", m["arch_id"]),
        ("val_loss", f"{m['val_loss']:.4f} nats/token"),
        ("val_ppl", f"{m['val_ppl']:.3f}"),
        ("val_bpb", _bpb(m.get("val_bpb"))),
        ("vocabulary", f"{m.get('vocab_size', VOCAB_SIZE):,} tokens"),
        ("params", f"{m['params']:,} ({m['non_embedding_params']:,} non-embedding)"),
        ("FLOPs/token", f"{m['flops_per_token']:.4g} forward, {m['train_flops_per_token']:.4g} training"),
        *(
            [("state", f"{m['state_bytes']:,} bytes per sequence while generating (float32)")]
            if m.get("state_bytes")
            else []
        ),
        ("trained", f"{plural(m['steps'], 'step')}, {m['tokens']:,} tokens, {m['train_flops']:.4g} FLOPs"),
        ("throughput", f"{m['tokens_per_s']:,.0f} tokens/s on {_where(m)}"),
        ("time", f"{m['seconds']:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _bpb(value: Any) -> str:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return f"{value:.4f} bits/byte"
    return "unknown (the corpus's bytes per token is not known)"
