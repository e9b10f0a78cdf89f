"""--quantize int8: the encoder's Linear layers computed in int8 for inference on a CPU, through torch's dynamic
quantization (torch.ao.quantization.quantize_dynamic): each weight matrix is stored in int8, one scale per output
channel, and each batch's input to a layer is quantized as it comes, one scale for the whole tensor. Everything
else (embeddings, LayerNorm, attention's softmax, the heads) stays fp32. Off by default: the outputs move by int8's
rounding (docs/results.md, "CPU speed and memory at both sizes", measures how much, and the speed it buys).
"""
import warnings

import torch
from torch import nn

from minbert.common.choices import QUANTIZATIONS
from minbert.common.errors import FlagError, UsageError
from minbert.models.bert import BertModel


def inference_precision(quantize: str, device: torch.device | str, precision: str) -> str:
    """The --precision an inference with --quantize `quantize` runs in: `precision` as it is without quantization,
    fp32 with int8 (its non-Linear parts). FlagError, one line, where int8 cannot apply: off the CPU (torch's int8
    kernels are the CPU's), without a quantized engine in this torch, or with a precision other than fp32."""
    if quantize not in QUANTIZATIONS:
        raise FlagError(f"--quantize {quantize}: not one of {', '.join(QUANTIZATIONS)}")
    if quantize == "none":
        return precision
    device = torch.device(device)
    if device.type != "cpu":
        raise FlagError(f"--quantize int8: torch's int8 kernels run on the CPU, not on {device.type}; use --device "
                        f"cpu, or leave out --quantize")
    if torch.backends.quantized.engine == "none":
        raise FlagError("--quantize int8: this build of torch has no quantized CPU engine (x86, fbgemm, onednn or "
                        "qnnpack); leave out --quantize")
    if precision not in ("auto", "fp32"):
        raise FlagError(f"--quantize int8 computes in int8 and fp32, not with --precision {precision}; leave out one "
                        f"of them")
    return "fp32"


def quantize_encoder(encoder: BertModel, quantize: str) -> int:
    """With quantize "int8", every nn.Linear of `encoder` replaced in place by its dynamically quantized int8
    version, the encoder in eval mode for good (a forward pass in training mode is refused: the int8 layers have no
    gradients, so training would silently leave them as they are). The number of layers replaced (0 for "none")."""
    if quantize == "none":
        return 0
    linear = sum(isinstance(module, nn.Linear) for module in encoder.modules())
    # Per output channel: a row of large weights does not coarsen the others' steps (on all-MiniLM-L6-v2 it keeps
    # sentence embeddings nearer fp32's than one scale a matrix; docs/results.md).
    per_channel = {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}
    with warnings.catch_warnings():  # torch 2.10+ warns that torch.ao.quantization is to move to torchao
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel")
        torch.ao.quantization.quantize_dynamic(encoder.eval(), per_channel, dtype=torch.qint8, inplace=True)
    encoder.register_forward_pre_hook(_refuse_training)
    return linear


def _refuse_training(encoder: nn.Module, inputs) -> None:
    if encoder.training:
        raise UsageError("an encoder quantized to int8 (--quantize int8) is for inference only: its int8 layers "
                         "cannot be trained; load the model again without quantizing it to train it")
