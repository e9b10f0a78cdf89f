"""torch.compile for the encoder, or one clear line where torch cannot compile on this machine."""
import torch

from minbert.common.errors import FlagError
from minbert.models.bert import BertModel


def _probe(x):
    return x * 2 + 1


def check_can_compile(device: torch.device | str) -> None:
    """FlagError, one line, where torch cannot compile on `device` (a missing C compiler, Triton or Dynamo support):
    torch.compile compiles at the first call, so a tiny function is compiled and run here, at set-up, rather than
    failing in the middle of the first training step."""
    device = torch.device(device)
    try:
        torch.compile(_probe, dynamic=True)(torch.ones(2, device=device))
    except Exception as error:  # compilers fail in many ways (Dynamo, Inductor, the C++ or Triton toolchain)
        lines = str(error).strip().splitlines()
        reason = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
        raise FlagError(f"torch cannot compile on this machine ({device.type}): {reason}; "
                        f"run without compiling") from None


def compile_encoder(encoder: BertModel) -> BertModel:
    """`encoder` with its layer stack compiled in place, shapes dynamic: batches of any size and length reuse one
    compiled graph instead of compiling again every step. FlagError where torch cannot compile on its device.

    Only the layers are compiled: they hold nearly all the work, and BertModel.forward reads the attention mask
    back from the device (is there padding, where are the real tokens), which would break the graph anyway.
    Compiling in place keeps the parameters' names, so checkpoints save and load as before.
    """
    check_can_compile(next(encoder.parameters()).device)
    encoder.encoder.compile(dynamic=True)
    return encoder
