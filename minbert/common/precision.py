"""Mixed precision: bf16 (or fp16 with loss scaling) autocast on GPUs, and on a CPU that computes bf16 natively
(AVX-512 BF16 or AMX), plain fp32 on other CPUs, where bf16 is emulated and slower than fp32; tf32, fp32 whose
matrix products run on a GPU's tensor cores in TF32 (10-bit mantissas), several times faster than fp32's.
Weights, gradients, optimizer states and checkpoints stay fp32 under autocast."""
from contextlib import nullcontext
from pathlib import Path

import torch

from minbert.common.errors import UsageError

# The processor flags (/proc/cpuinfo) of instructions that compute bf16 products: AVX-512 BF16 (AMD Zen 4 and later,
# Intel Cooper Lake) and AMX (Intel Sapphire Rapids and later).
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO = Path("/proc/cpuinfo")


def cpu_bf16_flags() -> list[str]:
    """Which of NATIVE_BF16_FLAGS this processor lists (none where /proc/cpuinfo cannot be read)."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [flag for flag in NATIVE_BF16_FLAGS if flag in flags]


def processor() -> str:
    """This CPU's name and its bf16 flags, for benchmarks' reports."""
    try:
        lines = CPUINFO.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "a CPU")
    return f"{name} (bf16 flags: {', '.join(cpu_bf16_flags()) or 'none'}; native bf16: {cpu_computes_bf16()})"


def cpu_computes_bf16() -> bool:
    """Whether this CPU computes bf16 natively: torch's oneDNN can run bf16 here (it also says so on AVX-512
    processors that only emulate bf16 products) and the processor lists AVX-512 BF16 or AMX."""
    supported = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return bool(supported and cpu_bf16_flags())


def choose(name: str, device: torch.device) -> tuple[str, str]:
    """The precision --precision `name` runs in on `device`, and why, in a user's words."""
    if name != "auto":
        return name, f"--precision {name}"
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return "bf16", "the GPU computes bf16"
        return "fp16", "the GPU has no bf16; fp16 with loss scaling"
    if cpu_computes_bf16():
        return "bf16", f"the processor computes bf16 natively ({', '.join(cpu_bf16_flags())})"
    return "fp32", "the processor has no native bf16 (no AVX-512 BF16 or AMX), where bf16 would be emulated and slower"


class Precision:
    def __init__(self, name: str, device: torch.device):
        name, self.reason = choose(name, device)
        if name in ("fp16", "tf32") and device.type != "cuda":
            raise UsageError(f"--precision {name} needs a CUDA device; use bf16 or fp32 on CPU")
        if name == "tf32":  # for the whole process: a run is a process
            torch.set_float32_matmul_precision("high")
        self.name, self.device_type = name, device.type
        self.dtype = {"fp32": None, "tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[name]
        # fp16 gradients underflow without loss scaling; bf16 has fp32's exponent range and needs none.
        self.scaler = torch.amp.GradScaler("cuda") if name == "fp16" else None

    def describe(self) -> str:
        """e.g. 'fp32: the processor has no native bf16 ...'"""
        return f"{self.name}: {self.reason}"

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
