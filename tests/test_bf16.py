"""CPU bf16: what --precision auto picks (bf16 only where the processor computes it natively, tested by faking
torch's check and the processor's flags), and the encoder under CPU bf16 autocast against transformers.BertModel
under the same autocast and against our own fp32 forward, for each attention path, outputs and gradients. Losses,
metrics, weights and optimizer states stay fp32."""
import json
import logging

import pytest
import torch
import transformers

import multitask_classifier
from minbert.common import precision
from minbert.common.errors import UsageError
from minbert.common.precision import Precision, choose
from minbert.heads import PAIR_MLPS, pair_mlps
from minbert.heads.paraphrase import ParaphraseHead
from minbert.models import Tokenizer, from_pretrained
from minbert.models.optimizer import AdamW
from minbert.tasks import REGISTRY
from tests.conftest import checkpoint_weights, multitask_argv

pytestmark = pytest.mark.usefixtures("one_thread")

CPU = torch.device("cpu")


@pytest.fixture
def processor(monkeypatch, tmp_path):
    """fake(torch_says, flags): a processor for which torch's oneDNN check answers torch_says and /proc/cpuinfo
    lists `flags`."""
    def fake(torch_says: bool, flags: str) -> None:
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 avx2 {flags}\n\nprocessor\t: 1\nflags\t\t: fpu\n")
        monkeypatch.setattr(precision, "CPUINFO", cpuinfo)
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: torch_says)
    return fake


@pytest.mark.parametrize("torch_says, flags, expected", [
    (True, "avx512f avx512_bf16", "bf16"),  # AMD Zen 4, Intel Cooper Lake
    (True, "avx512f amx_bf16 amx_tile", "bf16"),  # Intel Sapphire Rapids
    (True, "avx512f avx512bw", "fp32"),  # AVX-512 without BF16: oneDNN runs bf16, emulated
    (False, "avx2", "fp32"),  # this project's machine: AVX2 only
    (False, "avx512_bf16", "fp32"),  # a torch built without oneDNN's bf16
])
def test_auto_picks_bf16_only_on_a_cpu_that_computes_it_natively(processor, torch_says, flags, expected):
    processor(torch_says, flags)
    name, reason = choose("auto", CPU)
    assert name == expected
    assert ("natively" in reason and "avx512_bf16" in reason or "amx_bf16" in reason) if expected == "bf16" \
        else "no native bf16" in reason
    chosen = Precision("auto", CPU)
    assert chosen.dtype == (torch.bfloat16 if expected == "bf16" else None)
    with chosen.autocast():
        assert torch.is_autocast_enabled("cpu") == (expected == "bf16")


def test_explicit_precisions_win_over_the_processor(processor):
    processor(True, "avx512_bf16")
    assert choose("fp32", CPU) == ("fp32", "--precision fp32")
    processor(False, "")
    assert Precision("bf16", CPU).dtype == torch.bfloat16
    with pytest.raises(UsageError, match="needs a CUDA device"):
        Precision("fp16", CPU)


def test_this_machines_answer_is_torchs_and_the_flags(processor):
    """Unfaked: bf16 exactly where torch's check and the flags agree."""
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported() and bool(precision.cpu_bf16_flags())
    assert choose("auto", CPU)[0] == ("bf16" if native else "fp32")


# ---- the encoder under CPU bf16 autocast ----

U = 2.0 ** -8  # bf16's unit roundoff: 8 significant bits (7 stored and the implicit one), rounded to nearest
LAYERS = 2
PRODUCTS_PER_LAYER = 6  # query/key/value projections, Q K^T, softmax V, attention output, intermediate, output
FORWARD_TOLERANCE = 3 * U * (PRODUCTS_PER_LAYER * LAYERS + 1)
GRADIENT_TOLERANCE = 2 * FORWARD_TOLERANCE


def bf16_tolerances():
    """The tolerances, relative to the largest fp32 value of what is compared (a layer's hidden states, the pooler
    output, or the largest gradient of any parameter: some gradients are zero in exact arithmetic, as a key bias's,
    and bf16 leaves noise there on the scale of the others).

    Under CPU autocast a matrix product rounds both its operands to bf16 (relative error at most u = 2^-8 each) and
    its result (u again), accumulating in fp32 in between: to first order, 3u relative to the product's
    magnitude. Everything else (embeddings, LayerNorm, softmax, GELU, the residual sums) runs in fp32, and the
    LayerNorm after each block brings the hidden states back to one scale, so the errors of the products a value
    passes through add up rather than multiply: a hidden state of the last of LAYERS = 2 layers passes through 6
    products a layer, the pooler one more, so FORWARD_TOLERANCE = 3u (6 x 2 + 1) = 39u, about 0.15. The backward
    pass runs each product twice more (the gradient of each operand), each rounded likewise, and takes the
    forward's rounded activations: GRADIENT_TOLERANCE = 2 x FORWARD_TOLERANCE.

    transformers under the same autocast rounds at the same points; it may differ from ours where another order of
    fp32 additions flips a rounding, by at most the same bound. What these bounds catch: attending to the padding
    (the mask dropped) moves this model's outputs by about 170u and its gradients by about 240u (checked below)."""
    return FORWARD_TOLERANCE, GRADIENT_TOLERANCE


@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory, minilm_dir):
    """A 2-layer BERT (hidden 32) with weights on a trained model's scale (std 0.2, random biases and LayerNorm),
    so that attention moves the outputs and a mistake in it shows; MiniLM's vocabulary."""
    folder = tmp_path_factory.mktemp("bf16-bert")
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(
        hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        initializer_range=0.2))
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(folder)
    return folder


def padded_batch(folder):
    batch = Tokenizer.from_pretrained(folder)(["a cat sat on the mat today", "dog",
                                               "the big red car ran fast on the road by the house", "tree"])
    real = batch["attention_mask"].bool()
    assert real.sum(1).min() < real.sum(1).max(), "the batch should mix lengths"
    return batch, real


def forward_backward(model, batch, real, bf16: bool):
    """(last hidden states, pooler output, every parameter's gradient by its name without "bert.") of one pass, a
    loss weighting each real token's features differently and the pooler."""
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        output = model(**batch)
    hidden = output.last_hidden_state.float()[real]
    loss = (hidden * torch.linspace(-1, 1, hidden.numel()).view_as(hidden)).sum()
    (loss + output.pooler_output.float().pow(2).sum()).backward()
    gradients = {name.removeprefix("bert."): p.grad.clone() for name, p in model.named_parameters()}
    return hidden.detach(), output.pooler_output.detach().float(), gradients


def relative_errors(got, reference):
    """(hidden states' error, pooler's, the largest gradient error): each relative to its fp32 scale."""
    hidden, pooler, gradients = got
    hidden_ref, pooler_ref, gradients_ref = reference
    assert gradients.keys() == gradients_ref.keys()
    scale = max(g.abs().max() for g in gradients_ref.values())
    return ((hidden - hidden_ref).abs().max() / hidden_ref.abs().max(),
            (pooler - pooler_ref).abs().max() / pooler_ref.abs().max(),
            max((gradients[name] - gradients_ref[name]).abs().max() for name in gradients) / scale)


@pytest.mark.parametrize("attention", ["padded", "packed"])
def test_encoder_in_cpu_bf16_equals_transformers_and_our_fp32_within_bf16s_rounding(bf16_model, attention):
    forward_tolerance, gradient_tolerance = bf16_tolerances()
    batch, real = padded_batch(bf16_model)
    ours = from_pretrained(bf16_model).eval()
    ours.attention = attention
    in_bf16 = forward_backward(ours, batch, real, bf16=True)
    theirs = forward_backward(transformers.BertModel.from_pretrained(bf16_model).eval(), batch, real, bf16=True)
    in_fp32 = forward_backward(ours, batch, real, bf16=False)
    assert all(p.dtype == torch.float32 for p in ours.parameters())  # autocast leaves the weights fp32
    assert all(g.dtype == torch.float32 for g in in_bf16[2].values())
    for reference in (theirs, in_fp32):
        hidden, pooler, gradients = relative_errors(in_bf16, reference)
        assert hidden <= forward_tolerance and pooler <= forward_tolerance and gradients <= gradient_tolerance
    # bf16 did compute in bf16 (the test would pass vacuously otherwise), and the bounds catch a real mistake.
    assert relative_errors(in_bf16, in_fp32)[0] > 0
    unmasked = {**batch, "attention_mask": torch.ones_like(batch["attention_mask"])}
    ours.attention = "padded"
    hidden, _, gradients = relative_errors(forward_backward(ours, unmasked, real, bf16=False), in_fp32)
    assert hidden > forward_tolerance and gradients > gradient_tolerance


def test_task_losses_soft_outputs_and_optimizer_states_are_fp32_under_bf16_autocast():
    """The heads' raw outputs come out of a bf16 matrix product; every task's loss, and its soft outputs (what the
    metrics read), are computed in fp32 under autocast; AdamW's moments of fp32 weights are fp32."""
    torch.manual_seed(0)
    raw = {"sst": torch.randn(4, 5), "para": torch.randn(4), "sts": torch.rand(4) * 5}
    labels = {"sst": torch.tensor([0, 4, 2, 1]), "para": torch.tensor([0.0, 1.0, 1.0, 0.0]),
              "sts": torch.tensor([0.5, 4.0, 2.5, 3.0])}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for name, values in raw.items():
            task = REGISTRY[name]
            assert task.loss(values.bfloat16(), labels[name]).dtype == torch.float32, name
            assert task.soft(values.bfloat16()).dtype == torch.float32, name
    layer = torch.nn.Linear(8, 2)
    optimizer = AdamW(layer.parameters(), lr=1e-3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = layer(torch.randn(3, 8))
    assert output.dtype == torch.bfloat16
    output.float().pow(2).sum().backward()
    optimizer.step()
    moments = [tensor for state in optimizer.state.values() for tensor in state.values() if torch.is_tensor(tensor)]
    assert moments and all(t.dtype == torch.float32 for t in moments if t.dim() > 0)
    assert all(p.dtype == torch.float32 for p in layer.parameters())


@pytest.mark.parametrize("kind", PAIR_MLPS)
def test_the_bi_encoded_paraphrase_head_scores_in_fp32_under_bf16_autocast(kind):
    """A plain pair MLP's output is bf16 under autocast (a residual one's, added to its fp32 input, is fp32); the
    head's bilinear score, which autocast does not cover, takes either: an fp32 logit, within bf16's rounding of the
    same head's without autocast."""
    torch.manual_seed(0)
    head = ParaphraseHead(pair_mlps("none", 16, count=1, dropout=0.0, kind=kind)[0]).eval()
    first, second = torch.randn(4, 16), torch.randn(4, 16)
    in_fp32 = head(first, second)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logit = head(first, second)
    assert logit.dtype == torch.float32
    torch.testing.assert_close(logit, in_fp32, rtol=0.05, atol=0.05)


def test_a_run_on_a_faked_native_bf16_cpu_trains_in_bf16_and_keeps_fp32_weights(processor, tiny_model, course_data,
                                                                                 tmp_path, caplog):
    """--precision auto on a processor faked to compute bf16: the run's first line and its run config say bf16
    and why; the checkpoint's weights and the optimizer's moments stay fp32."""
    processor(True, "avx512_bf16")
    with caplog.at_level(logging.INFO):
        multitask_classifier.main(multitask_argv(tiny_model, course_data, tmp_path, "--epochs", "1",
                                                 "--precision", "auto"))
    first = next(record.getMessage() for record in caplog.records if record.name.startswith("minbert"))
    assert first == "precision bf16: the processor computes bf16 natively (avx512_bf16)"
    config = json.loads((tmp_path / "run" / "run_config.json").read_text())
    assert config["precision"] == "auto"
    assert config["resolved"]["precision"] == "bf16"
    assert "natively" in config["resolved"]["precision_reason"]
    weights = checkpoint_weights(tmp_path / "run" / "best")
    assert weights and all(tensor.dtype == torch.float32 for tensor in weights.values())
