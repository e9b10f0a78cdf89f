"""A world of one process through DistributedDataParallel, as the trainers wrap their models (engine/ddp.py): the
GPU plan's first check of NCCL's start-up and of the wrapper on a GPU (gloo on a CPU, as the rehearsal runs it).

    torchrun --standalone --nproc-per-node 1 benchmarks/ddp_smoke.py [--device cuda]

Two steps of a tiny encoder, each in two accumulation parts (the first under no_sync()), through DDP with small
buckets, then through DDP with --ddp-compress bf16: with one process the averaged gradients are the process's own,
so they must equal those of the same steps without DDP, exactly (fp32) or within bf16's rounding (2^-8 of each).
Prints one line a check; exit code 1 if one fails.
"""
import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minbert.models import BertConfig, BertModel, pool  # noqa: E402
from minbert.engine.ddp import DataParallel  # noqa: E402


class Loss(torch.nn.Module):
    def __init__(self, device: torch.device):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                            intermediate_size=64, hidden_dropout_prob=0.0,
                                            attention_probs_dropout_prob=0.0)).to(device)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = torch.ones_like(ids)
        return pool(self.encoder(input_ids=ids, attention_mask=mask), mask, "mean").pow(2).sum(-1).mean()


def gradients(device: torch.device, wrap: bool, compress: str = "none") -> list[torch.Tensor]:
    """Each step's gradients, one tensor a step (the pooler, unused, has none)."""
    model = Loss(device)
    data_parallel = DataParallel(model, list(model.parameters()), bucket_mb=0.01, compress=compress, wrap=wrap)
    steps = []
    for step in range(2):
        ids = torch.randint(1, 100, (8, 12), generator=torch.Generator().manual_seed(step)).to(device)
        for part, rows in enumerate((ids[:4], ids[4:])):
            with data_parallel.part(last=part == 1):
                data_parallel.module(rows).backward()
        steps.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        model.zero_grad(set_to_none=True)
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where the one process trains: cuda (DDP on NCCL) or cpu (DDP on gloo, the CPU rehearsal)")
    device = torch.device(parser.parse_args().device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")  # torchrun's environment
    print(f"DDP smoke: {dist.get_world_size()} process on {device} ({dist.get_backend()}), torch {torch.__version__}")
    plain = gradients(device, wrap=False)
    # One process: DDP's average is the process's own gradient, rounded to bf16 where compressed (at most 2^-8,
    # bf16's epsilon halved, of it).
    checks = {"DDP, fp32": (gradients(device, wrap=True), 0.0),
              "DDP, --ddp-compress bf16": (gradients(device, wrap=True, compress="bf16"),
                                           torch.finfo(torch.bfloat16).eps / 2)}
    failed = False
    for name, (found, rounding) in checks.items():
        errors = [(f - p).abs() - rounding * p.abs() for f, p in zip(found, plain)]
        worst = max(error.max().item() for error in errors)
        failed |= worst > 0
        print(f"  {name}: gradients {'NOT ' * (worst > 0)}as without DDP (largest error beyond the bound: "
              f"{max(worst, 0):.3g})")
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
