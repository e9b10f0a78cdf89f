"""Mixed precision: bf16 (or fp16 with loss scaling) autocast on GPUs, plain fp32 on CPU; tf32, fp32 whose matrix
products run on a GPU's tensor cores in TF32 (10-bit mantissas), several times faster than fp32's."""
from contextlib import nullcontext

import torch

from minbert.common.errors import UsageError

PRECISIONS = ("auto", "fp32", "tf32", "bf16", "fp16")


class Precision:
    def __init__(self, name: str, device: torch.device):
        if name == "auto":
            name = "fp32" if device.type != "cuda" else "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        if name in ("fp16", "tf32") and device.type != "cuda":
            raise UsageError(f"--precision {name} needs a CUDA device; use bf16 or fp32 on CPU")
        if name == "tf32":  # for the whole process: a run is a process
            torch.set_float32_matmul_precision("high")
        self.name, self.device_type = name, device.type
        self.dtype = {"fp32": None, "tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[name]
        # fp16 gradients underflow without loss scaling; bf16 has fp32's exponent range and needs none.
        self.scaler = torch.amp.GradScaler("cuda") if name == "fp16" else None

    def autocast(self):
        return torch.autocast(self.device_type, dtype=self.dtype) if self.dtype else nullcontext()

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.scaler else loss

    def step(self, optimizer: torch.optim.Optimizer, parameters, max_grad_norm: float) -> None:
        """Unscale (fp16), clip, and take the optimizer step (skipped by the scaler on inf/NaN gradients)."""
        if self.scaler:
            self.scaler.unscale_(optimizer)
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_([p for p in parameters if p.grad is not None], max_grad_norm)
        if self.scaler:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()

    def state_dict(self) -> dict:
        return self.scaler.state_dict() if self.scaler else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler and state:
            self.scaler.load_state_dict(state)
