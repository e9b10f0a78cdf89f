"""The trainer's CUDA graphs (--cuda-graphs) checked on the GPU before any figure depends on them: the GPU plan's
call1 runs it (on a CPU, as the rehearsal runs it, torch compiles the same way and replays no graph).

    python benchmarks/graph_check.py [--device cuda]

A tiny encoder compiled as the trainer compiles it (models.compile_encoder: static shapes, CUDA graphs), trained
on one batch shape for a few steps after the graph is recorded:
- without dropout, every step's loss and gradients equal the eager encoder's (same weights, same batch) to 1e-5
  of the largest: the replayed graph computes what eager code computes;
- with dropout, the same batch gives a different loss at each replay: the graph draws new dropout masks (torch's
  CUDA generator advances by the graph's draws at each replay), it does not replay the recorded ones.
Prints one line a check; exit code 1 if one fails.
"""
import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minbert.common.cli import resolve_device  # noqa: E402
from minbert.models import BertConfig, BertModel, compile_encoder  # noqa: E402

STEPS = 5  # torch's graph trees warm a shape up at its first call, record it at the second, replay it after


def encoder(dropout: float, device: torch.device) -> BertModel:
    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=64, hidden_dropout_prob=dropout,
                                attention_probs_dropout_prob=dropout), attention="padded").to(device).train()


def losses_and_gradients(model: BertModel, ids: torch.Tensor) -> list[tuple[float, torch.Tensor]]:
    """Each step's loss and gradients on the same batch, the weights unchanged (no optimizer step). The loss weighs
    every output differently (LayerNorm's outputs alone have a fixed mean square)."""
    weights = torch.randn(*ids.shape, 32, generator=torch.Generator().manual_seed(2)).to(ids.device)
    results = []
    for _ in range(STEPS):
        model.zero_grad(set_to_none=True)
        loss = (model(input_ids=ids).last_hidden_state * weights).sum()
        loss.backward()
        results.append((loss.item(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])))
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="cuda, cpu, ... (auto: cuda when present)")
    device = resolve_device(parser.parse_args(argv).device)
    ids = torch.randint(3, 100, (4, 32), generator=torch.Generator().manual_seed(1)).to(device)
    failed = 0

    def check(ok: bool, what: str) -> None:
        nonlocal failed
        failed |= not ok
        print(f"{'ok' if ok else 'FAILED'}: {what}", flush=True)

    eager = encoder(0.0, device)
    graphed = compile_encoder(copy.deepcopy(eager), static_shapes=True, cuda_graphs=True, inductor=False)
    for step, ((eager_loss, eager_grad), (loss, grad)) in enumerate(zip(losses_and_gradients(eager, ids),
                                                                        losses_and_gradients(graphed, ids))):
        scale = eager_grad.abs().max().item()
        check(abs(loss - eager_loss) <= 1e-5 * abs(eager_loss) and (grad - eager_grad).abs().max() <= 1e-5 * scale,
              f"{device.type}, step {step + 1} without dropout: loss {loss:.6f}, eager {eager_loss:.6f}")
    torch._dynamo.reset()
    with_dropout = [loss for loss, _ in losses_and_gradients(
        compile_encoder(encoder(0.1, device), static_shapes=True, cuda_graphs=True, inductor=False), ids)]
    check(len(set(with_dropout)) == STEPS, f"{device.type}, dropout 0.1: a new loss at every step "
                                           f"({', '.join(f'{loss:.6f}' for loss in with_dropout)})")
    return failed


if __name__ == "__main__":
    sys.exit(main())
