"""--gradient-checkpointing: each encoder layer's forward runs again in the backward pass, drawing the same dropout
masks, so the gradients are those without it, in every attention layout, in both trainers and across --resume
(under DDP: tests/test_distributed.py)."""
import json
from collections import Counter

import pytest
import torch

import multitask_classifier
import pretrain_contrastive
from minbert.models import BertConfig, BertModel
from minbert.models import bert
from tests.conftest import assert_same_weights, checkpoint_weights, killed_and_resumed, multitask_argv

pytestmark = pytest.mark.usefixtures("one_thread")

BATCH, TOKENS, HIDDEN, INTERMEDIATE = 4, 9, 16, 32
# The recomputed forward runs the same operations on the same inputs; should a kernel add up in another order, a
# gradient moves by its rounding: a sum of n fp32 terms by up to about n eps of the sum of their magnitudes. The
# longest sums here are a weight gradient's over the batch's tokens of a 32-wide product: n = 4 x 9 x 32.
GRADIENT_RTOL = BATCH * TOKENS * INTERMEDIATE * torch.finfo(torch.float32).eps


# MPNet's fields (models/config.py): its relative position bias, computed once outside the checkpointed layers,
# must get its gradient through each layer's recomputed forward.
MPNET = dict(model_type="mpnet", positions_after_padding=True, type_vocab_size=0, relative_attention_num_buckets=32,
             pad_token_id=1)


def tiny_encoder(**family) -> BertModel:
    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=50, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=INTERMEDIATE, max_position_embeddings=16, hidden_dropout_prob=0.3,
                                attention_probs_dropout_prob=0.3, **family))


@pytest.fixture
def layer_calls(monkeypatch) -> Counter:
    """How often each layer went through torch.utils.checkpoint (by the layer's id)."""
    calls, checkpoint = Counter(), bert.checkpoint

    def counted(function, *args, **options):
        calls[id(function)] += 1
        return checkpoint(function, *args, **options)

    monkeypatch.setattr(bert, "checkpoint", counted)
    return calls


def gradients(model: BertModel, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """One training step's gradients, dropout drawn from seed 5."""
    model.train().zero_grad(set_to_none=True)
    torch.manual_seed(5)
    (model(ids, mask).last_hidden_state.pow(2) * mask[..., None]).sum().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", [{}, MPNET], ids=["bert", "mpnet"])
@pytest.mark.parametrize("attention", ["padded", "packed"])
def test_gradients_with_dropout_equal_those_without_checkpointing(attention, family):
    model = tiny_encoder(**family)
    model.attention = attention
    ids = torch.randint(1, 50, (BATCH, TOKENS), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 5:], mask[3, 2:] = 0, 0  # padded: every layout runs its own way
    recomputed = []
    for layer in model.encoder.layer:  # each layer's first module: how often each layer's forward ran
        layer.attention.self.register_forward_hook(lambda module, args, output: recomputed.append(module))
    plain = gradients(model, ids, mask)
    assert len(recomputed) == 2
    model.encoder.gradient_checkpointing = True
    recomputed.clear()
    checkpointed = gradients(model, ids, mask)
    assert len(recomputed) == 4, "each layer's forward ran again in the backward pass"
    assert checkpointed.keys() == plain.keys()
    # A different mask would change the gradients by far more than rounding: dropout 0.3 zeroes a third of each
    # layer's activations (test_dropout_draws_differ_without_the_replayed_random_state).
    for name, gradient in plain.items():
        torch.testing.assert_close(checkpointed[name], gradient, rtol=GRADIENT_RTOL,
                                   atol=GRADIENT_RTOL * gradient.abs().mean().item(), msg=name)


def test_dropout_draws_differ_without_the_replayed_random_state(monkeypatch):
    """What the test above relies on: recomputed without the forward's random state, the gradients differ."""
    checkpoint = bert.checkpoint
    monkeypatch.setattr(bert, "checkpoint",
                        lambda *args, **options: checkpoint(*args, **{**options, "preserve_rng_state": False}))
    model = tiny_encoder()
    ids = torch.randint(1, 50, (BATCH, TOKENS), generator=torch.Generator().manual_seed(1))
    plain = gradients(model, ids, torch.ones_like(ids))
    model.encoder.gradient_checkpointing = True
    changed = gradients(model, ids, torch.ones_like(ids))
    assert not torch.allclose(changed["embeddings.word_embeddings.weight"],
                              plain["embeddings.word_embeddings.weight"], rtol=0.01)


def test_inference_runs_each_layer_once(layer_calls):
    model = tiny_encoder()
    model.encoder.gradient_checkpointing = True
    with torch.no_grad():
        model(torch.randint(1, 50, (2, 5)))
    assert not layer_calls, "nothing to recompute without a backward pass"


# ---- the trainers ----
# One thread of the CPU runs the recomputed forward with the same kernels on the same inputs in the same order, so
# a whole run's weights come out bit for bit the same (AdamW would turn any rounding difference in a gradient near
# zero into a step of up to the learning rate, which no tolerance of a run's weights could tell from a real one).

@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_multitask_run_trains_the_same_weights_and_records_the_flag(tiny_model, course_data, tmp_path, layer_calls,
                                                                    precision):
    """tiny_model has BERT's dropout (0.1). Under bf16 autocast the recomputed forward is cast as the first was."""
    def run(out, *extra):
        multitask_classifier.main(multitask_argv(tiny_model, course_data, out, "--epochs", "1", "--max-steps", "3",
                                                 "--schedule", "avg", "--precision", precision, *extra))
        return checkpoint_weights(out / "run" / "last")

    plain = run(tmp_path / "plain")
    assert not layer_calls
    checkpointed = run(tmp_path / "checkpointed", "--gradient-checkpointing")
    assert len(layer_calls) == 2 and min(layer_calls.values()) >= 3 * 3, "both layers, 3 tasks a step, 3 steps"
    assert_same_weights(checkpointed, plain, atol=0)
    assert json.loads((tmp_path / "checkpointed/run/last/run_config.json").read_text())["gradient_checkpointing"]


def test_contrastive_tension_trains_both_encoders_as_without(tiny_model, contrastive_data, tmp_path, layer_calls):
    """CT's second encoder is a copy of the first: both are checkpointed, and both train as without."""
    def run(out, *extra):
        pretrain_contrastive.main(["--model", str(tiny_model), "--data-dir", str(contrastive_data), "--output-dir",
                                   str(out), "--method", "ct", "--data", "unlabeled", "--max-steps", "2",
                                   "--device", "cpu", "--lr", "1e-3", *extra])
        return {name: checkpoint_weights(out / name) for name in ("model1", "model2")}

    plain = run(tmp_path / "plain")
    checkpointed = run(tmp_path / "checkpointed", "--gradient-checkpointing")
    assert len(layer_calls) == 4, "two layers of each of the two encoders"
    for name in plain:
        assert_same_weights(checkpointed[name], plain[name], atol=0)


def test_a_resumed_run_checkpoints_as_its_run_config_says(tiny_model, course_data, tmp_path, monkeypatch,
                                                          layer_calls):
    """Killed after the checkpoint of step 6 and resumed with --resume alone: the run's flag is taken from its run
    config, and the run ends with the uninterrupted run's weights (killed_and_resumed checks them)."""
    def resume(killed):
        layer_calls.clear()
        return ["--output-dir", str(tmp_path / "resumed" / "run"), "--resume"]

    killed_and_resumed(monkeypatch, lambda out: multitask_argv(tiny_model, course_data, out, "--eval-every", "3",
                                                               "--gradient-checkpointing"), tmp_path, 6, resume)
    assert len(layer_calls) == 2, "the resumed part of the run checkpoints its layers"
    assert json.loads((tmp_path / "resumed/run/last/run_config.json").read_text())["gradient_checkpointing"]
