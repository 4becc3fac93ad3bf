"""``train``: train one architecture file for a budget and print its metrics.

The file's ``recipe``, ``budget`` and ``data`` sections are used when present
(``data`` as exported records the corpus and tokenizer with their fingerprints,
see :func:`load_data`); command-line flags override them; the model's vocabulary
is the corpus's; with no budget anywhere it trains
:data:`DEFAULT_BUDGET`.  ``--json`` makes the last line of stdout one JSON
object of metrics; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

from evaluators import Budget, Diverged, Spent, TrainRecipe, train_lm
from evaluators.lm import stderr_log
from evaluators.result import sample_lines
from nas.archfile import load_arch_file
from nas.commands.common import (
    add_budget_args,
    add_device_arg,
    budget_from_args,
    data_or_default,
    jsonable,
    non_empty,
    non_negative_int,
    positive_int,
)
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
from nas.preflight import check_training
from nas.shipped import arch_path, shipped_archs
from nas.validate import MAX_SEED, MAX_THREADS, check_number, check_output_file, check_writable_dir

DEFAULT_BUDGET = {"steps": 200}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train",
        help="train one architecture file and report its validation loss",
        description="Train the architecture in an architecture file (a shipped example such as vanilla, "
        "an examples/archs/*.yaml, or an exported winner) on the corpus and print its validation loss, "
        "perplexity, bits per byte, parameters, FLOPs and throughput.  Flags override the file's recipe, "
        f"budget and data; without a budget anywhere it trains {DEFAULT_BUDGET['steps']} steps.",
    )
    p.add_argument("--arch", required=True, type=non_empty, metavar="FILE",
                   help=f"architecture file (YAML), or a shipped one's name: {', '.join(shipped_archs())}")
    add_budget_args(p)
    p.add_argument(
        "--data", metavar="PATH", default=None,
        help=f"corpus: '{DEFAULT_CORPUS}' (default), a text file, a directory of text files, or a "
        "token-file directory (train.bin, val.bin, meta.json); for a task: seq2seq architecture "
        f"'{DEFAULT_PARALLEL}' (default) or a parallel directory (train.src, train.tgt, val.src, "
        "val.tgt); the vocabulary comes from it",
    )  # fmt: skip
    p.add_argument(
        "--tokenizer", metavar="FILE", default=None,
        help="a Hugging Face tokenizer.json: the text corpus is tokenized once (cached) and trained on",
    )  # fmt: skip
    add_device_arg(p)
    p.add_argument("--seed", type=non_negative_int, default=None, help="overrides recipe.seed")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--logdir", metavar="DIR", default=None, help="write TensorBoard scalars and hparams here")
    p.add_argument("--save", metavar="PATH", default=None, help="save the trained weights (nas.load_model)")
    p.add_argument("--force", action="store_true", help="overwrite --save if it exists")
    p.add_argument("--compile", action="store_true",
                   help="train through torch.compile (compile time reported apart; falls back to eager)")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON line on stdout")
    p.set_defaults(func=run)


def resolve(args: argparse.Namespace) -> tuple[Any, TrainRecipe, Budget, str | None]:
    """The architecture, recipe, budget and corpus spec from the file and the flags."""
    source = str(args.arch)
    doc = load_arch_file(arch_path(source))  # messages name `source`, what was typed
    try:
        recipe = TrainRecipe.from_dict(doc.get("recipe"))
        file_budget = Budget.from_dict(doc["budget"]) if "budget" in doc else None
    except ConfigError as err:
        raise err.in_file(source) from None
    flag_budget = budget_from_args(args)
    if flag_budget is not None:
        budget = Budget.from_dict(flag_budget)
    else:
        budget = file_budget or Budget.from_dict(DEFAULT_BUDGET)
    if args.seed is not None:
        seed = check_number(args.seed, "--seed", integer=True, low=0, high=MAX_SEED)
        recipe = dataclasses.replace(recipe, seed=seed)
    data = doc.get("data")
    record = isinstance(data, dict) and isinstance(data.get("corpus"), str)
    if not (data is None or isinstance(data, str) or record):
        raise ConfigError(
            f"must be '{DEFAULT_CORPUS}', a path, or a record {{corpus: ..., vocab_size: ..., "
            f"fingerprint: ...}} as export writes it; got {data!r}", "data", source,
        )  # fmt: skip
    return doc["arch"], recipe, budget, data


def load_data(args: argparse.Namespace, data: str | dict[str, Any] | None, arch: Any = None) -> AnyCorpus:
    """The corpus to train on: the flags', else the one the file records.

    An exported file records its corpus and tokenizer by path and fingerprint
    (``Corpus.record``).  Without flags both must still be where they were and hold
    the same tokens, else one line says which flag to pass.  ``--data`` replaces the
    recorded corpus (keeping a recorded tokenizer for text), ``--tokenizer`` the
    recorded tokenizer; data that then differs from the record is trained on with
    a note.
    """
    rec = data if isinstance(data, dict) else None
    task = getattr(arch, "task", "lm")
    spec = args.data if args.data is not None else (rec["corpus"] if rec else data_or_default(data, task))
    tokenizer = args.tokenizer or (rec.get("tokenizer") if rec else None)
    if args.data is not None and args.tokenizer is None and is_token_dir(Path(args.data).expanduser()):
        tokenizer = None  # token files need no tokenizer, whatever the file used
    explicit = args.data is not None or args.tokenizer is not None
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
    corpus = load_corpus(resolve_data(spec, tokenizer))
    if rec and rec.get("fingerprint") and rec["fingerprint"] != corpus.fingerprint:
        differs = (
            f"{args.arch} was trained on {describe_record(rec)}; {corpus.name} holds {corpus.fingerprint}"
        )
        if not explicit:
            raise UserError(f"{differs}; pass --data (and --tokenizer) to train on this data anyway")
        stderr_log(f"note: {differs}")
    return corpus


def recorded_threads(args: argparse.Namespace) -> int | None:
    """The CPU thread count a measured run used, when the file records one and no flag overrides it.

    CPU sums depend on how work is split across threads, so retraining an exported
    trial on its own thread count is what reproduces its loss to the last digits.
    """
    if args.threads is not None:
        return check_number(args.threads, "--threads", integer=True, low=1, high=MAX_THREADS)
    metrics = load_arch_file(arch_path(args.arch)).get("metrics") or {}
    threads = metrics.get("threads")
    if metrics.get("device") == "cpu" and isinstance(threads, int) and threads > 0 and args.device != "cuda":
        try:
            return check_number(threads, "metrics.threads", integer=True, high=MAX_THREADS)
        except ConfigError as err:
            raise err.in_file(args.arch) from None
    return None


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse an output path that cannot be written now, before any data is read or any step taken."""
    if args.save is not None:
        check_output_file(args.save, "--save", force=args.force, example="model.pt")
    if args.logdir is not None:
        check_writable_dir(args.logdir, "--logdir")
        if args.save is not None and Path(args.save).resolve() == Path(args.logdir).resolve():
            raise UserError(f"--save {args.save!r} is the --logdir directory; give the weights a file name "
                            f"such as {Path(args.logdir) / 'model.pt'}")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    arch, recipe, budget, data = resolve(args)
    threads = recorded_threads(args)
    check_outputs(args)
    corpus = load_data(args, data, arch)  # before any progress output: a missing corpus is one line
    file_vocab = arch.vocab_size
    try:  # all that training would refuse, and a model this machine cannot hold, before it is built
        arch = arch.with_vocab(corpus.vocab_size)
        check_training(arch, recipe, budget, corpus, args.device)
    except ConfigError as err:
        raise err.in_file(args.arch) from None
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
            device=args.device,
            logdir=args.logdir,
            threads=threads,
            save_to=args.save,
            log=stderr_log,
            compile=args.compile,
        ).to_dict()
    except Diverged as err:
        spent = Spent.of(err)
        cost = "" if spent is None else f" (after {spent.steps} steps: {spent.train_flops:.4g} FLOPs)"
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



def format_metrics(m: dict[str, Any]) -> str:
    rows = [
        ("architecture", m["arch_id"]),
        ("val_loss", f"{m['val_loss']:.4f} nats/token"),
        ("val_ppl", f"{m['val_ppl']:.3f}"),
        ("val_bpb", _bpb(m.get("val_bpb"))),
        ("vocabulary", f"{m.get('vocab_size', VOCAB_SIZE):,} tokens"),
        ("params", f"{m['params']:,} ({m['non_embedding_params']:,} non-embedding)"),
        ("FLOPs/token", f"{m['flops_per_token']:.4g} forward, {m['train_flops_per_token']:.4g} training"),
        ("trained", f"{m['steps']} steps, {m['tokens']:,} tokens, {m['train_flops']:.4g} FLOPs"),
        ("throughput", f"{m['tokens_per_s']:,.0f} tokens/s on {m['device']} ({m.get('threads')} threads)"),
        ("time", f"{m['seconds']:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _bpb(value: Any) -> str:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return f"{value:.4f} bits/byte"
    return "unknown (the corpus's bytes per token is not known)"
