"""evaluators.lm: budgets, schedule, callbacks, determinism, divergence, logging, checkpoints."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from torch import nn

import evaluators.evaluation as evaluation
import evaluators.lm as lm
import evaluators.model as model_prep
import evaluators.step as step
import nas
from evaluators.base import Diverged, Progress, Spent
from evaluators.budget import lr_at, plan_steps
from evaluators.device import reset_peak_memory
from evaluators.lm import train_lm
from evaluators.result import METRICS, RUN_FIELDS, Result
from nas.data import Corpus, load_corpus
from nas.errors import ConfigError
from nas.spec.training import Budget, TrainRecipe

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = nas.ArchConfig.from_dict(
    {"d_model": 32, "n_heads": 2, "max_len": 32, "layers": {"repeat": 2, "attention": "mha", "ffn": "relu"}}
)
BIGGER = nas.ArchConfig.from_dict(
    {"d_model": 64, "n_heads": 2, "max_len": 32, "layers": {"repeat": 2, "attention": "mha", "ffn": "relu"}}
)
RECIPE = TrainRecipe(batch_size=4, lr=3e-3, eval_batches=2, log_every=2, seed=0)


@pytest.fixture(scope="module")
def corpus(corpus_dir: Path) -> Corpus:
    return load_corpus(corpus_dir)


def train(corpus: Corpus, budget: Budget, **kwargs) -> Result:
    recipe = kwargs.pop("recipe", RECIPE)
    arch = kwargs.pop("arch", TINY)
    return train_lm(arch, recipe, budget, corpus, device="cpu", **kwargs)


# -- budgets -------------------------------------------------------------------------------------


def test_budget_conversions() -> None:
    cost = nas.compute(TINY, 32)
    per_step_tokens = 4 * 32
    assert plan_steps(Budget("steps", 7), cost, 4, 32) == 7
    assert plan_steps(Budget("tokens", 10 * per_step_tokens + 5), cost, 4, 32) == 10
    step_flops = cost.train_flops_per_token * per_step_tokens
    assert plan_steps(Budget("flops", 3.5 * step_flops), cost, 4, 32) == 3
    assert plan_steps(Budget("seconds", 1.0), cost, 4, 32) is None


def test_flops_budget_gives_bigger_models_fewer_steps() -> None:
    budget = Budget("flops", 1e11)
    small = plan_steps(budget, nas.compute(TINY, 32), 4, 32)
    big = plan_steps(budget, nas.compute(BIGGER, 32), 4, 32)
    assert small is not None and big is not None and big < small


@pytest.mark.parametrize("budget", [Budget("tokens", 100), Budget("flops", 1e6)])  # steps: whole (Budget)
def test_budget_below_one_step_is_refused_naming_the_minimum(budget: Budget) -> None:
    with pytest.raises(ConfigError, match="less than one training step; the minimum is"):
        plan_steps(budget, nas.compute(TINY, 32), 4, 32)


def test_tokens_budget_trains_whole_steps(corpus: Corpus) -> None:
    result = train(corpus, Budget("tokens", 5 * 128 + 100))
    assert result.steps == 5 and result.tokens == 5 * 128
    assert result.train_flops == pytest.approx(5 * 128 * result.train_flops_per_token)


def test_seconds_budget_runs_until_time_is_up(corpus: Corpus) -> None:
    seen: list[Progress] = []
    result = train(corpus, Budget("seconds", 0.3), callback=lambda p: seen.append(p) or False, eval_at=(0.5,))
    assert result.steps >= 1
    assert result.train_seconds >= 0.3
    assert seen[-1].fraction == 1.0 and seen[-1].val_loss is not None
    assert list(result.intermediate) == [0.5]


def test_seq_len_longer_than_max_len_is_refused(corpus: Corpus) -> None:
    with pytest.raises(ConfigError, match="max_len"):
        train(corpus, Budget("steps", 1), recipe=TrainRecipe(batch_size=4, seq_len=64))


# -- schedule and optimizer ----------------------------------------------------------------------


def test_lr_warms_up_linearly_then_decays_to_the_floor() -> None:
    r = TrainRecipe(lr=1.0, warmup_frac=0.1, min_lr_ratio=0.1)
    assert lr_at(r, 0.05) == pytest.approx(0.5)
    assert lr_at(r, 0.1) == pytest.approx(1.0)
    assert lr_at(r, 0.55) == pytest.approx(0.55)  # cosine midpoint between 1 and 0.1
    assert lr_at(r, 1.0) == pytest.approx(0.1)
    assert lr_at(TrainRecipe(lr=1.0, warmup_frac=0.0), 0.0) == pytest.approx(1.0)


def test_weight_decay_applies_to_matrices_only() -> None:
    model = nas.build_model(TINY)
    opt = step.make_optimizer(model, RECIPE, torch.device("cpu"))
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == RECIPE.weight_decay and plain["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(p.dim() < 2 for p in plain["params"])
    n = sum(len(g["params"]) for g in opt.param_groups)
    assert n == len(list(model.parameters()))  # the tied embedding once


def _decayed_ids(arch: nas.ArchConfig, decay: str) -> tuple[set[int], nn.Module]:
    model = nas.build_model(arch)
    opt = step.make_optimizer(model, dataclasses.replace(RECIPE, decay=decay), torch.device("cpu"))
    groups = [g for g in opt.param_groups if g["weight_decay"] > 0]
    return {id(p) for g in groups for p in g["params"]}, model


def test_weights_only_decay_spares_what_blocks_name_and_nothing_else() -> None:
    layers = [{"attention": "mdha"}, {"attention": "synth_random"}, {"attention": "mha"}]
    arch = nas.ArchConfig.from_dict({"d_model": 16, "n_heads": 2, "max_len": 8, "layers": layers})
    matrices, model = _decayed_ids(arch, "matrices")
    spared = {id(model.layers[0].attn.conv_weight), id(model.layers[1].attn.R)}
    assert spared <= matrices  # the default rule decays the kernels and the logits
    weights_only, model = _decayed_ids(arch, "weights_only")
    spared = {id(model.layers[0].attn.conv_weight), id(model.layers[1].attn.R)}
    expected = {id(p) for p in model.parameters() if p.dim() >= 2} - spared
    assert weights_only == expected  # embeddings, positions and every projection still decayed


def test_decay_rule_is_checked_and_the_default_left_out_of_the_recipe_dict() -> None:
    with pytest.raises(ConfigError, match="recipe.decay.*matrices, weights_only"):
        TrainRecipe.from_dict({"decay": "all"})
    assert "decay" not in TrainRecipe().to_dict()  # studies recorded before the option still match
    assert TrainRecipe.from_dict({"decay": "weights_only"}).to_dict()["decay"] == "weights_only"


# -- callbacks -----------------------------------------------------------------------------------


def test_eval_at_reports_validation_loss_to_the_callback(corpus: Corpus) -> None:
    seen: list[Progress] = []
    result = train(
        corpus, Budget("steps", 8), callback=lambda p: seen.append(p) or False, eval_at=(0.25, 0.5)
    )
    assert [p.step for p in seen] == [2, 4, 6, 8]  # log_every 2; evals at steps 2 and 4 and the end
    assert [p.val_loss is not None for p in seen] == [True, True, False, True]
    assert result.intermediate == {0.25: seen[0].val_loss, 0.5: seen[1].val_loss}
    assert seen[-1].val_loss == result.val_loss and seen[-1].fraction == 1.0
    assert seen[1].tokens == 4 * 128 and seen[1].flops == pytest.approx(
        4 * 128 * result.train_flops_per_token
    )
    assert all(math.isfinite(p.train_loss) and p.lr > 0 for p in seen)
    assert not result.stopped_early and result.stopped_at is None


def test_callback_returning_true_stops_training(corpus: Corpus) -> None:
    def hurdle(p: Progress) -> bool:
        return p.val_loss is not None

    result = train(corpus, Budget("steps", 10), callback=hurdle, eval_at=(0.5,))
    assert result.stopped_early is True
    assert result.stopped_at == 0.5
    assert result.steps == 5
    assert result.val_loss == result.intermediate[0.5]


def test_stop_between_evaluations_still_measures_validation_loss(corpus: Corpus) -> None:
    result = train(corpus, Budget("steps", 10), callback=lambda p: p.step >= 4)
    assert result.stopped_early and result.steps == 4 and result.stopped_at == 0.4
    assert math.isfinite(result.val_loss)


def test_eval_at_outside_the_budget_is_refused(corpus: Corpus) -> None:
    with pytest.raises(ConfigError, match="eval_at"):
        train(corpus, Budget("steps", 2), eval_at=(1.5,))


# -- results -------------------------------------------------------------------------------------


def test_result_has_every_metric_and_training_reduces_loss(corpus: Corpus) -> None:
    result = train(
        corpus, Budget("steps", 30), recipe=TrainRecipe(batch_size=8, eval_batches=2, log_every=10)
    )
    assert all(getattr(result, k) is not None for k in METRICS) and set(METRICS + RUN_FIELDS) <= set(
        result.to_dict()
    )
    assert result.val_loss < math.log(256) - 1.0
    assert result.val_ppl == pytest.approx(math.exp(result.val_loss))
    assert result.val_bpb == pytest.approx(result.val_loss / math.log(2))
    cost = nas.compute(TINY)
    assert result.params == cost.params == sum(p.numel() for p in nas.build_model(TINY).parameters())
    assert result.flops_per_token == cost.fwd_flops_per_token
    assert result.arch_id == TINY.arch_id and result.device == "cpu"
    assert result.tokens_per_s > 0 and result.seconds >= result.train_seconds > 0
    assert (result.dtype, result.vocab_size, result.peak_memory_bytes) == ("float32", 256, None)
    assert result.device_name and result.compile_seconds is None and result.compile_error is None


def test_same_seed_gives_identical_losses_and_another_seed_does_not(corpus: Corpus) -> None:
    a = train(corpus, Budget("steps", 6))
    b = train(corpus, Budget("steps", 6))
    c = train(corpus, Budget("steps", 6), recipe=TrainRecipe(batch_size=4, eval_batches=2, seed=1))
    assert a.val_loss == b.val_loss and a.train_loss == b.train_loss
    assert c.val_loss != a.val_loss


def test_non_finite_loss_raises_diverged(corpus: Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    def poisoned(arch: nas.ArchConfig) -> nas.TransformerLM:
        model = nas.build_model(arch)
        with torch.no_grad():
            model.ln_f.weight.fill_(float("nan"))
        return model

    monkeypatch.setattr(model_prep, "build_model", poisoned)
    with pytest.raises(Diverged, match="nan") as caught:
        train(corpus, Budget("steps", 4))
    # caught at the first report point (log_every 2): the two steps it took count as spent
    per_step = 4 * 32 * nas.compute(TINY, 32).train_flops_per_token
    assert Spent.of(caught.value) == Spent(steps=2, tokens=2 * 4 * 32, train_flops=2 * per_step)


def test_any_exception_in_training_carries_the_steps_it_spent(corpus: Corpus) -> None:
    def fault_at_step_4(p: Progress) -> bool:
        if p.step == 4:
            raise RuntimeError("injected fault")
        return False

    with pytest.raises(RuntimeError, match="injected fault") as caught:
        train(corpus, Budget("steps", 8), callback=fault_at_step_4)
    per_step = 4 * 32 * nas.compute(TINY, 32).train_flops_per_token
    assert Spent.of(caught.value) == Spent(steps=4, tokens=4 * 4 * 32, train_flops=4 * per_step)
    with pytest.raises(ConfigError) as before:  # refused before training: nothing spent, nothing attached
        train(corpus, Budget("steps", 8), recipe=dataclasses.replace(RECIPE, seq_len=64))
    assert Spent.of(before.value) is None


def test_absurd_learning_rate_diverges_or_is_caught(corpus: Corpus) -> None:
    recipe = TrainRecipe(batch_size=4, eval_batches=2, lr=1e30, warmup_frac=0.0, grad_clip=1e30, log_every=1)
    try:
        result = train(corpus, Budget("steps", 5), recipe=recipe)
    except Diverged:
        return
    assert math.isfinite(result.val_loss)  # if it did not blow up, it must still report a real number


def test_tensorboard_logs_scalars_and_hparams_in_one_run(corpus: Corpus, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(corpus, Budget("steps", 4), logdir=tmp_path, eval_at=(0.5,), log_hparams={"trial": 3, "space": "x"})
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # no timestamped sub-run
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/lr", "val/loss", "throughput/tokens_per_s", "hparam/val_loss"} <= tags
    assert [e.step for e in acc.Scalars("val/loss")] == [2, 4]
    plugins = acc.PluginTagToContent("hparams")
    assert plugins  # the HParams experiment and session summaries


def test_checkpoint_round_trip(corpus: Corpus, tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    result = train(corpus, Budget("steps", 3), save_to=path)
    model = nas.load_model(path)
    assert model.arch == TINY and not model.training
    doc = torch.load(path, weights_only=True)
    assert doc["recipe"] == RECIPE.to_dict() and doc["metrics"]["val_loss"] == result.val_loss
    x, y = corpus.validation(8, 32)
    assert evaluation.evaluate_loss(model, x, y, 4, torch.device("cpu")) == pytest.approx(
        result.val_loss, abs=1e-6
    )


def test_cuda_requested_without_cuda_is_a_user_error(corpus: Corpus) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    with pytest.raises(nas.UserError, match="CUDA is not available"):
        train_lm(TINY, RECIPE, Budget("steps", 1), corpus, device="cuda")


@dataclasses.dataclass
class TokenCorpus:
    """The byte corpus dressed as a token corpus that says how many bytes a token stands for."""

    name: str
    train: torch.Tensor
    val: torch.Tensor
    vocab_size: int = 256
    bytes_per_token: float | None = 1.0


@pytest.mark.parametrize("bytes_per_token", [2.5, None])
def test_bits_per_byte_follow_the_corpus_bytes_per_token(
    corpus: Corpus, bytes_per_token: float | None
) -> None:
    plain = train(corpus, Budget("steps", 2))
    tokens = train(
        TokenCorpus("tok", corpus.train, corpus.val, bytes_per_token=bytes_per_token), Budget("steps", 2)
    )
    assert tokens.val_loss == plain.val_loss and tokens.corpus == "tok"
    if bytes_per_token is None:
        assert tokens.val_bpb is None
    else:
        assert tokens.val_bpb == pytest.approx(plain.val_loss / math.log(2) / bytes_per_token)


def test_bits_per_byte_of_a_seq2seq_model_count_the_target_text_not_its_eos(tmp_path: Path) -> None:
    # Every scored target row ends with an eos, which is no byte of text: bits per byte are the loss summed
    # over the scored targets / ln 2 / the target bytes scored (they were loss / ln 2, ~3% low on
    # shakespeare-reversed).
    from synthetic_text import write_parallel_corpus

    corpus = load_corpus(write_parallel_corpus(tmp_path / "pairs"))
    arch = nas.ArchConfig.from_dict({**TINY.to_dict(), "task": "seq2seq", "vocab_size": corpus.vocab_size,
                                     "encoder_layers": [{"attention": "mha"}]})  # fmt: skip
    result = train(corpus, Budget("steps", 2), arch=arch)
    _, y = corpus.validation(RECIPE.eval_batches * RECIPE.batch_size, 32)
    scored = int((y != -100).sum())
    text = sum(min(len(corpus.val_pairs.target(i)), 32) for i in range(len(y)))  # targets cut to seq_len
    assert text < scored  # the eos of the rows that fit
    assert result.val_bpb == pytest.approx(result.val_loss * scored / math.log(2) / text, rel=1e-12)


def test_an_arch_for_another_vocabulary_is_refused_naming_vocab_size(corpus: Corpus) -> None:
    wide = nas.ArchConfig.from_dict({**TINY.to_dict(), "vocab_size": 512})
    with pytest.raises(ConfigError, match="vocab_size.*512.*256"):
        train(corpus, Budget("steps", 1), arch=wide)


# -- torch.compile -------------------------------------------------------------------------------


@pytest.mark.slow
def test_compile_trains_through_torch_compile_and_times_it_apart(corpus: Corpus) -> None:
    eager = train(corpus, Budget("steps", 3))
    compiled = train(corpus, Budget("steps", 3), compile=True)
    assert compiled.compile_error is None and compiled.compile_seconds > 0
    # The compiling first step is off the training clock: what is left is far shorter than the compile.
    assert compiled.train_seconds < compiled.compile_seconds
    assert compiled.val_loss == pytest.approx(eager.val_loss, abs=1e-3)  # fused kernels round differently


class _BrokenCompiled(torch.nn.Module):
    """What a compiler that fails on the first call returns: the same parameters, a forward that raises."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.inner = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("backend exploded\nwith a second line")


def _refuse(model: torch.nn.Module) -> torch.nn.Module:
    raise RuntimeError("no compiler here")


@pytest.mark.parametrize(
    "compiler,reason",
    [(_refuse, "RuntimeError: no compiler here"), (_BrokenCompiled, "RuntimeError: backend exploded")],
)
def test_a_model_that_fails_to_compile_trains_eager_and_says_why(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch, compiler, reason: str
) -> None:
    eager = train(corpus, Budget("steps", 3))
    monkeypatch.setattr(torch, "compile", compiler)
    fallback = train(corpus, Budget("steps", 3), compile=True)
    assert fallback.compile_error == reason and fallback.compile_seconds is None
    assert (
        fallback.val_loss == eager.val_loss and fallback.train_loss == eager.train_loss
    )  # from the same seed


def test_the_eager_retry_after_a_failed_compile_resets_the_peak_memory_first(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its peak_memory_bytes is the eager run's: the compile attempt's allocations are not counted.
    events: list[str] = []
    real_loop, real_reset = lm.run_loop, lm.reset_peak_memory

    def loop(prep, *args, **kwargs):
        events.append("train compiled" if prep.compiled else "train eager")
        return real_loop(prep, *args, **kwargs)

    def reset(device: torch.device) -> None:
        events.append("reset")
        real_reset(device)

    monkeypatch.setattr(torch, "compile", _BrokenCompiled)
    monkeypatch.setattr(lm, "run_loop", loop)
    monkeypatch.setattr(lm, "reset_peak_memory", reset)
    assert train(corpus, Budget("steps", 2), compile=True).compile_error is not None
    assert events == ["train compiled", "reset", "train eager"]


def test_reset_peak_memory_resets_the_cuda_device_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    reset: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset.append)
    reset_peak_memory(torch.device("cpu"))
    reset_peak_memory(torch.device("cuda:1"))
    assert reset == [torch.device("cuda:1")]


def test_corpus_too_small_for_one_window_names_the_corpus(tmp_path: Path) -> None:
    small = tmp_path / "small.txt"
    small.write_text("x" * 300)  # 270 train bytes, 30 validation bytes: less than a 33-byte window
    with pytest.raises(nas.UserError, match="small.txt: the validation text .30 bytes. is shorter"):
        train_lm(TINY, RECIPE, Budget("steps", 1), str(small), device="cpu")
