"""The standard baseline our multitask model must beat: one `transformers` model per task.

AutoModelForSequenceClassification on the same weights and data, sentence pairs cross-encoded
([CLS] s1 [SEP] s2 [SEP]), torch's AdamW with linear warm-up and decay; dev metrics per task. The loop is
what a careful user would write for speed: sdpa attention, --precision bf16 autocast if asked, fused AdamW on a
GPU, and no per-step read of the loss (which would make every step wait for the GPU).

    python benchmarks/hf_single_task_baseline.py --model all-MiniLM-L6-v2 --epochs sst=2,para=1,sts=2

A progress bar on a terminal; off one, a line at least every 30 seconds.
"""
import argparse
import logging
import random
import sys
import time
from pathlib import Path

import torch
from scipy.stats import pearsonr
import transformers
from transformers import get_linear_schedule_with_warmup

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minbert.common.cli import HelpFormatter, resolve_device  # noqa: E402
from minbert.common.files import DEFAULT_DATA, write_json  # noqa: E402
from minbert.common.progress import Progress, log_to_stderr, progress  # noqa: E402
from minbert.models import Tokenizer  # noqa: E402
from minbert.models.loading import resolve_checkpoint  # noqa: E402
from minbert.models.tokenizer import collate  # noqa: E402
from minbert.tasks import REGISTRY  # noqa: E402


def encode(tokenizer, records, max_length):
    if hasattr(records[0], "sentence"):
        return tokenizer.encode([r.sentence for r in records], max_length=max_length)
    return tokenizer.encode([r.sentence1 for r in records], [r.sentence2 for r in records], max_length=max_length)


def batches(encoded, labels, batch_size, shuffle, rng, pad_id, regression):
    order = list(range(len(encoded)))
    if shuffle:
        rng.shuffle(order)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        batch = collate([encoded[i] for i in rows], pad_id)
        batch["labels"] = torch.tensor([labels[i] for i in rows], dtype=torch.float if regression else torch.long)
        yield batch


def run_task(task, args, folder, tokenizer):
    spec = REGISTRY[task]
    train_file, dev_file, _ = spec.files
    train, dev = spec.read(args.data / train_file, labeled=True), spec.read(args.data / dev_file, labeled=True)
    num_labels = spec.sequence_classifier_outputs  # 1 = regression
    if args.max_train_examples:
        train = train[:args.max_train_examples]
    regression = num_labels == 1
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=num_labels, attn_implementation="sdpa").to(args.device)
    train_encoded, dev_encoded = encode(tokenizer, train, args.max_length), encode(tokenizer, dev, args.max_length)
    epochs = args.epochs[task]
    steps = epochs * -(-len(train) // args.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01,
                                  fused=args.device.type == "cuda")
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    autocast = torch.autocast(args.device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    rng = random.Random(args.seed)
    start = time.time()
    model.train()
    with Progress(steps, f"{task} baseline", unit="step") as bar:
        for _ in range(epochs):
            epoch_loss, epoch_steps = torch.zeros((), device=args.device), 0  # summed on the device, read once
            for batch in batches(train_encoded, [r.label for r in train], args.batch_size, True, rng,
                                 tokenizer.pad_id, regression):
                with autocast:
                    loss = model(**{k: v.to(args.device) for k, v in batch.items()}).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step(), schedule.step(), optimizer.zero_grad()
                epoch_loss += loss.detach()
                epoch_steps += 1
                bar.update()
            bar.set_postfix({"loss": f"{epoch_loss.item() / epoch_steps:.3f}"})
    train_seconds = time.time() - start  # the .item() above waited for the GPU's last step
    model.eval()
    predictions, start = [], time.time()
    with torch.no_grad(), autocast:
        for batch in progress(batches(dev_encoded, [r.label for r in dev], 128, False, rng, tokenizer.pad_id,
                                      regression), f"{task} dev", total=-(-len(dev) // 128), unit="batch"):
            logits = model(**{k: v.to(args.device) for k, v in batch.items() if k != "labels"}).logits.float()
            predictions += (logits.squeeze(-1) if regression else logits.argmax(-1)).tolist()
    gold = [r.label for r in dev]
    metric = pearsonr(predictions, gold)[0] if regression else sum(p == g for p, g in zip(predictions, gold)) / len(gold)
    return {"task": task, "epochs": epochs, "train_examples": len(train), "dev_metric": float(metric),
            "metric": "pearson" if regression else "accuracy", "train_seconds": round(train_seconds, 1),
            "dev_seconds": round(time.time() - start, 1), "last_epoch_loss": round(epoch_loss.item() / epoch_steps, 4)}


def describe_device(device: torch.device) -> str:
    """The device as a speed figure must name it: the GPU's name, or the CPU."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2",
                        help="starting weights of every task's model: hub id, checkpoint folder, or all-MiniLM-L6-v2")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with the course's data files")
    parser.add_argument("--epochs", default="sst=2,para=1,sts=2",
                        help="training epochs of each task's model, task=epochs, comma-separated (every task of "
                             "--tasks needs one)")
    parser.add_argument("--tasks", default="sst,para,sts",
                        help="the tasks to train a model for, comma-separated, of: sst (SST-5 sentiment, 5 classes, "
                             "accuracy), para (Quora paraphrase, accuracy), sts (STS similarity 0-5, a regression, "
                             "Pearson r), cfimdb (movie-review polarity, accuracy)")
    parser.add_argument("--batch-size", type=int, default=32, help="training examples per batch")
    parser.add_argument("--lr", type=float, default=5e-5,
                        help="peak learning rate (AdamW, weight decay 0.01, 10%% linear warm-up, then linear decay)")
    parser.add_argument("--max-length", type=int, default=128,
                        help="tokens per input (a pair's two sentences together); longer ones are truncated")
    parser.add_argument("--max-train-examples", type=int, default=0,
                        help="train on the first N examples of each training file (0 = all)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (head initialisation, batch order)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (auto: cuda when present)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="fp32, or bf16 autocast (as multitask_classifier.py --precision bf16)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/hf_single_task_baseline.json"),
                        help="JSON file for each task's dev metric, epochs and training seconds (rewritten after "
                             "each task)")
    args = parser.parse_args(argv)
    log_to_stderr(logging.WARNING, progress_lines=True)
    args.epochs = {k: int(v) for k, v in (item.split("=") for item in args.epochs.split(","))}
    args.device = resolve_device(args.device)
    folder = resolve_checkpoint(args.model)
    tokenizer = Tokenizer.from_pretrained(folder)
    results = []
    for task in args.tasks.split(","):
        results.append(run_task(task, args, folder, tokenizer))
        r = results[-1]
        print(f"{r['task']:5s} {r['metric']:9s} {r['dev_metric']:.4f}  ({r['epochs']} epochs, {r['train_seconds']} s)",
              flush=True)
        write_json(args.out, {"model": args.model, "device": describe_device(args.device), "precision": args.precision,
                              "threads": torch.get_num_threads(), "results": results})


if __name__ == "__main__":
    main()
