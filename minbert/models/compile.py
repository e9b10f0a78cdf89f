"""torch.compile for the encoder, or one clear line where torch cannot compile on this machine."""
import torch

from minbert.common.errors import FlagError
from minbert.models.bert import BertModel


# The graphs a static-shape encoder may compile (Dynamo's recompile limit).
STATIC_GRAPHS = 64


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


def compile_encoder(encoder: BertModel, static_shapes: bool = False, cuda_graphs: bool = False,
                    inductor: bool = True) -> BertModel:
    """`encoder` with its layer stack compiled in place. FlagError where torch cannot compile on its device.

    By default shapes are dynamic: batches of any size and length reuse one compiled graph instead of compiling
    again every step. static_shapes (batches of a few shapes: --length-buckets): a graph a shape, each specialised
    to it, as CUDA graphs need. cuda_graphs: each shape's forward and backward passes captured once and replayed
    (static shapes): with Inductor (inductor, --compile) as mode="reduce-overhead", else as the "cudagraphs"
    backend, which captures torch's own kernels and compiles nothing (seconds, not a minute a shape). Dropout stays
    random from replay to replay: torch's CUDA generator advances its offset by a graph's draws at each replay
    (torch's "CUDA Graph-safe RNG states"). Inductor's compiled kernels are cached on disk between runs (torch's FX
    graph cache, in $TORCHINDUCTOR_CACHE_DIR, by default /tmp/torchinductor_$USER).

    Only the layers are compiled: they hold nearly all the work, and BertModel.forward reads the attention mask
    back from the device (is there padding, where are the real tokens), which would break the graph anyway.
    Compiling in place keeps the parameters' names, so checkpoints save and load as before.
    """
    if inductor:
        check_can_compile(next(encoder.parameters()).device)
    if static_shapes or cuda_graphs:
        # A graph a shape: buckets' widths times the batches' rows (a pair's two views, evaluation's batch size),
        # in training and evaluation, past Dynamo's default of 8, after which it would run the rest eagerly.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, STATIC_GRAPHS)
    if cuda_graphs:
        options = dict(mode="reduce-overhead") if inductor else dict(backend="cudagraphs")
        encoder.encoder.compile(dynamic=False, **options)
    else:
        encoder.encoder.compile(dynamic=not static_shapes)
    return encoder
