"""torch.compile for the encoder, or one clear line where torch cannot compile on this machine."""
import torch

from common.errors import FlagError
from models.bert import BertModel


def _probe(x):
    return x * 2 + 1


def compile_encoder(encoder: BertModel) -> BertModel:
    """`encoder` with its layer stack compiled in place, shapes dynamic: batches of any size and length reuse one
    compiled graph instead of compiling again every step. FlagError where torch cannot compile on its device.

    Only the layers are compiled: they hold nearly all the work, and BertModel.forward reads the attention mask
    back from the device (is there padding, where are the real tokens), which would break the graph anyway.
    Compiling in place keeps the parameters' names, so checkpoints save and load as before.
    """
    device = next(encoder.parameters()).device
    # torch.compile compiles at the first call; a tiny function on the encoder's device finds a missing C
    # compiler, Triton or Dynamo support here rather than in the middle of the first training step.
    try:
        torch.compile(_probe, dynamic=True)(torch.ones(2, device=device))
    except Exception as error:  # compilers fail in many ways (Dynamo, Inductor, the C++ or Triton toolchain)
        lines = str(error).strip().splitlines()
        reason = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
        raise FlagError(f"torch cannot compile on this machine ({device.type}): {reason}; "
                        f"run without compiling") from None
    encoder.encoder.compile(dynamic=True)
    return encoder
