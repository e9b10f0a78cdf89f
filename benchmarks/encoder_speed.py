"""Our encoder against transformers' model of its family (BertModel, RobertaModel, MPNetModel) on the same checkpoint:
time per training step and per inference.

    python benchmarks/encoder_speed.py --model all-MiniLM-L6-v2 --batch-size 32 --tokens 128
    python benchmarks/encoder_speed.py --precision bf16     # ours in bf16 autocast against ours in fp32 too

Prints the processor (its name and bf16 flags) or GPU, each side's median seconds per forward+backward step (and
forward-only inference) and the ratios, measured alternately in one process so all sides see the same machine
load. With --precision bf16 both encoders run under bf16 autocast (as --precision bf16 trains), and ours in fp32
is a third side: "ours bf16 / ours fp32" below 1 is what bf16 gains. Off a terminal, a progress line at least
every 30 seconds while it measures.
"""
import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minbert.common.cli import HelpFormatter  # noqa: E402
from minbert.common.precision import processor  # noqa: E402
from minbert.common.progress import Progress, log_to_stderr  # noqa: E402
from minbert.models import ATTENTION, from_pretrained  # noqa: E402
from minbert.models.loading import resolve_checkpoint  # noqa: E402


def step_seconds(model, batch, train: bool, bf16: bool) -> float:
    start = time.perf_counter()
    with torch.autocast(batch["input_ids"].device.type, dtype=torch.bfloat16, enabled=bf16):
        run_step(model, batch, train)
    if batch["input_ids"].is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def run_step(model, batch, train: bool) -> None:
    if train:
        model.train()
        model(**batch).last_hidden_state.float().pow(2).mean().backward()
        model.zero_grad(set_to_none=True)
    else:
        model.eval()
        with torch.no_grad():
            model(**batch)


def random_batch(batch_size: int, tokens: int, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Random token ids (seed 0), the first half of the batch padded to half as many tokens."""
    torch.manual_seed(0)
    batch = {"input_ids": torch.randint(1000, 20000, (batch_size, tokens), device=device),
             "attention_mask": torch.ones(batch_size, tokens, dtype=torch.long, device=device)}
    batch["attention_mask"][: batch_size // 2, tokens // 2:] = 0
    return batch


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2",
                        help="checkpoint both sides load: hub id, checkpoint folder, or all-MiniLM-L6-v2")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    parser.add_argument("--tokens", type=int, default=128,
                        help="tokens per sentence (random token ids; half the batch padded to half as many)")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps per side; the median is printed")
    parser.add_argument("--attention", default="auto", choices=ATTENTION,
                        help="how our encoder runs the padded half of the batch (multitask_classifier.py --attention): "
                             "padded, packed, or auto (packed on a CPU, padded on a GPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where to run: cpu, cuda, cuda:1, ... (cuda when present)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                        help="fp32; bf16: both encoders under bf16 autocast, and ours in fp32 beside them")
    args = parser.parse_args(argv)
    log_to_stderr(logging.WARNING, progress_lines=True)
    folder = resolve_checkpoint(args.model)
    bf16 = args.precision == "bf16"
    models = {"ours": from_pretrained(folder).to(args.device),
              "transformers": transformers.AutoModel.from_pretrained(folder).to(args.device)}
    models["ours"].attention = args.attention
    sides = {f"{name} {args.precision}": (model, bf16) for name, model in models.items()}
    if bf16:
        sides["ours fp32"] = (models["ours"], False)
    batch = random_batch(args.batch_size, args.tokens, args.device)
    where = processor() if args.device == "cpu" else torch.cuda.get_device_name(args.device)
    print(f"{where}, torch {torch.__version__}")
    print(f"{args.model}, batch {args.batch_size} x {args.tokens} tokens, {args.device}, our attention "
          f"{models['ours'].resolved_attention}, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")
    bar = Progress(2 * len(sides) * (args.repeats + 1), "encoder_speed", unit="step")
    for train in (True, False):
        times = {name: [] for name in sides}
        for name, (model, autocast) in sides.items():
            step_seconds(model, batch, train, autocast)  # warm-up
            bar.update()
        for _ in range(args.repeats):
            for name, (model, autocast) in sides.items():  # alternate, so load changes hit every side
                times[name].append(step_seconds(model, batch, train, autocast))
                bar.update()
        median = {name: statistics.median(t) for name, t in times.items()}
        ours, theirs = median[f"ours {args.precision}"], median[f"transformers {args.precision}"]
        kind = "train step (fwd+bwd)" if train else "inference (fwd)"
        print(f"{kind:22s} " + "  ".join(f"{name} {seconds:.3f} s" for name, seconds in median.items())
              + f"  ours / transformers {ours / theirs:.2f}"
              + (f"  ours bf16 / ours fp32 {ours / median['ours fp32']:.2f}" if bf16 else ""), flush=True)
    bar.close()

if __name__ == "__main__":
    main()
