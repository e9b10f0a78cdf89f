"""Training throughput of our encoder against a tuned `transformers` loop on the same batches.

The `transformers` side is what a careful user would write: BertModel with attn_implementation="sdpa",
torch.optim.AdamW(fused=True) on CUDA, the same autocast. Our side runs as the trainer runs it: told on the host
whether a batch is padded (BertModel.padding_known), so a step never waits for the GPU, and its AdamW fused into
one kernel on CUDA. Both sides train (dropout on) on the same batches:
fixed shapes without padding (e.g. 32 x 128), real ones (sentences drawn from the course's training files, so their
lengths, and their padding, are the course's) and the same real ones bucketed (each padded up to a multiple of 32
tokens, as the trainer's --length-buckets pads them on a GPU: a few shapes instead of one a length). Each
configuration prints tokens a second (real tokens, padding not counted), step time, MFU (the model's FLOPs,
attention included, over the GPU's dense bf16 peak) and peak memory; both sides for fp32 and bf16, ours padded and
packed, eager, compiled (torch.compile; static shapes a graph each, real batches dynamic) and as CUDA graphs
(torch.compile's "cudagraphs" backend, as the trainer's --cuda-graphs: fixed and bucketed batches, padded
attention; on a CPU it runs without graphs).

    python benchmarks/gpu_throughput.py --model /tmp/minilm --out results/throughput.json
    python benchmarks/gpu_throughput.py --shape tiny --model /tmp/minilm --device cpu --steps 2    # a smoke test

Prints a Markdown table (the last column: tokens a second as a ratio to `transformers` in the same
configuration) and writes the numbers as JSON (--out), rewritten after every configuration. A configuration that
fails (a compiler error, out of memory) is a row saying why; the others are still measured. A line as each
configuration ends; off a terminal, a progress line at least every 30 seconds besides (a compilation is long).
"""
import argparse
import contextlib
import itertools
import logging
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minbert.common.cli import resolve_device  # noqa: E402
from minbert.common.files import write_json  # noqa: E402
from minbert.common.progress import Progress, log_to_stderr  # noqa: E402
from minbert.common.tables import cell  # noqa: E402
from minbert.data.batching import Buckets  # noqa: E402
from minbert.models import AdamW, Tokenizer, compile_encoder, from_pretrained  # noqa: E402
from minbert.models.loading import resolve_checkpoint  # noqa: E402
from minbert.models.sentence_embedding import masked_mean  # noqa: E402
from minbert.models.tokenizer import collate  # noqa: E402
from minbert.tasks import COURSE_TASKS, REGISTRY  # noqa: E402

# Dense bf16 peaks in TFLOP/s from the vendors' data sheets (their "with sparsity" figures halved), matched in this
# order against torch.cuda.get_device_name(): the first name contained in it wins.
PEAK_BF16_TFLOPS = {"H100 PCIe": 756, "H100 NVL": 835, "H100": 989, "H200": 989, "GH200": 989, "A100": 312,
                    "L40S": 362, "L4": 121}
SHAPES = {  # the random model's shape (vocabulary: BERT's uncased WordPiece, the tokenizer's)
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
}
TRAIN_FILES = [(task, REGISTRY[task].files[0]) for task in COURSE_TASKS]
GRAPH_WARMUP = 3  # untimed steps of each shape of a setting compiled a shape at a time


@dataclass
class Setting:
    side: str  # ours | transformers
    precision: str  # fp32 | bf16 (autocast)
    attention: str  # ours: padded | packed; transformers: sdpa (padded, its own mask)
    compiled: bool
    batches: str  # a fixed shape such as 32x128, "real" or "bucketed"
    graphs: bool = False  # the layers' passes replayed as CUDA graphs (torch.compile's "cudagraphs" backend)


def training_flops(lengths: list[int], config) -> float:
    """FLOPs of one forward and backward pass (3x the forward's) over sentences of these real lengths, counting
    the matrix products: per token and layer, Q, K, V and the output projection (4 H^2 multiply-adds) and the
    feed-forward block (2 H I); per sentence of n tokens and layer, Q K^T and the attention-weighted sum of V
    (2 n^2 H). Embedding lookups, LayerNorm, softmax and the pooler are left out, as MFU counts do."""
    hidden, inner, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    tokens, square = sum(lengths), sum(n * n for n in lengths)
    multiply_adds = layers * (tokens * (4 * hidden * hidden + 2 * hidden * inner) + 2 * square * hidden)
    return 3 * 2 * multiply_adds


def dense_bf16_peak(device_name: str) -> float | None:
    """The data sheet's dense bf16 TFLOP/s of a GPU named as torch names it, None for one not in the table."""
    return next((peak for key, peak in PEAK_BF16_TFLOPS.items() if key in device_name), None)


def describe(device: torch.device, override: float | None) -> tuple[str, float | None]:
    """(the device's name, its dense bf16 peak: `override`, else the data sheet's, else None)."""
    if device.type != "cuda":
        return f"CPU ({torch.get_num_threads()} threads)", override
    name = torch.cuda.get_device_name(device)
    return name, override or dense_bf16_peak(name)


def random_checkpoint(shape: dict, folder: Path) -> Path:
    """A BERT of `shape` with random weights, written by transformers, so both sides load the same tensors."""
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(**shape)).save_pretrained(folder)
    return folder


def real_batches(tokenizer: Tokenizer, data: Path, count: int, batch_size: int, max_length: int,
                 seed: int) -> list[dict]:
    """`count` padded batches of sentences drawn at random from the course's training files (every sentence of
    SST, Quora and STS, pairs split into their two sentences)."""
    sentences = []
    for task, file in TRAIN_FILES:
        for record in REGISTRY[task].read(data / file, labeled=True):
            sentences += [record.sentence] if hasattr(record, "sentence") else [record.sentence1, record.sentence2]
    drawn = random.Random(seed).sample(sentences, count * batch_size)
    encoded = tokenizer.encode(drawn, max_length=max_length, source=None)
    return [collate(encoded[i:i + batch_size], tokenizer.pad_id) for i in range(0, len(encoded), batch_size)]


def bucketed(batch: dict, max_length: int, pad_id: int) -> dict:
    """`batch` padded up to its bucket's width, as the trainer's --length-buckets pads it."""
    width = Buckets(max_length).width(batch["input_ids"].shape[1])
    fill = {"input_ids": pad_id, "attention_mask": 0, "token_type_ids": 0}
    return {name: F.pad(tensor, (0, width - tensor.shape[1]), value=fill[name]) for name, tensor in batch.items()}


def has_padding(batch: dict) -> bool:
    """Read on the host, before the batch goes to the device (as the trainer knows it from its batching)."""
    return not bool(batch["attention_mask"].all())


def fixed_batch(shape: str, vocab_size: int) -> dict:
    rows, tokens = map(int, shape.split("x"))
    generator = torch.Generator().manual_seed(0)
    # Ids above BERT's special and unused tokens (the first 1000 of its vocabulary).
    return {"input_ids": torch.randint(min(1000, vocab_size - 1), vocab_size, (rows, tokens), generator=generator),
            "attention_mask": torch.ones(rows, tokens, dtype=torch.long),
            "token_type_ids": torch.zeros(rows, tokens, dtype=torch.long)}


def build(setting: Setting, folder: Path, device: torch.device):
    """(model, optimizer) of one side, on `device`, in training mode."""
    static = setting.batches != "real"  # fixed or bucketed: a few shapes, a graph each
    if setting.side == "ours":
        model = from_pretrained(folder).to(device).train()
        model.attention = setting.attention
        if setting.compiled or setting.graphs:
            compile_encoder(model, static_shapes=static, cuda_graphs=setting.graphs, inductor=setting.compiled)
        return model, AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")  # as the trainers choose
    model = transformers.BertModel.from_pretrained(folder, attn_implementation="sdpa").to(device).train()
    if setting.graphs:
        model.compile(backend="cudagraphs", dynamic=False)
    elif setting.compiled:
        model.compile(dynamic=not static)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")


def measure(setting: Setting, folder: Path, batches: list[tuple[dict, bool]], args) -> dict:
    """Seconds, tokens and FLOPs of `args.steps` training steps after `args.warmup` untimed ones (compiling
    happens there; a setting compiled a shape at a time adds GRAPH_WARMUP of each shape), cycling through
    `batches`: (batch on the device, whether it has padding)."""
    device = args.device
    model, optimizer = build(setting, folder, device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=setting.precision == "bf16")
    # Ours as the trainer runs it: the padding known on the host. transformers has no such switch.
    known = model.padding_known if setting.side == "ours" else lambda padded: contextlib.nullcontext()

    def step(batch_and_padding):
        batch, padded = batch_and_padding
        with autocast, known(padded):
            hidden = model(**batch).last_hidden_state
        # The same loss on both sides, over real tokens only (the packed path leaves zeros at padding).
        masked_mean(hidden.float(), batch["attention_mask"]).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for i in range(args.warmup):
        step(batches[i % len(batches)])
    if setting.graphs or (setting.compiled and setting.batches != "real"):
        # A graph a shape: each shape compiled (and its CUDA graph warmed up, recorded, replayed once: torch's graph
        # trees record at a shape's second call) before the clock starts.
        by_shape = {tuple(batch["input_ids"].shape): (batch, padded) for batch, padded in batches}
        for _ in range(GRAPH_WARMUP):
            for batch_and_padding in by_shape.values():
                step(batch_and_padding)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for i in range(args.steps):
        step(batches[i % len(batches)])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    timed = [batches[i % len(batches)][0] for i in range(args.steps)]
    lengths = [n for batch in timed for n in batch["attention_mask"].sum(1).tolist()]
    return {"seconds": seconds, "tokens": sum(lengths), "flops": training_flops(lengths, model.config),
            "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}


def settings(args) -> list[Setting]:
    """Every configuration asked for: ours in each attention, transformers with its own (sdpa); a fixed shape has
    no padding, so there ours runs padded only (packed would be the same computation). CUDA graphs need a few
    static shapes: fixed and bucketed batches, padded attention (packed rows change with each batch's tokens)."""
    found = []
    for batches, precision, mode, side in itertools.product(args.batch_kinds, args.precisions, args.compile,
                                                            args.sides):
        for attention in (args.attention if side == "ours" else ["sdpa"]):
            fixed, padded = batches not in ("real", "bucketed"), attention in ("padded", "sdpa")
            if fixed and not padded:
                continue  # nothing to pack
            if mode == "graphs" and (batches == "real" or not padded):
                continue  # a shape a batch, or rows a batch: a graph a step
            found.append(Setting(side, precision, attention, mode == "compiled", batches, mode == "graphs"))
    return found


def markdown(rows: list[dict]) -> str:
    lines = ["| model | side | precision | attention | compile | batches | tokens/s | step ms | MFU % | peak GiB "
             "| vs transformers |", "|" + " --- |" * 11]
    for r in rows:
        if "error" in r:
            cells = [cell(r["error"])] + [""] * 4
        else:
            cells = [f"{r['tokens_per_s']:,.0f}", f"{r['step_ms']:.1f}",
                     "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}",
                     "n/a" if r["peak_memory_gib"] is None else f"{r['peak_memory_gib']:.2f}",
                     "n/a" if r.get("vs_transformers") is None else f"{r['vs_transformers']:.2f}"]
        mode = "CUDA graphs" if r.get("graphs") else "compiled" if r["compiled"] else "eager"
        lines.append("| " + " | ".join([r["model"], r["side"], r["precision"], r["attention"], mode, r["batches"],
                                        *cells]) + " |")
    return "\n".join(lines)


def comma_list(choices: tuple[str, ...] | None = None):
    def parse(text: str) -> list[str]:
        items = [item for item in text.split(",") if item]
        wrong = [item for item in items if choices and item not in choices]
        if wrong or not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(choices or ['...'])}")
        return items
    return parse


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2",
                        help="a checkpoint to measure besides the random model: folder, hub id or all-MiniLM-L6-v2 "
                             "('none': only the random model) (default: %(default)s)")
    parser.add_argument("--model-name", default="",
                        help="what the table calls --model (default: --model as given; a folder's path names "
                             "where it lies, not what it is)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="bert-base",
                        help="the shape of the random model, measured first: bert-base (12 layers, hidden 768), or tiny "
                             "(a few-second check on a CPU) (default: %(default)s)")
    parser.add_argument("--hidden", type=int, help="hidden size of the random model, instead of the shape's")
    parser.add_argument("--layers", type=int, help="number of layers of the random model, instead of the shape's")
    parser.add_argument("--heads", type=int, help="attention heads of the random model, instead of the shape's")
    parser.add_argument("--intermediate", type=int,
                        help="feed-forward width of the random model, instead of the shape's (default: 4 x hidden)")
    parser.add_argument("--tokenizer",
                        help="whose tokenizer cuts the real sentences into tokens, a folder or a name as --model takes "
                             "(default: --model's; with --model none, give one with BERT's uncased vocabulary)")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data",
                        help="the folder of the course's data files (default: ../shared/data)")
    parser.add_argument("--fixed", type=comma_list(), default=["32x128"],
                        help="fixed batch shapes ROWSxTOKENS without padding, comma-separated (default: 32x128)")
    parser.add_argument("--real-batches", type=int, default=20,
                        help="how many batches of real sentences to cycle through (0: none) (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per real batch (default: %(default)s)")
    parser.add_argument("--max-length", type=int, default=128,
                        help="real sentences are cut to this many tokens (default: %(default)s)")
    parser.add_argument("--precisions", type=comma_list(("fp32", "bf16")), default=["fp32", "bf16"],
                        help="fp32 and/or bf16 (autocast), comma-separated (default: fp32,bf16)")
    parser.add_argument("--attention", type=comma_list(("padded", "packed")), default=["padded", "packed"],
                        help="how our encoder runs padded batches (multitask_classifier.py --attention), "
                             "comma-separated (default: padded,packed)")
    parser.add_argument("--compile", type=comma_list(("eager", "compiled", "graphs")), default=["eager", "compiled"],
                        help="eager, compiled (torch.compile, both sides) and/or graphs (CUDA graphs, torch.compile's "
                             "cudagraphs backend), comma-separated (default: eager,compiled)")
    parser.add_argument("--bucketed", action=argparse.BooleanOptionalAction, default=True,
                        help="also the real batches bucketed (each padded up to a multiple of 32 tokens, as "
                             "--length-buckets pads them) (default: on)")
    parser.add_argument("--sides", type=comma_list(("ours", "transformers")), default=["ours", "transformers"],
                        help="which implementations to measure (default: ours,transformers)")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per configuration "
                                                              "(default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps first (compiling happens there) (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="cuda, cpu, ... (auto: cuda when present)")
    parser.add_argument("--peak-tflops", type=float,
                        help="the device's dense bf16 peak in TFLOP/s, for MFU (default: known GPUs' data sheets; "
                             "on a CPU, no MFU unless given)")
    parser.add_argument("--seed", type=int, default=0, help="which real sentences are drawn (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="also write the numbers here as JSON")
    args = parser.parse_args(argv)
    if min(args.steps, args.batch_size, args.max_length) < 1 or min(args.warmup, args.real_batches) < 0:
        parser.error("--steps, --batch-size and --max-length must be >= 1; --warmup and --real-batches >= 0")
    if any(len(shape.split("x")) != 2 or not all(n.isdigit() and int(n) for n in shape.split("x"))
           for shape in args.fixed):
        parser.error(f"--fixed takes shapes like 32x128, got {','.join(args.fixed)}")
    args.batch_kinds = args.fixed + (["real"] + ["bucketed"] * args.bucketed if args.real_batches else [])
    args.tokenizer = args.tokenizer or (None if args.model == "none" else args.model)
    if args.real_batches and args.tokenizer is None:
        parser.error("--model none measures real batches with --tokenizer FOLDER (or use --real-batches 0)")
    return args


def main(argv=None):
    args = parse_args(argv)
    log_to_stderr(logging.WARNING, progress_lines=True)
    args.device = resolve_device(args.device)
    device_name, peak = describe(args.device, args.peak_tflops)
    tokenizer = Tokenizer.from_pretrained(args.tokenizer) if args.real_batches else None
    real = real_batches(tokenizer, args.data, args.real_batches, args.batch_size, args.max_length,
                        args.seed) if args.real_batches else []
    batch_sets = {"real": real, "bucketed": [bucketed(batch, args.max_length, tokenizer.pad_id) for batch in real]}
    shape = dict(SHAPES[args.shape])
    for key, flag in (("hidden_size", "hidden"), ("num_hidden_layers", "layers"), ("num_attention_heads", "heads"),
                      ("intermediate_size", "intermediate")):
        shape[key] = getattr(args, flag) or shape[key]
    if args.hidden and not args.intermediate:
        shape["intermediate_size"] = 4 * args.hidden
    print(f"{device_name}; dense bf16 peak {f'{peak:g} TFLOP/s' if peak else 'unknown (no MFU)'}; torch "
          f"{torch.__version__}, transformers {transformers.__version__}; {args.steps} steps after {args.warmup}",
          flush=True)
    rows = []
    header = {"device": device_name, "peak_bf16_tflops": peak, "torch": torch.__version__,
              "transformers": transformers.__version__, "steps": args.steps, "warmup": args.warmup}
    with tempfile.TemporaryDirectory() as temp:
        shape_name = args.shape if shape == SHAPES[args.shape] else "random " + "/".join(
            str(shape[k]) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size"))
        models = [(f"{shape_name} (random)", random_checkpoint(shape, Path(temp)))]
        if args.model != "none":
            models.append((args.model_name or args.model, resolve_checkpoint(args.model)))
        configurations = settings(args)
        bar = Progress(len(models) * len(configurations), "gpu_throughput", unit="configuration")
        for model_name, folder in models:
            vocab_size = transformers.BertConfig.from_pretrained(folder).vocab_size
            on_device = {kind: [({k: v.to(args.device) for k, v in b.items()}, has_padding(b))
                                for b in (batch_sets[kind] if kind in batch_sets else [fixed_batch(kind, vocab_size)])]
                         for kind in args.batch_kinds}
            for setting in configurations:
                rows.append(measured_row({"model": model_name, **vars(setting)}, setting, folder,
                                         on_device[setting.batches], args, peak))
                compare_with_transformers(rows)
                if args.out:  # as it goes: a session cut short keeps every configuration measured so far
                    write_json(args.out, {**header, "rows": rows})
                bar.update()
        bar.close()
    print(f"\n{device_name}; MFU against " + (f"{peak:g} TFLOP/s dense bf16\n" if peak else "no known peak "
                                                "(--peak-tflops)\n"))
    print(markdown(rows))


def measured_row(row: dict, setting: Setting, folder: Path, batches: list[tuple[dict, bool]], args,
                 peak: float | None) -> dict:
    """`row` with the setting's numbers, or with "error": why it could not be measured."""
    if setting.compiled or setting.graphs:  # each starts from nothing, not from the last one's graphs and guards
        torch._dynamo.reset()
    try:
        result = measure(setting, folder, batches, args)
    except Exception as error:  # a compiler error, out of memory, unpadding impossible here: say so, go on
        lines = str(error).strip().splitlines()
        reason = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
        print(f"{row['model']} {setting}: {reason}", flush=True)
        return {**row, "error": reason}
    finally:
        if args.device.type == "cuda":
            torch.cuda.empty_cache()
    achieved = result["flops"] / result["seconds"]
    print(f"{row['model']} {setting}: {result['tokens'] / result['seconds']:,.0f} tokens/s", flush=True)
    return {**row, **result, "tokens_per_s": result["tokens"] / result["seconds"],
            "step_ms": 1000 * result["seconds"] / args.steps, "tflops": achieved / 1e12,
            "mfu": achieved / (peak * 1e12) if peak else None}


def compare_with_transformers(rows: list[dict]) -> None:
    """Each measured row's vs_transformers: its tokens a second over transformers' in the same configuration (None
    until that one is measured, or where it failed)."""
    def configuration(r):
        return r["model"], r["precision"], r["compiled"], r.get("graphs", False), r["batches"]

    reference = {configuration(r): r["tokens_per_s"] for r in rows if r["side"] == "transformers" and "error" not in r}
    for r in rows:
        if "error" not in r:
            theirs = reference.get(configuration(r))
            r["vs_transformers"] = r["tokens_per_s"] / theirs if theirs else None


if __name__ == "__main__":
    main()
