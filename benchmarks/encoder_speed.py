"""Our encoder against transformers.BertModel on the same checkpoint: time per training step and per inference.

    python benchmarks/encoder_speed.py --model all-MiniLM-L6-v2 --batch-size 32 --tokens 128

Prints each side's median seconds per forward+backward step (and forward-only inference) and the
ratio ours / transformers, measured alternately in one process so both see the same machine load. Off a terminal,
a progress line at least every 30 seconds while it measures.
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
from minbert.common.progress import Progress, log_to_stderr  # noqa: E402
from minbert.models import ATTENTION, from_pretrained  # noqa: E402
from minbert.models.bert import resolve_attention  # noqa: E402
from minbert.models.loading import resolve_checkpoint  # noqa: E402


def step_seconds(model, batch, train: bool) -> float:
    start = time.perf_counter()
    if train:
        model.train()
        model(**batch).last_hidden_state.float().pow(2).mean().backward()
        model.zero_grad(set_to_none=True)
    else:
        model.eval()
        with torch.no_grad():
            model(**batch)
    if batch["input_ids"].is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


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
                             "padded, packed, unpadded, or auto (packed on a CPU, padded on a GPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where to run: cpu, cuda, cuda:1, ... (cuda when present)")
    args = parser.parse_args(argv)
    log_to_stderr(logging.WARNING, progress_lines=True)
    folder = resolve_checkpoint(args.model)
    models = {"ours": from_pretrained(folder).to(args.device),
              "transformers": transformers.BertModel.from_pretrained(folder).to(args.device)}
    models["ours"].attention = args.attention
    torch.manual_seed(0)
    batch = {"input_ids": torch.randint(1000, 20000, (args.batch_size, args.tokens), device=args.device),
             "attention_mask": torch.ones(args.batch_size, args.tokens, dtype=torch.long, device=args.device)}
    batch["attention_mask"][: args.batch_size // 2, args.tokens // 2:] = 0  # half the batch padded
    print(f"{args.model}, batch {args.batch_size} x {args.tokens} tokens, {args.device}, our attention "
          f"{resolve_attention(args.attention, args.device)}, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")
    bar = Progress(2 * len(models) * (args.repeats + 1), "encoder_speed", unit="step")
    for train in (True, False):
        times = {name: [] for name in models}
        for name, model in models.items():
            step_seconds(model, batch, train)  # warm-up
            bar.update()
        for _ in range(args.repeats):
            for name, model in models.items():  # alternate, so load changes hit both sides
                times[name].append(step_seconds(model, batch, train))
                bar.update()
        median = {name: statistics.median(t) for name, t in times.items()}
        kind = "train step (fwd+bwd)" if train else "inference (fwd)"
        print(f"{kind:22s} ours {median['ours']:.3f} s  transformers {median['transformers']:.3f} s  "
              f"ratio {median['ours'] / median['transformers']:.2f}", flush=True)
    bar.close()

if __name__ == "__main__":
    main()
