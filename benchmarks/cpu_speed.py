"""Training and inference on a CPU at both sizes, in one run, each figure a ratio against a reference measured in
the same run: all-MiniLM-L6-v2 (6 x 384, 22M parameters, the installed checkpoint) and a random encoder of
bert-base's shape (12 x 768, 110M), on random token ids with half of each batch padded to half the length.

    OMP_NUM_THREADS=1 python benchmarks/cpu_speed.py                    # about 10 minutes of one idle thread
    OMP_NUM_THREADS=1 python benchmarks/cpu_speed.py --skip compile     # without compiling (most of the time)

It prints four tables (markdown), and with --out writes them as JSON:

1. --gradient-checkpointing against off: a training step's peak resident memory (each side in a process of its
   own that builds the model and runs two steps: the kernel's high-water mark of its resident size, and that less
   its resident size before the first step) and its time (the two sides alternately, in this process, so that both see the same load).
2. --compile against eager (models/compile.py), for a training step and for inference: the first call's time and
   the compile time it holds (the first call less a step's time), the time per step after warm-up, and how far the
   outputs differ (inference: the last hidden state; training: the gradients, relative to their largest). Dropout
   is off here so that the two can be compared. Compiling starts from an empty Inductor cache, as a user's first
   run does (a later run reuses the cache and compiles in a fraction of the time).
3. --quantize int8 against fp32 inference (models/quantize.py): sentences per second, and how close the int8
   sentence embeddings (mean pooled) stay to fp32's (their cosine similarity).
4. Ours against transformers.BertModel at base size (the same weights, fp32), a training step and inference;
   then torch.profiler's top operators of one step of each, by their own CPU time.
5. With --run RUN (a finished multi-task run, e.g. the quick start's): each task's dev metric with fp32 and with
   --quantize int8 (MultitaskPredictor, as `minbert predict` computes it), and each dev pass's time, tokenising
   included; the tasks alternate between the two.

Timed steps are medians of --repeats; off a terminal, a progress line at least every 30 seconds.
"""
import argparse
import copy
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.encoder_speed import random_batch, run_step, step_seconds  # noqa: E402
from minbert.checkpoint import model_config  # noqa: E402
from minbert.common.cli import HelpFormatter  # noqa: E402
from minbert.common.files import DEFAULT_DATA  # noqa: E402
from minbert.common.precision import processor  # noqa: E402
from minbert.common.progress import Progress, log_to_stderr  # noqa: E402
from minbert.common.run_folder import RunFolder  # noqa: E402
from minbert.evaluation.outputs import dev_records, read_outputs  # noqa: E402
from minbert.models import BertConfig, BertModel, compile_encoder, from_pretrained, pool  # noqa: E402
from minbert.models.loading import load_weights  # noqa: E402
from minbert.models.quantize import quantize_encoder  # noqa: E402
from minbert.predictor import MultitaskPredictor  # noqa: E402
from minbert.tasks import REGISTRY  # noqa: E402

SIZES = ("MiniLM", "base")
PARTS = ("checkpointing", "compile", "int8", "transformers")
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def build(size: str) -> BertModel:
    """Our encoder at `size`: all-MiniLM-L6-v2's weights, or bert-base's shape with BERT's random initialisation."""
    if size == "MiniLM":
        return from_pretrained("all-MiniLM-L6-v2")
    torch.manual_seed(0)
    return BertModel(BertConfig())


def median_seconds(sides: dict, batch: dict, train: bool, repeats: int, bar: Progress) -> dict[str, float]:
    """Each side's median seconds a step, the sides alternating step by step (after a warm-up step each)."""
    times = {name: [] for name in sides}
    for round_ in range(repeats + 1):
        for name, model in sides.items():
            seconds = step_seconds(model, batch, train, False)
            if round_:
                times[name].append(seconds)
            bar.update()
    return {name: statistics.median(t) for name, t in times.items()}


def without_dropout(model: BertModel) -> BertModel:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        if hasattr(module, "dropout_p"):  # attention's, given to scaled_dot_product_attention
            module.dropout_p = 0.0
    return model


def gradients(model: BertModel, batch: dict) -> torch.Tensor:
    """All the gradients of a training step (encoder_speed's loss), flattened into one vector."""
    model.train()(**batch).last_hidden_state.pow(2).mean().backward()
    flat = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    return flat


# ---- 1. gradient checkpointing ----

def memory_probe(size: str, checkpointing: bool, batch_size: int, tokens: int) -> None:
    """This process (one of its own for each side): two training steps; prints its resident MB before the first
    and its peak, as JSON."""
    model = build(size)
    model.encoder.gradient_checkpointing = checkpointing
    batch = random_batch(batch_size, tokens)
    with open("/proc/self/statm") as statm:
        before = int(statm.read().split()[1]) * PAGE_MB
    for _ in range(2):
        run_step(model, batch, train=True)
    # The kernel's high-water mark of this process's memory (VmHWM, in kB): getrusage's ru_maxrss would also hold
    # the parent's from before the exec, which the kernel carries over.
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    print(json.dumps({"before_mb": before, "peak_mb": peak}))


def checkpointing_rows(models: dict, batches: dict, args, bar: Progress) -> list[dict]:
    rows = []
    for size, model in models.items():
        peaks = {}
        for on in (False, True):
            probe = subprocess.run([sys.executable, __file__, "--memory-probe", size, *(["--on"] if on else []),
                                    "--tokens", str(args.tokens), "--batch", str(batches[size]["input_ids"].shape[0])],
                                   capture_output=True, text=True, check=True)
            peaks[on] = json.loads(probe.stdout.strip().splitlines()[-1])
            bar.update()
        sides = {"off": model, "on": copy.deepcopy(model)}
        sides["on"].encoder.gradient_checkpointing = True
        seconds = median_seconds(sides, batches[size], True, args.repeats, bar)
        rows.append({"size": size, "peak MB off": peaks[False]["peak_mb"], "peak MB on": peaks[True]["peak_mb"],
                     "step MB off": peaks[False]["peak_mb"] - peaks[False]["before_mb"],
                     "step MB on": peaks[True]["peak_mb"] - peaks[True]["before_mb"],
                     "step s off": seconds["off"], "step s on": seconds["on"]})
    return rows


# ---- 2. compile ----

def compile_rows(models: dict, batches: dict, args, bar: Progress) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # cold, as a user's first compiled run
        for size, model in models.items():
            batch = batches[size]
            eager = without_dropout(copy.deepcopy(model))
            compiled = compile_encoder(copy.deepcopy(eager))
            for train in (True, False):
                eager_first = step_seconds(eager, batch, train, False)
                first = step_seconds(compiled, batch, train, False)  # compiles
                bar.update(2)
                seconds = median_seconds({"eager": eager, "compiled": compiled}, batch, train, args.repeats, bar)
                if train:
                    reference, result = gradients(eager, batch), gradients(compiled, batch)
                else:
                    with torch.no_grad():
                        reference = eager.eval()(**batch).last_hidden_state
                        result = compiled.eval()(**batch).last_hidden_state
                rows.append({"size": size, "what": "training step" if train else "inference",
                             "first call s": first, "compile s": first - eager_first,
                             "eager s": seconds["eager"], "compiled s": seconds["compiled"],
                             "bitwise equal": torch.equal(reference, result),
                             "max relative difference": ((result - reference).abs().max()
                                                         / reference.abs().max()).item()})
            del eager, compiled
    return rows


# ---- 3. int8 ----

def int8_rows(models: dict, batches: dict, args, bar: Progress) -> list[dict]:
    rows = []
    for size, model in models.items():
        batch = batches[size]
        int8 = copy.deepcopy(model)
        quantize_encoder(int8, "int8")
        seconds = median_seconds({"fp32": model, "int8": int8}, batch, False, args.repeats, bar)
        with torch.no_grad():
            fp32_embeddings, int8_embeddings = (pool(m.eval()(**batch), batch["attention_mask"], "mean")
                                                for m in (model, int8))
        cosine = F.cosine_similarity(fp32_embeddings, int8_embeddings)
        rows.append({"size": size, "fp32 sentences/s": len(batch["input_ids"]) / seconds["fp32"],
                     "int8 sentences/s": len(batch["input_ids"]) / seconds["int8"],
                     "cosine min": cosine.min().item(), "cosine mean": cosine.mean().item()})
    return rows


# ---- 4. ours against transformers ----

def transformers_rows(args, batch: dict, bar: Progress) -> tuple[list[dict], dict[str, str]]:
    torch.manual_seed(0)
    theirs = transformers.BertModel(transformers.BertConfig())  # bert-base's shape, random
    ours = BertModel(BertConfig())
    load_weights(ours, theirs.state_dict(), "transformers.BertModel")
    sides = {"ours": ours, "transformers": theirs}
    rows, profiles = [], {}
    for train in (True, False):
        seconds = median_seconds(sides, batch, train, args.repeats, bar)
        kind = "training step" if train else "inference"
        rows.append({"what": kind, "ours s": seconds["ours"], "transformers s": seconds["transformers"]})
        for name, model in sides.items():
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
                run_step(model, batch, train)
            bar.update()
            profiles[f"{name}, {kind}"] = profile.key_averages().table(sort_by="self_cpu_time_total",
                                                                        row_limit=args.profile_rows)
    return rows, profiles


# ---- 5. int8's dev scores ----

def dev_rows(run: str, data_dir: str, bar: Progress) -> list[dict]:
    """Each task of the run: its dev examples (those the run evaluated, from best/'s saved outputs) predicted in fp32
    and in int8, their metric and the pass's seconds."""
    predictors = {quantize: MultitaskPredictor.from_run(run, "cpu", precision="fp32" if quantize == "none" else
                                                        "auto", quantize=quantize) for quantize in ("none", "int8")}
    best = RunFolder(run).checkpoint()
    rows = []
    for task in predictors["none"].tasks:
        spec = REGISTRY[task]
        records = dev_records(data_dir, task, read_outputs(best / f"outputs-{task}-dev.pt", task)["ids"])
        examples = [(r.sentence1, r.sentence2) if spec.pair else r.sentence for r in records]
        labels = torch.tensor([float(r.label) for r in records])
        row = {"task": f"{task} ({spec.metric_name})", "examples": len(examples)}
        for name, predictor in (("fp32", predictors["none"]), ("int8", predictors["int8"])):
            start = time.perf_counter()
            row[f"{name} dev"] = spec.metric(predictor.soft_outputs(task, examples), labels)
            row[f"{name} s"] = time.perf_counter() - start
            bar.update()
        rows.append({**row, "int8 - fp32": row["int8 dev"] - row["fp32 dev"]})
    return rows


def markdown(rows: list[dict], ratios: dict[str, tuple[str, str]]) -> str:
    """rows as a markdown table, with each ratio a column: name -> (numerator column, denominator column)."""
    columns = list(rows[0]) + list(ratios)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        values = {**row, **{name: row[a] / row[b] for name, (a, b) in ratios.items()}}
        lines.append("| " + " | ".join(shown(values[column]) for column in columns) + " |")
    return "\n".join(lines)


def shown(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2e}" if 0 < abs(value) < 1e-3 else f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--minilm-batch", type=int, default=16, help="all-MiniLM-L6-v2's sentences per batch")
    parser.add_argument("--base-batch", type=int, default=8, help="the base-size encoder's sentences per batch")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per sentence (half of each batch: half as "
                                                                "many, the rest padding)")
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per side; the median is printed")
    parser.add_argument("--profile-rows", type=int, default=12, help="operators in each profile")
    parser.add_argument("--skip", nargs="*", default=[], choices=PARTS, help="parts left out: checkpointing (table "
                        "1), compile (2, most of the time), int8 (3), transformers (4)")
    parser.add_argument("--run", default="", help="a finished multitask run (e.g. the quick start's): its dev "
                                                  "scores with fp32 and int8 too (table 5)")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA), help="with --run: the course's data files")
    parser.add_argument("--out", default="", help="also write every table and profile as JSON to this file")
    parser.add_argument("--memory-probe", choices=SIZES, help=argparse.SUPPRESS)  # one side of table 1's memory
    parser.add_argument("--on", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_probe:
        return memory_probe(args.memory_probe, args.on, args.batch, args.tokens)
    log_to_stderr(logging.WARNING, progress_lines=True)
    parts = [part for part in PARTS if part not in args.skip]
    models = {size: build(size) for size in SIZES}
    batches = {"MiniLM": random_batch(args.minilm_batch, args.tokens),
               "base": random_batch(args.base_batch, args.tokens)}
    steps = {"checkpointing": len(SIZES) * (2 + 2 * (args.repeats + 1)),
             "compile": len(SIZES) * 2 * (2 + 2 * (args.repeats + 1)), "int8": len(SIZES) * 2 * (args.repeats + 1),
             "transformers": 2 * (2 * (args.repeats + 1) + 2)}
    dev_passes = 2 * len(model_config(RunFolder(args.run).checkpoint()).task_list) if args.run else 0
    bar = Progress(sum(steps[part] for part in parts) + dev_passes, "cpu_speed", unit="step")
    started = time.time()
    print(f"{processor()}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.1f} at the start")
    print(f"MiniLM: all-MiniLM-L6-v2, batch {args.minilm_batch} x {args.tokens} tokens; base: a random 12 x 768 "
          f"encoder, batch {args.base_batch} x {args.tokens}; half of each batch padded to {args.tokens // 2}; "
          f"median of {args.repeats} steps, fp32, our attention packed (the CPU's default)\n")
    results, profiles = {}, {}
    if "checkpointing" in parts:
        results["checkpointing"] = checkpointing_rows(models, batches, args, bar)
        print("Gradient checkpointing (on / off):\n" + markdown(results["checkpointing"], {
            "peak ratio": ("peak MB on", "peak MB off"), "step MB ratio": ("step MB on", "step MB off"),
            "time ratio": ("step s on", "step s off")}) + "\n", flush=True)
    if "compile" in parts:
        results["compile"] = compile_rows(models, batches, args, bar)
        print("--compile against eager (dropout off):\n" + markdown(results["compile"], {
            "compiled / eager": ("compiled s", "eager s")}) + "\n", flush=True)
    if "int8" in parts:
        results["int8"] = int8_rows(models, batches, args, bar)
        print("--quantize int8 against fp32, inference:\n" + markdown(results["int8"], {
            "int8 / fp32": ("int8 sentences/s", "fp32 sentences/s")}) + "\n", flush=True)
    if "transformers" in parts:
        results["transformers"], profiles = transformers_rows(args, batches["base"], bar)
        print("Ours against transformers.BertModel, base size:\n" + markdown(results["transformers"], {
            "ours / transformers": ("ours s", "transformers s")}) + "\n", flush=True)
        for name, table in profiles.items():
            print(f"Profile, {name} (top {args.profile_rows} operators by self CPU time):\n```\n{table}\n```\n")
    if args.run:
        results["dev"] = dev_rows(args.run, args.data_dir, bar)
        print(f"--quantize int8 against fp32, the dev sets of {args.run}:\n" + markdown(results["dev"], {
            "int8 / fp32 time": ("int8 s", "fp32 s")}) + "\n", flush=True)
    bar.close()
    print(f"{time.time() - started:.0f} s in all; load average {os.getloadavg()[0]:.1f} at the end")
    if args.out:
        Path(args.out).write_text(json.dumps({"tables": results, "profiles": profiles}, indent=1))
    return results


if __name__ == "__main__":
    main()
