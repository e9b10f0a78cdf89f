"""--quantize int8: every Linear layer of the encoder replaced by torch's dynamically quantized one, each computing
what int8 arithmetic gives (its error within the worst case of its roundings, and as large as their uniform noise
predicts), through the SentenceEncoder API, MultitaskPredictor, `minbert predict` and `minbert benchmark`; refused
where it cannot apply. (Its speed and its dev scores are measured by benchmarks/cpu_speed.py, not here.)"""
import json
import logging
import random

import pytest
import torch
from torch import nn

import multitask_classifier
from minbert.commands import benchmark, predict
from minbert.common.errors import FlagError, UsageError
from minbert.models import BertConfig, BertModel, SentenceEncoder
from minbert.models.quantize import inference_precision, quantize_encoder
from minbert.predictor import MultitaskPredictor
from tests.conftest import write_course_files

pytestmark = pytest.mark.usefixtures("one_thread")

LAYERS = 2
# torch's x86, fbgemm and onednn engines quantize a Linear's input to 7 bits (reduce_range: their int8 products
# must not saturate int16 sums on processors without VNNI); qnnpack (ARM) uses all 8.
ACTIVATION_STEPS = 255 if torch.backends.quantized.engine == "qnnpack" else 127


def tiny_encoder() -> BertModel:
    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=16)).eval()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(1, 50, (8, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[2, 6:] = 0
    return ids, mask


def test_every_linear_layer_of_the_encoder_is_replaced_by_an_int8_one():
    encoder = tiny_encoder()
    assert quantize_encoder(encoder, "int8") == 6 * LAYERS + 1  # q, k, v, attention output, FFN in and out; pooler
    quantized = [m for m in encoder.modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    assert len(quantized) == 6 * LAYERS + 1 and not any(type(m) is nn.Linear for m in encoder.modules())
    for module in quantized:
        weight = module.weight()
        # A scale per output row, symmetric about 0 (stored as affine with every zero point 0).
        assert weight.dtype == torch.qint8 and weight.qscheme() in (torch.per_channel_affine,
                                                                    torch.per_channel_symmetric)
        assert weight.q_per_channel_scales().numel() == module.out_features
        assert not weight.q_per_channel_zero_points().any()


def test_each_int8_layer_errs_as_its_roundings_give():
    """Each quantized Linear, on the input it gets in the int8 encoder, against the fp32 Linear on that input.
    Its weights are rounded to int8 per output row i, in steps s_i = max_j |W_ij| / 127.5 (symmetric), so by at most
    s_i / 2; its input x to ACTIVATION_STEPS steps of a = (max(x, 0) - min(x, 0)) / ACTIVATION_STEPS over the whole
    tensor, by at most a (half a step, and half a step more where the zero point's rounding clamps an end). Then
    |y_int8 - y|_i <= s_i / 2 ||x||_1 + a (||W_i||_1 + n s_i / 2), n inputs, in the worst case; with the roundings
    spread uniformly and independently, its mean square is sum_j (x_j^2 s_i^2 + W_ij^2 a^2) / 12, which the measured
    one must match (averaged over thousands of outputs: within a third, where 8-bit inputs would halve it)."""
    fp32, int8 = tiny_encoder(), tiny_encoder()
    quantize_encoder(int8, "int8")
    layers = dict(fp32.named_modules())
    checked = []

    def compare(name):
        def hook(module, args, output):
            x, linear = args[0], layers[name]
            w = linear.weight
            exact = nn.functional.linear(x, w, linear.bias)
            s = w.abs().amax(1) / 127.5
            a = (x.max().clamp(min=0) - x.min().clamp(max=0)) / ACTIVATION_STEPS
            worst = s / 2 * x.abs().sum(-1, keepdim=True) + a * (w.abs().sum(1) + w.shape[1] * s / 2)
            error = output - exact
            assert (error.abs() <= worst * (1 + 1e-5)).all(), name
            noise = ((x ** 2).sum(-1, keepdim=True) * s ** 2 + (w ** 2).sum(1) * a ** 2) / 12
            ratio = (error.pow(2).mean() / noise.mean()).sqrt().item()
            assert 0.75 <= ratio <= 4 / 3, (name, ratio)
            checked.append(name)
        return hook

    for name, module in int8.named_modules():
        if isinstance(module, torch.ao.nn.quantized.dynamic.Linear):
            module.register_forward_hook(compare(name))
    with torch.no_grad():
        int8(*batch())
    assert len(checked) == 6 * LAYERS + 1


def test_a_quantized_encoder_refuses_to_train():
    encoder = tiny_encoder()
    quantize_encoder(encoder, "int8")
    with pytest.raises(UsageError, match="quantized to int8 .* for inference only"):
        encoder.train()(*batch())


@pytest.mark.parametrize("device, precision, refusal", [
    ("cuda", "auto", "--quantize int8: torch's int8 kernels run on the CPU, not on cuda; use --device cpu"),
    ("cpu", "bf16", "--quantize int8 computes in int8 and fp32, not with --precision bf16"),
    # TF32 is a GPU's matrix format: int8's non-Linear parts would run in plain fp32 while the flag said tf32.
    ("cpu", "tf32", "--quantize int8 computes in int8 and fp32, not with --precision tf32"),
    ("cpu", "fp16", "--quantize int8 computes in int8 and fp32, not with --precision fp16"),
])
def test_int8_where_it_cannot_apply_is_refused(device, precision, refusal):
    with pytest.raises(FlagError, match=refusal):
        inference_precision("int8", device, precision)


def test_int8_runs_in_fp32_outside_its_linear_layers_and_none_leaves_the_precision_alone():
    assert inference_precision("int8", "cpu", "auto") == "fp32"
    assert inference_precision("none", "cpu", "auto") == "auto"


# ---- the API and the commands ----

@pytest.fixture(scope="module")
def run(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    data = write_course_files(out, random.Random(0), train_rows=16)
    multitask_classifier.main(["--model", str(tiny_model), "--data-dir", str(data), "--output-dir", str(out / "run"),
                               "--predictions-dir", str(out / "predictions"), "--epochs", "1", "--batch-size", "8",
                               "--device", "cpu", "--precision", "fp32"])
    return out / "run"


def test_the_predictor_and_sentence_encoder_quantize_their_encoder(run, tiny_model):
    """Their outputs move, but by less than 13 layers' worst cases add up: each layer's output by up to about two
    7-bit steps of its input's range (test_each_int8_layer_errs_as_its_roundings_give), taken here as the output's
    own scale (LayerNorm keeps every layer's input at unit scale)."""
    sentences = ["a big red car", "the cat sat on the mat", "a dog ran fast"]
    outputs = {}
    for quantize in ("none", "int8"):
        predictor = MultitaskPredictor.from_run(run, "cpu", precision="auto", quantize=quantize)
        encoder = SentenceEncoder.from_pretrained(tiny_model, quantize=quantize)
        assert predictor.quantized_layers == encoder.quantized_layers == (0 if quantize == "none" else 13)
        if quantize == "int8":  # --precision auto: fp32 around the int8 layers, whatever the processor
            assert predictor.precision.name == encoder.precision.name == "fp32"
        outputs[quantize] = (predictor.soft_outputs("sst", sentences), encoder.encode(sentences))
    for fp32, int8 in zip(outputs["none"], outputs["int8"]):
        assert not torch.equal(fp32, int8)
        torch.testing.assert_close(int8, fp32, rtol=0, atol=13 * 2 / 127 * fp32.abs().max().item())


def test_predict_and_benchmark_say_int8_is_on(run, tiny_model, contrastive_data, tmp_path, caplog, capsys):
    with caplog.at_level(logging.INFO):
        predicted = predict.main([str(run), "--sst", "a big red car", "--device", "cpu", "--quantize", "int8"])
    assert predicted[0]["class"] in range(5)
    assert "--quantize int8: the encoder's 13 Linear layers compute in int8" in caplog.text
    out = tmp_path / "benchmark.json"
    benchmark.main(["--model", str(tiny_model), "--data-dir", str(contrastive_data), "--quantize", "int8", "--out",
                    str(out)])
    assert json.loads(out.read_text())["quantize"] == "int8"
    assert "(mean, int8)" in capsys.readouterr().out
