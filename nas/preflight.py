"""The checks every command passes before it creates a study or a file, or starts any work.

``train`` and ``search`` refuse here, with one line, what would otherwise fail
later: after a model was trained (an output path that cannot be written), in
the middle of allocating it (a model no device can hold), or in every trial of
a search (a corpus shorter than one window, a ``seq_len`` over ``max_len``, a
budget below one step).  The rules themselves are the trainer's
(``evaluators.budget``: ``check_arch_fits``, ``check_windows``, ``plan_steps``,
``plan_training``) and ``nas.models.cost.check_fits``; this module only applies
them to a whole search space, and reads the machine's memory.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from evaluators.budget import check_arch_fits, check_windows, plan_rungs, plan_steps, plan_training
from nas.errors import ConfigError, UserError
from nas.models import ArchConfig
from nas.models.cost import check_fits, compute
from nas.models.parametrization import shape_of
from nas.search.space.candidate import over_caps
from nas.search.space.combinations import cheapest_lm_archs, one_layer_archs
from nas.search.space.load import SearchSpace
from nas.spec.sections import named
from nas.spec.training import Budget, TrainRecipe
from nas.validate import MAX_TRAIN_BYTES


def machine_memory(device: str, gpus_per_trial: float | None = None) -> tuple[float, str]:
    """(bytes, words) of the memory one model trained on ``device`` here may use at most.

    ``gpus_per_trial`` None: the model trains in this process (``train``, a ``--local`` search), on the
    GPU ``device`` names when CUDA is available (``auto`` and ``cuda``: the current one, ``cuda:N``:
    GPU N).  A number: on a Ray worker of this machine, which sees only the GPUs Ray gives it: 0 trains
    on the CPU whatever ``device`` says; 1 or more train on one of them (the smallest GPU here, as
    Ray picks which); a fraction shares one GPU with other trials and may use that share of its memory.
    On the CPU (or if CUDA cannot be read) the machine's RAM.
    """
    import torch

    cuda = torch.cuda.is_available()
    if gpus_per_trial is not None:  # a Ray worker
        if gpus_per_trial > 0 and cuda:
            count = torch.cuda.device_count()
            smallest = min(range(count), key=lambda i: torch.cuda.get_device_properties(i).total_memory)
            share = min(gpus_per_trial, 1.0)
            total = torch.cuda.get_device_properties(smallest).total_memory * share
            of = "the GPU" if count == 1 else "the smallest GPU"
            words = f"{of} ({torch.cuda.get_device_name(smallest)})"
            return float(total), words if share == 1 else f"a {share:g} share of {words}"
    elif cuda and (device.startswith("cuda") or device == "auto"):
        index = _cuda_index(device, torch.cuda.device_count())
        total = torch.cuda.get_device_properties(index).total_memory
        return float(total), f"the GPU ({torch.cuda.get_device_name(index)})"
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: the absolute ceiling only
        return float(MAX_TRAIN_BYTES), "one device"
    return float(min(ram, MAX_TRAIN_BYTES)), "this machine's memory"


def _cuda_index(device: str, count: int) -> int:
    """The GPU ``device`` names (``auto``/``cuda``: the current one); refuses one this machine lacks."""
    import torch

    if not device.startswith("cuda:"):
        return torch.cuda.current_device()
    index = device.partition(":")[2]
    if not index.isdigit() or int(index) >= count:
        last = f"cuda:{count - 1}"
        valid = "cuda:0" if count == 1 else f"cuda:0 to {last}"
        raise UserError(f"device {device!r}: this machine has {count} GPU(s); valid: {valid}, cuda or auto")
    return int(index)


def check_devices(device: str, gpus_per_trial: float, on_ray: bool, this_machine: bool) -> None:
    """Refuse a device request the trials' machine cannot meet, before anything is created.

    ``on_ray``: the trials run on Ray workers, which see only the GPUs Ray gives them
    (Ray sets ``CUDA_VISIBLE_DEVICES`` to nothing for a worker without one), so ``cuda``
    needs ``gpus_per_trial`` > 0.  ``this_machine``: the trials run here (``--local`` or
    a local Ray), so CUDA and the GPU count are read here; a joined cluster's GPUs are
    checked by the pool once it has joined (``nas.execution.ray_start.check_gpus``).
    """
    wants_cuda = device.startswith("cuda") or gpus_per_trial > 0
    if wants_cuda and this_machine:
        _check_cuda_here(device, gpus_per_trial)
    if on_ray:
        _check_ray_device(device, gpus_per_trial)


def _check_cuda_here(device: str, gpus_per_trial: float) -> None:
    """CUDA, and as many GPUs as one trial asks for, on this machine."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    what = (
        f"{named('resources', 'device')} {device}" if device.startswith("cuda")
        else f"{named('resources', 'gpus_per_trial')} {gpus_per_trial:g}"
    )  # fmt: skip
    if count == 0:
        cuda = torch.version.cuda
        build = "a CPU-only build of torch" if cuda is None else f"torch built for CUDA {cuda}"
        raise UserError(
            f"{what}: CUDA is not available on this machine ({build}, no GPU found); valid here: "
            "--device auto or cpu with --gpus-per-trial 0, or --address to join a cluster with GPUs"
        )
    if gpus_per_trial > count:
        raise UserError(
            f"{named('resources', 'gpus_per_trial')} {gpus_per_trial:g}: this machine has {count} GPU(s); "
            f"valid: up to {count}"
        )


def _check_ray_device(device: str, gpus_per_trial: float) -> None:
    """Ray workers see only the GPUs Ray gives them."""
    if device.startswith("cuda") and gpus_per_trial <= 0:
        raise UserError(
            f"{named('resources', 'device')} {device}: Ray workers see only the GPUs they are given; set "
            f"{named('resources', 'gpus_per_trial')} (1, or 0.25 to share a GPU) or use --device auto"
        )


#: tokens of each split the degenerate-corpus check reads (a token file may hold billions)
_SAMPLE = 1 << 20


def check_not_degenerate(corpus: Any) -> None:
    """Refuse a corpus whose tokens are all one id: every model predicts it perfectly (val_loss 0),
    a "perfect" score a search would rank first.  Reads at most ``_SAMPLE`` tokens of each split."""
    first = None
    for split in ("train", "val"):
        ids = getattr(corpus, split, None)
        if ids is None or not hasattr(ids, "numel") or ids.numel() == 0:
            return  # not a token corpus (seq2seq pairs), or an empty split that is refused elsewhere
        first = ids[0] if first is None else first
        if not (bool((ids[:_SAMPLE] == first).all()) and bool((ids[-_SAMPLE:] == first).all())):
            return
    raise UserError(
        f"{getattr(corpus, 'name', 'the corpus')}: every token is the same id, so any model scores a "
        "perfect validation loss of 0; check the tokenizer (it maps the text to one id) or the corpus"
    )


def check_training(arch: ArchConfig, recipe: TrainRecipe, budget: Budget, corpus: Any, device: str) -> None:
    """What ``train_lm`` would refuse, and a model too large for this machine, before anything is built."""
    check_not_degenerate(corpus)
    seq_len = check_arch_fits(arch, recipe, corpus)
    limit, where = machine_memory(device)
    try:
        check_fits(arch, recipe.batch_size, seq_len, limit=limit, where=where)
    except ConfigError as err:
        raise err.at("recipe" if err.path == "batch_size" else "arch") from None
    plan_training(budget, recipe, seq_len, corpus, arch, ())
    shape_of(arch, recipe)  # a parametrization the model cannot take (completep on seq2seq)


def check_search(
    space: SearchSpace,
    recipe: TrainRecipe,
    budget: Budget | None,
    corpus: Any,
    trains: bool,
    memory: tuple[float, str] | None = None,
) -> None:
    """Refuse a space whose candidates cannot all be built, or (``trains``) trained on ``corpus``.

    The largest candidates must fit one device and, when trained, their longest
    window the corpus; the smallest ``max_len`` must hold ``recipe.seq_len``; the
    cheapest candidate must get at least one step from the budget (a FLOPs budget
    gives bigger models fewer steps, so only when even the cheapest gets none is
    every trial bound to fail; ``budget`` None: the candidates do not train at one budget, as
    in a confirmation).  ``memory``: :func:`machine_memory` of the trials' device, where they run on
    this machine (else only the ceiling of one device).  Errors name the space file and its field.
    """
    limit, where = memory if memory is not None else (None, "one device")
    if trains:
        check_not_degenerate(corpus)
    try:
        costliest = None  # the largest candidate: the fewest steps under a FLOPs budget
        for arch, n_layers, n_encoder in one_layer_archs(space, largest=True):
            arch = arch.with_vocab(corpus.vocab_size)
            shape_of(arch, recipe)  # completep on seq2seq: refused before any trial, not by each
            seq_len = recipe.seq_len or arch.max_len
            n = n_layers + n_encoder
            check_fits(arch, recipe.batch_size, seq_len, n_layers=n, limit=limit, where=where)
            if trains:
                check_windows(corpus, seq_len)
                deep = dataclasses.replace(arch, layers=arch.layers * n_layers,
                                           encoder_layers=arch.encoder_layers * n_encoder)  # fmt: skip
                cost = compute(deep, seq_len)
                if costliest is None or cost.train_flops_per_token > costliest[0].train_flops_per_token:
                    costliest = (cost, seq_len)
        cheapest, least = None, [math.inf, math.inf]  # least params and FLOPs/token of any candidate
        for arch, n_layers, n_encoder in one_layer_archs(space, largest=False):
            arch = dataclasses.replace(arch, layers=arch.layers * n_layers, vocab_size=corpus.vocab_size,
                                       encoder_layers=arch.encoder_layers * n_encoder)  # fmt: skip
            seq_len = check_arch_fits(arch, recipe, corpus) if trains else (recipe.seq_len or arch.max_len)
            cost = compute(arch, seq_len)
            least = [min(least[0], cost.params), min(least[1], cost.fwd_flops_per_token)]
            if cheapest is None or cost.train_flops_per_token < cheapest[0].train_flops_per_token:
                cheapest = (cost, seq_len)
        if space.encoder is None and cheapest is not None and space.layer_choices.at:
            # whole candidates, each position from its own menu: the stand-ins above put the cheapest
            # layer of any menu everywhere, so a `layers.at` menu over the caps went unseen
            def measure(a: ArchConfig) -> tuple[float, float]:
                return _measures(a, recipe)

            whole = [measure(a) for a in cheapest_lm_archs(space, corpus.vocab_size, measure)]
            if whole:
                least = [min(p for p, _ in whole), min(f for _, f in whole)]
        over = over_caps(space.constraints, int(least[0]), least[1]) if cheapest is not None else []
        if over:  # every trial would be told "over cap" and none trained
            raise ConfigError(f"no candidate of the space meets them: the smallest has {'; '.join(over)}; "
                              "raise the cap or offer smaller choices", "constraints")  # fmt: skip
        if cheapest is not None and trains and budget is not None:
            plan_steps(budget, cheapest[0], recipe.batch_size, cheapest[1])
            # rungs every candidate can place (a FLOPs budget gives the largest the fewest steps): else
            # every trial whose run is too short for them would fail
            for cost, seq_len in (cheapest, costliest or cheapest):
                steps = plan_steps(budget, cost, recipe.batch_size, seq_len)
                if steps is not None:
                    plan_rungs(budget, recipe, steps)
    except ConfigError as err:
        raise ConfigError(err.message, _space_path(err.path, space, corpus), space.source) from None


def _measures(arch: ArchConfig, recipe: TrainRecipe) -> tuple[float, float]:
    """What the space's caps compare: parameters and forward FLOPs per token."""
    c = compute(arch, recipe.seq_len or arch.max_len)
    return float(c.params), float(c.fwd_flops_per_token)


def _space_path(path: str, space: SearchSpace, corpus: Any) -> str:
    """Where in the space file (or which corpus) an error about one candidate points."""
    if path in ("batch_size", "seq_len"):
        return f"recipe.{path}"
    if path == "vocab_size" and "vocab_size" not in space.globals:
        return f"the vocabulary of {corpus.name}"
    if path in ("d_model", "n_layers", "max_len", "vocab_size", "n_heads"):
        return f"globals.{path}"
    return path
