"""The numbers a training run is made of, each observed in a tiny run and checked against independent truth.

Both trainers' learning rate at every optimizer step (the warm-up/decay formula), the gradient norm
they step with (clipping), the STS regression target (squared error against the gold 0-5 score), the
cosine floor M of --sts-target cosine-range (transformers in eval mode), Precision.step's clipping on
hand-made gradients, and a bf16 autocast run on CPU (computes in bf16, lands close to fp32).
Observed through models.optimizer.AdamW.step, which both trainers use, so the checks survive moving
the scheduler or the clipping elsewhere.
"""
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file

from minbert import checkpoint
import multitask_classifier
import pretrain_contrastive
from minbert.common.errors import UsageError
from minbert.models.optimizer import AdamW
from tests.conftest import multitask_argv
from minbert.common.precision import Precision


def record_steps(monkeypatch) -> list[dict]:
    """Each AdamW step's learning rates (one per parameter group) and the norm of the gradients it applies."""
    steps, original = [], AdamW.step

    def recording(self, *a, **k):
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        steps.append({"lrs": [group["lr"] for group in self.param_groups],
                      "grad_norm": math.sqrt(sum(g.double().pow(2).sum().item() for g in grads))})
        return original(self, *a, **k)

    monkeypatch.setattr(AdamW, "step", recording)
    return steps


def run_trainer(trainer: str, tiny_model, course_data, out, *extra):
    """A tiny run of multitask_classifier.py or pretrain_contrastive.py, both at peak learning rate 1e-3."""
    if trainer == "multitask":  # the heads at the encoder's rate, so every parameter group has the same schedule
        multitask_classifier.main(multitask_argv(tiny_model, course_data, out, "--head-lr", "1e-3", *extra))
    else:  # MNRL on the Quora pairs: 40 pairs in batches of 8, two epochs
        pretrain_contrastive.main(["--model", str(tiny_model), "--data-dir", str(course_data), "--method", "mnrl",
                                   "--data", "quora", "--batch-size", "8", "--epochs", "2", "--lr", "1e-3",
                                   "--output-dir", str(out / "contrastive"), "--device", "cpu", *extra])


def expected_multiplier(step: int, total: int, warmup: float) -> float:
    warmup_steps = int(warmup * total)
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total - step) / (total - warmup_steps))


@pytest.mark.parametrize("trainer", ["multitask", "contrastive"])
def test_learning_rate_warms_up_then_decays_linearly_at_every_step(tiny_model, course_data, tmp_path, monkeypatch,
                                                                    trainer):
    steps = record_steps(monkeypatch)
    run_trainer(trainer, tiny_model, course_data, tmp_path, "--warmup", "0.3")
    total = len(steps)
    assert total >= 10 and int(0.3 * total) >= 3  # long enough for both phases to show
    for step, recorded in enumerate(steps):
        assert recorded["lrs"] == pytest.approx([1e-3 * expected_multiplier(step, total, 0.3)] * len(recorded["lrs"]),
                                                rel=1e-9, abs=1e-15), f"step {step} of {total}"


@pytest.mark.parametrize("trainer", ["multitask", "contrastive"])
def test_each_optimizer_step_applies_gradients_clipped_to_max_grad_norm(tiny_model, course_data, tmp_path, monkeypatch,
                                                                         trainer):
    # Gradients of a fresh model are far above 1e-4, so every step is clipped to norm 1e-4 (not below: still nonzero).
    steps = record_steps(monkeypatch)
    run_trainer(trainer, tiny_model, course_data, tmp_path, "--max-grad-norm", "1e-4")
    assert [s["grad_norm"] for s in steps] == pytest.approx([1e-4] * len(steps), rel=1e-3)


def pair_cosines(model_dir, first, second) -> np.ndarray:
    """Cosine of mean-pooled transformers.BertModel embeddings (eval mode), each sentence encoded alone."""
    bert = transformers.BertModel.from_pretrained(model_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)

    def embed(text):
        with torch.no_grad():
            return bert(**tokenizer(text, return_tensors="pt")).last_hidden_state[0].mean(0)

    return np.array([F.cosine_similarity(embed(a), embed(b), dim=0).item() for a, b in zip(first, second)])


def test_sts_loss_is_the_squared_error_of_the_score_against_the_gold_score(tiny_model, course_data, tmp_path):
    # Dropout off and one step over all 40 training pairs: the logged loss is that of the starting model, which
    # transformers reproduces. With M = -1 and the residual pair MLP at its identity start, score = 5 (cos + 1) / 2.
    model = tmp_path / "no-dropout"
    shutil.copytree(tiny_model, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "hidden_dropout_prob": 0.0,
                                                   "attention_probs_dropout_prob": 0.0}))
    multitask_classifier.main(multitask_argv(model, course_data, tmp_path, "--tasks", "sts", "--epochs", "1",
                                             "--batch-size", "64", "--head-dropout", "0", "--sts-target", "score"))
    logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])["train_loss"]["sts"]
    train = pd.read_csv(course_data / "sts-train.csv", sep="\t", index_col=0)
    cosines = pair_cosines(model, train["sentence1"], train["sentence2"])
    expected = np.mean((5 * (cosines + 1) / 2 - train["similarity"].to_numpy()) ** 2)
    assert logged == pytest.approx(expected, rel=1e-4)


def test_cosine_floor_is_the_eval_mode_mean_cosine_of_the_low_scored_training_pairs(tiny_model, course_data, tmp_path):
    multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--tasks", "sts", "--epochs", "1",
                                             "--sts-target", "cosine-range"))
    heads = load_file(tmp_path / "run" / "best" / checkpoint.HEADS)
    (floor,) = [tensor.item() for name, tensor in heads.items() if "cosine_floor" in name]
    train = pd.read_csv(course_data / "sts-train.csv", sep="\t", index_col=0)
    low = train[train["similarity"] <= 0.25]
    assert len(low) >= 1
    assert floor == pytest.approx(pair_cosines(tiny_model, low["sentence1"], low["sentence2"]).mean(), abs=1e-5)


# ---- Precision: clipping and bf16 ----

@pytest.mark.parametrize("bound", [0.5, 1e3])  # clipped; left as it is
def test_precision_step_clips_the_gradient_norm_and_updates_with_the_clipped_gradient(bound):
    generator = torch.Generator().manual_seed(0)
    parameters = [torch.nn.Parameter(torch.randn(3, 4, generator=generator)),
                  torch.nn.Parameter(torch.randn(5, generator=generator))]
    gradients = [torch.randn(p.shape, generator=generator) for p in parameters]
    norm = math.sqrt(sum((g ** 2).sum().item() for g in gradients))
    assert norm > 0.5
    before = [p.detach().clone() for p in parameters]
    for p, g in zip(parameters, gradients):
        p.grad = g.clone()
    Precision("fp32", torch.device("cpu")).step(torch.optim.SGD(parameters, lr=0.1), parameters, bound)
    assert math.sqrt(sum((p.grad ** 2).sum().item() for p in parameters)) <= bound * (1 + 1e-6)
    scale = min(1.0, bound / norm)
    for p, b, g in zip(parameters, before, gradients):
        torch.testing.assert_close(p.detach(), b - 0.1 * scale * g, rtol=1e-5, atol=1e-6)


def test_tf32_is_fp32_with_tf32_matrix_products_on_a_gpu_only():
    before = torch.get_float32_matmul_precision()
    try:
        precision = Precision("tf32", torch.device("cuda"))  # set up only: no GPU needed
        assert precision.dtype is None and precision.scaler is None  # no autocast, no loss scaling
        assert torch.get_float32_matmul_precision() == "high"  # TF32 tensor cores for fp32 matrix products
    finally:
        torch.set_float32_matmul_precision(before)
    with pytest.raises(UsageError, match="--precision tf32 needs a CUDA device"):
        Precision("tf32", torch.device("cpu"))


def test_bf16_training_step_on_cpu_computes_in_bf16_and_stays_close_to_fp32(tiny_model, course_data, tmp_path):
    # One step of all three tasks (8 examples each, --schedule avg), no weight decay; --sts-target score, since the
    # cosine range's M is measured before training, in fp32.
    def one_step(precision):
        out = tmp_path / precision
        dtypes = []
        hook = torch.nn.modules.module.register_module_forward_hook(
            lambda module, inputs, output: dtypes.append(output.dtype) if isinstance(module, torch.nn.Linear) else None)
        try:
            multitask_classifier.main(multitask_argv(tiny_model, course_data, out, "--precision", precision,
                                                     "--epochs", "1", "--schedule", "avg", "--max-train-examples", "8",
                                                     "--weight-decay", "0", "--sts-target", "score"))
        finally:
            hook.remove()
        loss = json.loads((out / "run" / "metrics.jsonl").read_text().splitlines()[0])["train_loss"]
        weights = {**load_file(out / "run" / "last" / "model.safetensors"),
                   **load_file(out / "run" / "last" / checkpoint.HEADS)}
        return loss, weights, set(dtypes)

    start = load_file(tiny_model / "model.safetensors")
    loss32, weights32, dtypes32 = one_step("fp32")
    loss16, weights16, dtypes16 = one_step("bf16")
    assert dtypes32 == {torch.float32} and dtypes16 == {torch.bfloat16}
    # bf16 keeps 8 significant bits (relative rounding 2^-9 per operation); with fp32 accumulation in the
    # matmuls and the losses taken in fp32, a 2-layer encoder's loss moves by well under 1%.
    assert loss16 != loss32
    assert loss16 == pytest.approx(loss32, rel=1e-2)
    # AdamW's first step moves each weight by about lr * sign(gradient) whatever the gradient's size, so the two
    # runs' updates differ (by up to 2 lr) only where a gradient component is smaller than its bf16 error: rare.
    # Over the weights the step moved (the encoder's that moved in fp32, all the heads'), the mean difference
    # is below a twentieth of a step.
    assert weights16.keys() == weights32.keys()
    stepped = {name: w != start[name] if name in start else torch.ones_like(w, dtype=torch.bool)
               for name, w in weights32.items()}
    difference = torch.cat([(weights16[name] - weights32[name]).abs()[stepped[name]] for name in weights32])
    assert difference.numel() > 10_000 and difference.mean() < 0.05 * 1e-3
