"""Data-parallel training on CPU with the gloo backend: two processes must train exactly as one process with the
whole batch does (dropout off, so that splitting a batch changes nothing but who computes what), log what it logs,
draw dropout masks of their own, and need no disk in common."""
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file

from minbert import checkpoint
from minbert.common import distributed
from minbert.data.contrastive import PairBatch
from minbert.data.silver import SilverSet
from minbert.models import AdamW, BertConfig, BertModel, pool
from tests.conftest import multitask_argv, sentence, write_course_files
from minbert.engine.ddp import DataParallel, start_replicas
from minbert.training.objectives import SimCSE
from minbert.tasks import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
PAIRS, WORLD = 16, 2


# ---- common/distributed.py in one process ----

def test_the_rank_is_asked_only_after_joining_the_process_group(monkeypatch):
    """Before setup every torchrun process would take itself for rank 0 (and, say, recover the output folder)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    for question in (distributed.rank, distributed.is_main, distributed.world_size):
        with pytest.raises(RuntimeError, match="before joining"):
            question()


def test_a_world_of_one_keeps_the_random_stream_of_its_seed():
    """A single-process run draws the dropout masks it drew before: start_replicas leaves its stream alone."""
    model = torch.nn.Linear(2, 2)
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    start_replicas([model], seed=3)
    assert torch.equal(torch.rand(4), expected)


# ---- two processes (spawned), against one with the whole batch ----

def simcse_and_batch():
    """A tiny SimCSE model (projection MLP included) and 16 Quora-style pairs, half of them negatives."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    objective = SimCSE(BertModel(config), pooling="cls", projection=True)
    generator = torch.Generator().manual_seed(1)

    def inputs():
        ids = torch.randint(1, 50, (PAIRS, 7), generator=generator)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}

    labels = torch.tensor([1.0, 0.0] * (PAIRS // 2))
    return objective, PairBatch("quora", inputs(), inputs(), labels)


def rows(batch: PairBatch, start: int, end: int) -> PairBatch:
    cut = lambda inputs: {k: v[start:end] for k, v in inputs.items()}  # noqa: E731
    return PairBatch(batch.source, cut(batch.first), cut(batch.second), batch.labels[start:end])


# 16 pairs shared out unevenly (11 and 5): torch.distributed.nn's all_gather needs one shape on every process.
PAIR_SHARES = (11, 5)


def loss_and_gradients(module, batch):
    loss = module(batch)
    loss.backward()
    return loss.detach(), {name.removeprefix("module."): p.grad.clone() for name, p in module.named_parameters()
                           if p.grad is not None}


def contrastive_worker(rank: int, init_file: str, out: str):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    objective, batch = simcse_and_batch()
    start = sum(PAIR_SHARES[:rank])
    mine = rows(batch, start, start + PAIR_SHARES[rank])
    torch.save(loss_and_gradients(DataParallel(objective, list(objective.parameters())).module, mine),
               f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


def finishing_worker(rank: int, init_file: str, out: str):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    dist.all_reduce(torch.ones(3))  # the group has worked, as a run's has
    Path(out, f"before{rank}").touch()
    distributed.exit_finished_process()
    Path(out, f"after{rank}").touch()  # never reached


def test_a_finished_process_leaves_the_group_and_exits_at_once_with_code_0(tmp_path):
    """What ends every torchrun command (common.cli.run): both processes exit with 0 (mp.spawn raises otherwise)
    right there, past nothing that Python's finalization would run."""
    mp.spawn(finishing_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD)
    assert sorted(path.name for path in tmp_path.glob("*") if path.name != "init") == ["before0", "before1"]


def test_all_gathered_negatives_give_the_loss_and_gradients_of_one_big_batch(tmp_path):
    """2 processes x 11 and 5 pairs through DDP, embeddings all-gathered = 1 process x 16 pairs."""
    mp.spawn(contrastive_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD)
    objective, batch = simcse_and_batch()
    loss, gradients = loss_and_gradients(objective, batch)
    for rank in range(WORLD):
        rank_loss, rank_gradients = torch.load(tmp_path / f"rank{rank}.pt")
        torch.testing.assert_close(rank_loss, loss, atol=1e-5, rtol=1e-5)
        assert rank_gradients.keys() == gradients.keys()
        for name, gradient in gradients.items():
            torch.testing.assert_close(rank_gradients[name], gradient, atol=1e-5, rtol=1e-4, msg=name)


# Each step's batch of 8 rows, shared out unevenly: rank 0 has 5, rank 1 has 3; each process adds up its rows'
# gradients in two accumulation parts (3 + 2, 2 + 1).
ROWS = (5, 3)
STEPS = 3


class EncoderAndUnusedHead(torch.nn.Module):
    """A tiny encoder without dropout, and a head no step uses (as a task's head on another task's step); forward:
    the mean over the rows of each row's squared mean-pooled embedding."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        torch.manual_seed(0)
        config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=dropout,
                            attention_probs_dropout_prob=0.0)
        self.encoder, self.unused = BertModel(config), torch.nn.Linear(4, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
        return pool(self.encoder(**inputs), inputs["attention_mask"], "mean").pow(2).sum(-1).mean()


def step_batch(step: int) -> torch.Tensor:
    return torch.randint(1, 50, (sum(ROWS), 7), generator=torch.Generator().manual_seed(step))


def train_steps(model, rank: int, passes_apart: bool = False, **ddp) -> dict:
    """STEPS AdamW steps on this process's rows in two accumulation parts, each loss weighed by its share of the
    step's rows, as the engine runs them (engine.ddp.DataParallel). Returns the first step's averaged
    gradients, and the final weights."""
    data_parallel = DataParallel(model, list(model.parameters()), passes_apart, **ddp)
    optimizer = AdamW(model.parameters(), lr=1e-2)
    start, first = sum(ROWS[:rank]), None
    for step in range(STEPS):
        mine = step_batch(step)[start:start + ROWS[rank]]
        passes = (mine[:(len(mine) + 1) // 2], mine[(len(mine) + 1) // 2:])
        for index, ids in enumerate(passes):
            with data_parallel.part(last=index == 1):
                (WORLD * len(ids) / sum(ROWS) * data_parallel.module(ids)).backward()  # weighed as Share does
        data_parallel.average()
        first = first or {name: p.grad.clone() if p.grad is not None else None for name, p in model.named_parameters()}
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {"first gradients": first, "weights": {k: v.clone() for k, v in model.state_dict().items()}}


def data_parallel_worker(rank: int, init_file: str, out: str):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    results = {way: train_steps(EncoderAndUnusedHead(), rank, **options) for way, options in DDP_WAYS.items()}
    checkpointed = EncoderAndUnusedHead()  # --gradient-checkpointing: each layer's forward again in DDP's backward
    checkpointed.encoder.encoder.gradient_checkpointing = True
    results["checkpointing"] = train_steps(checkpointed, rank)
    # A profile of one more step of small buckets: the buckets' all_reduces and the backward pass's functions.
    model = EncoderAndUnusedHead()
    data_parallel = DataParallel(model, list(model.parameters()), bucket_mb=BUCKET_MB)
    for step in range(2):  # DDP orders its buckets by the first step's gradients: the profiled step is the second
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            data_parallel.module(step_batch(step)[:4]).backward()
        model.zero_grad(set_to_none=True)
    results["trace"] = [(event.name, event.time_range.start, event.time_range.end) for event in profile.events()]
    # Dropout on: each process draws its own masks (start_replicas's streams).
    start_replicas([model], seed=3)
    results["mask"] = torch.nn.functional.dropout(torch.ones(100), 0.5)
    torch.save(results, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


BUCKET_MB = 0.002  # 2 kB: the tiny encoder's 20 kB of gradients in about a dozen buckets
DDP_WAYS = {"DDP": {}, "small buckets": {"bucket_mb": BUCKET_MB}, "passes apart": {"passes_apart": True},
            "bf16": {"compress": "bf16"}}


@pytest.fixture(scope="module")
def data_parallel_runs(tmp_path_factory):
    """Each process's results of train_steps, each way; and one process's, with the whole batches."""
    folder = tmp_path_factory.mktemp("data-parallel")
    mp.spawn(data_parallel_worker, args=(str(folder / "init"), str(folder)), nprocs=WORLD)
    model = EncoderAndUnusedHead()
    optimizer, first = AdamW(model.parameters(), lr=1e-2), None
    for step in range(STEPS):
        model(step_batch(step)).backward()
        first = first or {name: p.grad.clone() if p.grad is not None else None for name, p in model.named_parameters()}
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return [torch.load(folder / f"rank{rank}.pt") for rank in range(WORLD)], {"first gradients": first,
                                                                              "weights": model.state_dict()}


# fp32 sums in another order: the gradients of two processes' rows are added up by the all_reduce, not by one
# backward pass (reductions over 8 rows, then 2 terms). A sum of n terms moves by up to about n eps of the sum of
# their magnitudes; a tiny encoder's gradients are sums of a few hundred products (64-wide matrix products, 8 rows,
# 2 layers), so 512 eps relative, and an absolute floor at that times their typical size (1e-2).
GRADIENT_RTOL = 512 * torch.finfo(torch.float32).eps
GRADIENT_ATOL = 1e-2 * GRADIENT_RTOL


def test_uneven_shares_averaged_by_ddp_give_the_gradients_and_weights_of_one_process_with_the_whole_batch(
        data_parallel_runs):
    """5 + 3 rows in 2 accumulation parts (the first under no_sync), by DDP's buckets as the pass runs, by small
    buckets, apart (PCGrad, gradient caching) and averaged in one all_reduce, or with the layers checkpointed: one
    process with the 8 rows."""
    ranks, whole = data_parallel_runs
    for result in ranks:
        for way in ("DDP", "small buckets", "passes apart", "checkpointing"):
            gradients = result[way]["first gradients"]
            assert gradients["unused.weight"] is None, "a parameter no pass reaches stays without a gradient"
            for name, gradient in whole["first gradients"].items():
                if gradient is None:
                    assert gradients[name] is None, name
                else:
                    torch.testing.assert_close(gradients[name], gradient, atol=GRADIENT_ATOL, rtol=GRADIENT_RTOL,
                                               msg=f"{way}: {name}")
    # Then the weights: AdamW divides by the root of its second moment, so a gradient that is rounding noise
    # (a key bias's: softmax ignores it) moves a weight by up to lr in any direction; they are compared exactly
    # between the ways and the processes instead. The average of two processes' gradients is exact however it is
    # sent (a sum of two fp32 numbers, halved), so every way ends with the same weights on both processes; a
    # checkpointed layer's forward runs again with the same kernels on the same inputs, so its gradients are too.
    for result in ranks:
        for way in ("small buckets", "passes apart", "checkpointing"):
            assert_same_weights(result[way]["weights"], ranks[0]["DDP"]["weights"], atol=0)


def local_gradients(rank: int) -> dict[str, torch.Tensor]:
    """The first step's gradients of one process's rows alone, weighed as its share (before any averaging)."""
    model = EncoderAndUnusedHead()
    start = sum(ROWS[:rank])
    (WORLD * ROWS[rank] / sum(ROWS) * model(step_batch(0)[start:start + ROWS[rank]])).backward()
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def test_gradients_compressed_to_bf16_stay_within_bf16_rounding_of_the_uncompressed(data_parallel_runs):
    """--ddp-compress bf16 (DDP's bf16_compress_hook): each process's gradient g_r rounded to bf16 and halved
    (exact), the halves summed and the sum rounded to bf16, copied back to fp32. bf16 keeps 8 significant bits, so
    a rounding to the nearest moves a value by at most u = 2^-8 of it (bf16's epsilon, 2^-7, halved): the average
    moves from the uncompressed one a by at most u (|g_0| + |g_1|) / 2 + u |a| (1 + 2u)."""
    ranks, _ = data_parallel_runs
    u = torch.finfo(torch.bfloat16).eps / 2
    local = [local_gradients(rank) for rank in range(WORLD)]
    for result in ranks:
        compressed, uncompressed = result["bf16"]["first gradients"], result["DDP"]["first gradients"]
        assert any(not torch.equal(compressed[name], uncompressed[name]) for name in local[0]), "sent in bf16"
        for name in local[0]:
            a = uncompressed[name]
            bound = u * (local[0][name].abs() + local[1][name].abs()) / 2 + u * a.abs() * (1 + 2 * u)
            assert ((compressed[name] - a).abs() <= bound).all(), name
        assert compressed["unused.weight"] is None


def test_ddp_sends_buckets_while_the_backward_pass_runs(data_parallel_runs):
    """The profile of one step of small buckets: an all_reduce starts before the backward pass's last function
    that computes a gradient (the embeddings', which it reaches last) ends. Events in order, not timings. (With
    one bucket, the all_reduce would start in the hook of the last gradient written, after it.)"""
    for result in data_parallel_runs[0]:
        trace = result["trace"]
        all_reduces = [start for name, start, _ in trace if "all_reduce" in name or "allreduce" in name]
        backward_ends = [end for name, _, end in trace if name.startswith("autograd::engine::evaluate_function")
                         and "AccumulateGrad" not in name]
        assert all_reduces and backward_ends, sorted({name for name, *_ in trace})
        assert min(all_reduces) < max(backward_ends)


def test_with_dropout_each_process_draws_its_own_masks(data_parallel_runs):
    ranks, _ = data_parallel_runs
    assert not torch.equal(ranks[0]["mask"], ranks[1]["mask"])


# ---- multitask_classifier.py under torchrun ----

@pytest.fixture(scope="module")
def data_48(tmp_path_factory):
    """48 training examples a task: three batches of 16."""
    return write_course_files(tmp_path_factory.mktemp("data-48"), random.Random(0), train_rows=48)


@pytest.fixture(scope="module")
def data_17(tmp_path_factory):
    """17 training examples a task: a batch of 16, then a batch of one example, which one of two processes lacks."""
    return write_course_files(tmp_path_factory.mktemp("data-17"), random.Random(1), train_rows=17)


def multitask_args(model, data, out: Path, batch_size: int, *extra) -> list[str]:
    return multitask_argv(model, data, out, "--batch-size", str(batch_size), "--epochs", "1", "--schedule", "avg",
                          "--head-dropout", "0", *extra)


# One thread a process unless the caller sets OMP_NUM_THREADS (the suite is also run with other counts).
ENV = {"OMP_NUM_THREADS": "1", **os.environ}


def run(*command, env=None):
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env={**ENV, **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def torchrun(*args):
    return run(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(WORLD), *args)


def start_two_machines(script: Path, args: list[str], folders: list[Path], logs: Path,
                       workers_apart: bool = False) -> list[subprocess.Popen]:
    """Two torchrun invocations, as on two machines of one process each that share no disk: each runs in its own
    working folder (relative paths in `args` land there). Static rendezvous: node 0, the master, runs rank 0.
    Each one's output goes to logs/node{n}.log; with workers_apart, its worker's stderr to
    logs/node{n}-worker/.../stderr.log instead (worker_stderr)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    logs.mkdir(exist_ok=True)
    nodes = []
    for node, folder in enumerate(folders):
        folder.mkdir(exist_ok=True)
        with open(logs / f"node{node}.log", "w") as log:
            nodes.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
                 "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
                 *(["--log-dir", str(logs / f"node{node}-worker"), "--redirects", "2"] if workers_apart else []),
                 str(script), *args], cwd=folder, stdout=log, stderr=subprocess.STDOUT, env=ENV))
    return nodes


def worker_stderr(logs: Path, node: int) -> list[str]:
    """What the worker of a node started with workers_apart wrote on stderr, but for its log records."""
    text = next((logs / f"node{node}-worker").rglob("stderr.log")).read_text()
    return [line for line in text.splitlines() if not line.startswith(("INFO ", "WARNING "))]


def two_machines(script: Path, args: list[str], folders: list[Path], logs: Path) -> list[int]:
    """start_two_machines, and their exit codes."""
    return [node.wait(timeout=600) for node in start_two_machines(script, args, folders, logs)]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    last = out / "run" / "last"
    return {**load_file(last / "model.safetensors"), **load_file(last / checkpoint.HEADS)}


def assert_same_weights(a: dict, b: dict, atol=1e-5):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=1e-4 if atol else 0, msg=name)


def metrics(metrics_file: Path, event: str) -> list[dict]:
    return [line for line in map(json.loads, metrics_file.read_text().splitlines()) if line["event"] == event]


# How far one fp32 value may move when two processes compute what one process computes: the rows of a batch go
# through matrix products of other shapes, whose kernels add up in other orders. Each of the tiny encoder's
# products (2 layers, 4 a layer, reductions of up to 64 terms) rounds by about sqrt(64) ulps; the relative error of
# an embedding, a cosine or a logit is then at most about 2 * 4 * 8 eps, and we allow 4 times that.
TINY_ROUNDING = 4 * (2 * 4 * 8) * torch.finfo(torch.float32).eps


def loss_tolerance(loss: float, scale: float) -> float:
    """How far a logged mean loss may move by rounding, for a loss on model outputs that carry TINY_ROUNDING times
    `scale` of absolute error. A squared error L = mean((s - gold)^2) moves by at most 2 sqrt(L) ds + ds^2 (by
    Cauchy-Schwarz); a cross-entropy moves by at most 2 dz (its gradient in the logits has an L1 norm below 2)."""
    error = TINY_ROUNDING * scale
    return max(2 * math.sqrt(loss) * error + error ** 2, 2 * error)


def output_scales(run: Path) -> dict[str, float]:
    """How much each task's head amplifies an error of its cosine or logit into its score: 5 / (1 - M) for
    cosine-range STS (score = 5 (cos - M) / (1 - M)), 1 for the others."""
    heads = load_file(run / "last" / checkpoint.HEADS)
    floors = [tensor.item() for name, tensor in heads.items() if name.endswith("cosine_floor")]
    return {"sts": 5 / (1 - floors[0])} if floors else {}


def assert_same_losses(a: list[dict], b: list[dict], key="loss", scales: dict[str, float] | float = 1.0):
    """The same steps logged, with the same losses up to rounding (each task's, or the one loss); scales: each
    loss's output scale (output_scales), or one for all."""
    assert [line["step"] for line in a] == [line["step"] for line in b] and a
    for line_a, line_b in zip(a, b):
        losses_a, losses_b = line_a[key], line_b[key]
        if not isinstance(losses_a, dict):
            losses_a, losses_b = {"loss": losses_a}, {"loss": losses_b}
        assert losses_a.keys() == losses_b.keys(), line_a["step"]
        for name, loss in losses_a.items():
            scale = scales.get(name, 1.0) if isinstance(scales, dict) else scales
            tolerance = loss_tolerance(loss, scale)
            assert losses_b[name] == pytest.approx(loss, abs=tolerance), (line_a["step"], name)


@pytest.mark.parametrize("schedule", ["avg", "rr-batch", "rr-epoch", "sequential", "mtdnn", "avg --combine pcgrad"])
def test_two_processes_train_like_one_with_the_whole_batch(tiny_model_without_dropout, data_48, tmp_path, schedule):
    """Each schedule's steps (avg: every task each step; with --combine pcgrad, PCGrad's per-task passes apart
    from DDP and its task gradients averaged before the surgery; the others: one task a step, the other heads
    unused): 2 ranks x 8 examples a task = 1 process x 16, over the same examples; and each step's logged losses
    are the whole batch's."""
    model, flags = tiny_model_without_dropout, ("--log-every", "1", "--schedule", *schedule.split())
    if schedule == "sequential":  # an epoch a task
        flags += ("--epochs", "3")
    if "pcgrad" in schedule:  # two tasks: PCGrad's projection of three draws a random order (torch.randperm)
        flags += ("--tasks", "sst,para")
    torchrun("multitask_classifier.py", *multitask_args(model, data_48, tmp_path / "two", 8, *flags))
    run(sys.executable, "multitask_classifier.py", *multitask_args(model, data_48, tmp_path / "one", 16, *flags))
    initial = load_file(Path(model) / "model.safetensors")
    two, one = final_weights(tmp_path / "two"), final_weights(tmp_path / "one")
    assert not torch.equal(two["encoder.layer.0.attention.self.query.weight"],
                           initial["encoder.layer.0.attention.self.query.weight"]), "the runs trained"
    assert_same_weights(two, one)
    assert_same_losses(metrics(tmp_path / "two/run/metrics.jsonl", "train"),
                       metrics(tmp_path / "one/run/metrics.jsonl", "train"), scales=output_scales(tmp_path / "one/run"))
    # Only rank 0 writes: one metrics line per evaluation, the leaderboard files once.
    assert len(metrics(tmp_path / "two/run/metrics.jsonl", "eval")) == len(
        metrics(tmp_path / "one/run/metrics.jsonl", "eval")) == (3 if schedule == "sequential" else 1)
    assert sorted(p.name for p in (tmp_path / "two" / "predictions").iterdir()) == sorted(
        p.name for p in (tmp_path / "one" / "predictions").iterdir())


def test_two_processes_train_with_silver_examples_like_one_with_the_whole_batch(tiny_model_without_dropout, data_48,
                                                                               tmp_path):
    """--silver: each step's silver batch (half the gold one) shared out between the ranks as the gold batch is."""
    rng, silver = random.Random(2), tmp_path / "silver"
    silver.mkdir()
    for task in ("sst", "para", "sts"):
        spec = REGISTRY[task]
        texts = [tuple(sentence(rng) for _ in range(2 if spec.pair else 1)) for _ in range(20)]
        soft = (torch.rand(20, 5).softmax(-1) if task == "sst" else torch.rand(20) * (5 if task == "sts" else 1))
        spec.write_silver(silver / f"{task}-silver.csv", SilverSet([f"s-{i}" for i in range(20)], texts, soft))
    model, flags = tiny_model_without_dropout, ("--log-every", "1", "--silver", str(silver))
    torchrun("multitask_classifier.py", *multitask_args(model, data_48, tmp_path / "two", 8, *flags))
    run(sys.executable, "multitask_classifier.py", *multitask_args(model, data_48, tmp_path / "one", 16, *flags))
    assert_same_weights(final_weights(tmp_path / "two"), final_weights(tmp_path / "one"))
    assert_same_losses(metrics(tmp_path / "two/run/metrics.jsonl", "train"),
                       metrics(tmp_path / "one/run/metrics.jsonl", "train"), scales=output_scales(tmp_path / "one/run"))


# 8 tokens: some sentences are truncated, and each process's reader would say so.
LOG_AND_TRUNCATE = ("--log-every", "1", "--max-length", "8")


@pytest.fixture(scope="module")
def one_process_17(tiny_model_without_dropout, data_17, tmp_path_factory):
    out = tmp_path_factory.mktemp("one-17")
    result = run(sys.executable, "multitask_classifier.py",
                 *multitask_args(tiny_model_without_dropout, data_17, out, 16, *LOG_AND_TRUNCATE))
    return out, result.stderr


@pytest.mark.parametrize("batch_size, accumulation", [(8, 1), (4, 2)])
def test_17_examples_in_batches_of_8_train_on_two_processes_as_on_one(tiny_model_without_dropout, data_17,
                                                                      one_process_17, tmp_path, batch_size,
                                                                      accumulation):
    """Step 2 has one example a task: rank 0 computes it, rank 1 (accumulating: 3 of the 4 parts) a stand-in row
    whose loss weighs nothing. The step is still one process's with the whole (uneven) batch."""
    two = torchrun("multitask_classifier.py", *multitask_args(
        tiny_model_without_dropout, data_17, tmp_path, batch_size, "--grad-accum", str(accumulation),
        *LOG_AND_TRUNCATE))
    one, one_stderr = one_process_17
    assert_same_weights(final_weights(tmp_path), final_weights(one))
    assert_same_losses(metrics(tmp_path / "run/metrics.jsonl", "train"), metrics(one / "run/metrics.jsonl", "train"),
                       scales=output_scales(one / "run"))
    # Warnings once: both processes truncate the same sentences, only rank 0 says so.
    assert two.stderr.count("were truncated") == one_stderr.count("were truncated") > 0


REPLICAS = """
import json, os, sys
sys.path.insert(0, {root!r})
import torch
import torch.distributed as dist
from minbert import checkpoint
from minbert.common import distributed
from minbert.engine import engine
from minbert.training import contrastive, multitask, multitask_config

def other_weights_on_rank_1(build):
    # A process that built other weights (another seed, another copy of the checkpoint): rank 0's must win.
    def built(*args, **kwargs):
        module = build(*args, **kwargs)
        if os.environ["RANK"] == "1":
            with torch.no_grad():
                for parameter in module.parameters():
                    parameter.add_(1.0)
        return module
    return built

def both(tensor):
    parts = [torch.empty_like(tensor) for _ in range(2)]
    dist.all_gather(parts, tensor)
    return parts

def built(config, make):
    return make(config, engine.Engine(config))

checkpoint.build_model = other_weights_on_rank_1(checkpoint.build_model)
contrastive.from_pretrained = other_weights_on_rank_1(contrastive.from_pretrained)
multitask_args, contrastive_args, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
found = {{}}
for name, make in (("multitask", lambda: built(multitask_config.MultitaskConfig(**multitask_args),
                                               multitask.MultitaskRun).model),
                   ("contrastive", lambda: built(contrastive.ContrastiveConfig(**contrastive_args),
                                                 contrastive.Pretraining).stages[0].objective)):
    model = make()
    # Parameters and buffers (the STS head's cosine floor, measured on rank 0).
    weights = both(torch.cat([t.detach().flatten().float() for t in (*model.parameters(), *model.buffers())]))
    masks = both(torch.nn.functional.dropout(torch.ones(1000), 0.5))
    found[name] = {{"same weights": torch.equal(*weights), "same masks": torch.equal(*masks)}}
if dist.get_rank() == 0:
    with open(out, "w") as f:
        json.dump(found, f)
distributed.exit_finished_process()  # as the commands end (common.cli.run)
"""


def test_each_process_starts_from_rank_0s_weights_and_draws_its_own_dropout_masks(tiny_model, data_17, tmp_path):
    """Dropout masks of their own: two processes x 8 regularise as one process x 16 does, not in lockstep."""
    script = tmp_path / "replicas.py"
    script.write_text(REPLICAS.format(root=str(ROOT)))
    multitask_config = dict(model=str(tiny_model), data_dir=str(data_17), output_dir=str(tmp_path / "multitask"),
                            predictions_dir=str(tmp_path / "predictions"), device="cpu")
    contrastive_config = dict(model=str(tiny_model), data="unlabeled", data_dir=str(write_sentences(tmp_path)),
                              output_dir=str(tmp_path / "contrastive"), device="cpu")
    torchrun(str(script), json.dumps(multitask_config), json.dumps(contrastive_config), str(tmp_path / "found.json"))
    assert json.loads((tmp_path / "found.json").read_text()) == {
        name: {"same weights": True, "same masks": False} for name in ("multitask", "contrastive")}


def write_sentences(folder: Path) -> Path:
    rng = random.Random(3)
    (folder / "unlabeled-sentences.txt").write_text("\n".join(sentence(rng) for _ in range(20)) + "\n")
    return folder


# ---- pretrain_contrastive.py under torchrun ----

@pytest.fixture(scope="module")
def nli_17(tmp_path_factory):
    """17 NLI triplets (premise, entailment, contradiction): a batch of 16, then a batch of one triplet, which one
    of two processes lacks."""
    folder, rng = tmp_path_factory.mktemp("nli-17"), random.Random(2)
    rows = ["sent0,sent1,hard_neg"] + [",".join(sentence(rng) for _ in range(3)) for _ in range(17)]
    (folder / "nli_for_simcse.csv").write_text("\n".join(rows) + "\n")
    return folder


@pytest.mark.parametrize("method", [
    # In-batch and hard negatives, gathered from every process: the loss is the whole batch's on each; embedded
    # 3 rows at a time (gradient caching: its own passes, then the flat all_reduce). Mean pooling: a random tiny
    # encoder's [CLS] vectors are all alike, and their gradients mostly rounding noise.
    ("--method", "simcse", "--pooling", "mean", "--grad-cache-chunk", "3", "--temperature", "0.05"),
    # The same, without gradient caching: one forward pass through DDP, the gathered rows' gradients sent back.
    ("--method", "simcse", "--pooling", "mean", "--temperature", "0.05"),
    # ConSERT's NLI classifier on each process's own rows (weighed by their share), then NT-Xent over the
    # sentences gathered from every process; plain backward passes, their gradients averaged as they run.
    ("--method", "consert", "--consert-stages", "sup-unsup", "--aug1", "none", "--aug2", "none",
     "--temperature", "0.1"),
], ids=["simcse-grad-cache", "simcse", "consert-sup-unsup"])
def test_nli_triplets_on_two_processes_train_as_one_process_with_the_joint_batch(tiny_model_without_dropout, nli_17,
                                                                                 tmp_path, method):
    def args(out: Path, batch_size: int) -> list[str]:
        return ["--model", str(tiny_model_without_dropout), "--data", "nli", "--data-dir", str(nli_17),
                "--output-dir", str(out), "--batch-size", str(batch_size), "--lr", "1e-3", "--log-every", "1",
                "--device", "cpu", "--precision", "fp32", *method]

    torchrun("pretrain_contrastive.py", *args(tmp_path / "two", 8))
    run(sys.executable, "pretrain_contrastive.py", *args(tmp_path / "one", 16))
    two, one = (load_file(tmp_path / name / "model.safetensors") for name in ("two", "one"))
    initial = load_file(Path(tiny_model_without_dropout) / "model.safetensors")
    assert not torch.equal(one["encoder.layer.0.attention.self.query.weight"],
                           initial["encoder.layer.0.attention.self.query.weight"]), "the runs trained"
    assert_same_weights(two, one)
    # The losses are cross-entropies of cosines divided by the temperature: that divides their rounding too.
    temperature = float(method[method.index("--temperature") + 1])
    assert_same_losses(*(metrics(tmp_path / name / "metrics.jsonl", "train") for name in ("two", "one")),
                       scales=1 / temperature)


# ---- several machines, and a worker killed ----

def test_two_machines_that_share_no_disk_train_and_rank_0_alone_writes(tiny_model, data_48, tmp_path):
    machines = [tmp_path / "machine0", tmp_path / "machine1"]
    # Relative output folders: each machine's own. The model and the data are inputs every machine has.
    args = multitask_args(tiny_model, data_48, Path("."), 8, "--eval-every", "2")
    assert two_machines(ROOT / "multitask_classifier.py", args, machines, tmp_path / "logs") == [0, 0], \
        (tmp_path / "logs/node1.log").read_text()[-3000:]
    written = machines[0] / "run"
    assert (written / "best/model.safetensors").exists() and (written / "last/training_state.pt").exists()
    assert len(metrics(written / "metrics.jsonl", "eval")) == 2  # step 2, and the epoch's end at step 3
    assert len(list((machines[0] / "predictions").iterdir())) == 7  # 6 leaderboard files, written-by.json
    assert list(machines[1].iterdir()) == []


KILLED_AFTER_STEP_4 = """
import os, sys
sys.path.insert(0, {root!r})
from minbert.common import cli
from minbert.training import multitask
import multitask_classifier
step = multitask.MultitaskRun.step
def dies(self, item, share):
    # The checkpoint of step 4 is on disk. Only in the job's first attempt (torchrun --max-restarts restarts it).
    if self.engine.state.step == 4 and os.environ["RANK"] == "1" and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        os._exit(137)  # as a SIGKILL: no clean-up of any kind
    return step(self, item, share)
multitask.MultitaskRun.step = dies
cli.run(lambda: multitask_classifier.main(sys.argv[1:]))  # as the command runs: its log, its end
"""


def killable_args(model: Path, data: Path, out: Path) -> list[str]:
    """A run of 2 epochs with a checkpoint every 2 steps; dropout on: each process draws its own masks, and a resumed
    process restores its own random state."""
    return multitask_args(model, data, out, 4, "--epochs", "2", "--eval-every", "2", "--schedule", "mtdnn",
                          "--head-dropout", "0.3")


@pytest.fixture(scope="module")
def uninterrupted(tiny_model, data_48, tmp_path_factory) -> Path:
    """The run that killable_args' killed runs must end as, uninterrupted, by two processes: its folder."""
    out = tmp_path_factory.mktemp("uninterrupted")
    torchrun("multitask_classifier.py", *killable_args(tiny_model, data_48, out))
    return out


def test_a_worker_killed_on_one_of_two_machines_ends_the_job_and_the_run_resumes_to_the_same_weights(
        tiny_model, data_48, tmp_path, uninterrupted):
    """The machines share no disk: on --resume, rank 0 reads last/ and hands its state to the other machine."""
    args = lambda out: killable_args(tiny_model, data_48, out)  # noqa: E731
    killer = tmp_path / "killed_after_step_4.py"
    killer.write_text(KILLED_AFTER_STEP_4.format(root=str(ROOT)))
    machines, logs = [tmp_path / "machine0", tmp_path / "machine1"], tmp_path / "logs"
    # The job ended, both machines' parts of it.
    assert 0 not in two_machines(killer, args(Path(".")), machines, tmp_path / "logs-killed")
    assert torch.load(machines[0] / "run/last/training_state.pt", weights_only=True)["engine"]["step"] == 4
    assert two_machines(ROOT / "multitask_classifier.py", [*args(Path(".")), "--resume"], machines, logs) == [0, 0], \
        (logs / "node1.log").read_text()[-3000:]
    assert "resuming at step 4" in (logs / "node0.log").read_text()
    assert_same_weights(final_weights(machines[0]), final_weights(uninterrupted), atol=1e-6)
    assert_same_losses(metrics(machines[0] / "run/metrics.jsonl", "eval"),
                       metrics(uninterrupted / "run/metrics.jsonl", "eval"), key="train_loss",
                       scales=output_scales(uninterrupted / "run"))
    assert list(machines[1].iterdir()) == []


def test_torchrun_max_restarts_resumes_a_killed_worker_by_itself_to_the_same_weights(tiny_model, data_48, tmp_path,
                                                                                    uninterrupted):
    """torchrun --max-restarts 2: a worker killed after the checkpoint of step 4 ends the attempt; torchrun starts the
    same command again, which goes on from last/ by itself and ends as the uninterrupted run."""
    killer = tmp_path / "killed_after_step_4.py"
    killer.write_text(KILLED_AFTER_STEP_4.format(root=str(ROOT)))
    # --dist-timeout: a restarted attempt that cannot form its group fails in a minute, not in 30.
    result = torchrun("--max-restarts", "2", str(killer), *killable_args(tiny_model, data_48, tmp_path),
                      "--dist-timeout", "60")
    output = result.stdout + result.stderr
    assert "torchrun restart 1: resuming the run in" in output and "resuming at step 4" in output
    assert_same_weights(final_weights(tmp_path), final_weights(uninterrupted), atol=1e-6)
    assert_same_losses(metrics(tmp_path / "run/metrics.jsonl", "eval"),
                       metrics(uninterrupted / "run/metrics.jsonl", "eval"), key="train_loss",
                       scales=output_scales(uninterrupted / "run"))
    start = json.loads((tmp_path / "run/run_config.json").read_text())["provenance"]
    assert [start["torchrun_job"]] == [command["torchrun_job"] for command in start["resumed"]]


# ---- a process that stops, and refusals ----

STOPS_AT_STEP_2 = """
import os, signal, sys, time
sys.path.insert(0, {root!r})
from minbert.common import cli
from minbert.training import multitask
import multitask_classifier
step = multitask.MultitaskRun.step
def stops(self, item, share):
    if self.engine.state.step == 2 and os.environ["RANK"] == "1":
        with open({record!r}, "w") as record:
            record.write(f"{{os.getpid()}} {{time.time()}}")
        {how}
    return step(self, item, share)
multitask.MultitaskRun.step = stops
cli.run(lambda: multitask_classifier.main(sys.argv[1:]))  # as the command ends
"""
DIST_TIMEOUT = 15  # seconds: more than the two processes' start can differ by, on a busy machine


@pytest.mark.parametrize("how", [
    # Killed: its machine closes its connections, and rank 0's next collective fails at once.
    "os._exit(137)",
    # Frozen, as on a machine that is gone: nothing closes its connections, rank 0 waits for --dist-timeout.
    "os.kill(os.getpid(), signal.SIGSTOP)",
], ids=["killed", "frozen"])
def test_a_process_that_stops_ends_the_other_with_one_line_naming_its_rank(tiny_model, data_48, tmp_path, how):
    script, record = tmp_path / "stops.py", tmp_path / "stopped"
    script.write_text(STOPS_AT_STEP_2.format(root=str(ROOT), record=str(record), how=how))
    logs = tmp_path / "logs"
    args = multitask_args(tiny_model, data_48, Path("."), 4, "--dist-timeout", str(DIST_TIMEOUT))
    nodes = start_two_machines(script, args, [tmp_path / "machine0", tmp_path / "machine1"], logs, workers_apart=True)
    try:
        code = nodes[0].wait(timeout=600)
        ended = time.time()
    finally:
        if record.exists() and "SIGSTOP" in how:
            os.kill(int(record.read_text().split()[0]), signal.SIGKILL)  # the frozen process, which we stopped
        nodes[1].wait(timeout=600)
    stopped = float(record.read_text().split()[1])
    assert code != 0
    [line] = worker_stderr(logs, 0)
    reason = re.fullmatch(r"torchrun: the process of rank 1 stopped \((.+)\); this process \(rank 0\) ends too",
                          line).group(1)
    if "SIGSTOP" in how:  # it waited for --dist-timeout, then ended
        # gloo's words for it: a collective's own wait, or (DDP's all_reduce, sent while the backward pass ran)
        # the pair's connection closed by its timeout.
        assert reason in (f"Timed out waiting {DIST_TIMEOUT * 1000}ms for recv operation to complete",
                          "Application timeout caused pair closure")
        assert DIST_TIMEOUT - 1 < ended - stopped < DIST_TIMEOUT + distributed.ROLL_CALL_SECONDS + 15
    else:
        assert "Timed out" not in reason and ended - stopped < DIST_TIMEOUT


NAN_DEV_METRIC = """
import math, sys
sys.path.insert(0, {root!r})
from minbert.common import cli
from minbert.training import multitask
import multitask_classifier
multitask.MultitaskRun.evaluate = lambda self: {{"sst_accuracy": math.nan}}  # rank 0 alone evaluates
cli.run(lambda: multitask_classifier.main(sys.argv[1:]))
"""


def test_a_dev_metric_that_is_not_finite_on_rank_0_stops_every_process_with_one_line(tiny_model, data_48, tmp_path):
    """Rank 0 alone scores the dev sets: its verdict reaches the others, which would otherwise wait for it at the
    next collective until --dist-timeout."""
    script = tmp_path / "nan_dev.py"
    script.write_text(NAN_DEV_METRIC.format(root=str(ROOT)))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
         *multitask_args(tiny_model, data_48, tmp_path, 8, "--tasks", "sst", "--max-steps", "2",
                         "--dist-timeout", str(DIST_TIMEOUT))],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=ENV)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert output.count("error: step 2: the sst_accuracy dev metric is not finite (nan); the run stopped") == 1, output
    # Not as before: rank 1 went on to the next collective, met rank 0's exit there and ended in a traceback
    # ("[rank1]: Traceback ...", before torchrun's own report of the failed processes).
    assert "[rank1]" not in output and "stopped (" not in output, output
    assert not (tmp_path / "run" / "best").exists()


def test_torchruns_processes_count_as_nnodes_x_nproc_per_node(monkeypatch):
    for name, value in {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    assert distributed.processes() == "2 x 4 = 8 processes (--nnodes x --nproc-per-node)"
    monkeypatch.setenv("WORLD_SIZE", "7")  # machines of 4 and 3 processes (an elastic job)
    assert distributed.processes() == "7 processes"


def test_a_flag_refused_by_every_process_is_printed_once(tiny_model, data_48, tmp_path):
    """Three processes on one machine refuse the command line alike: its first process prints the refusal."""
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3",
         "multitask_classifier.py", *multitask_args(tiny_model, data_48, tmp_path, 8, "--epochs", "0")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=ENV)
    assert result.returncode != 0
    assert (result.stdout + result.stderr).count("error: --epochs must be >= 1, got 0") == 1


def test_a_refusal_is_printed_once_however_many_times_torchrun_restarts_the_command(tiny_model, data_48, tmp_path):
    """torchrun --max-restarts 2 starts a refused command three times (a failed attempt is a failed attempt): the
    refusal is printed by the first, and the attempts after it end silently."""
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "--max-restarts", "2",
         "multitask_classifier.py", *multitask_args(tiny_model, data_48, tmp_path, 8, "--epochs", "0")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**ENV, "LOGLEVEL": "INFO"})  # torchrun's log
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert output.count("will restart worker group") == 2, output[-3000:]  # three attempts
    assert output.count("error: --epochs must be >= 1, got 0") == 1


def test_a_refusal_of_rank_0_is_printed_by_rank_0_alone_naming_the_processes(tiny_model, data_48, tmp_path):
    """A run trained by one process, resumed by two on two machines: rank 0 reads its checkpoint and refuses, every
    process ends with code 2, and only rank 0's machine prints it."""
    machines, logs = [tmp_path / "machine0", tmp_path / "machine1"], tmp_path / "logs"
    args = multitask_args(tiny_model, data_48, Path("."), 8, "--max-steps", "1")
    machines[0].mkdir()
    subprocess.run([sys.executable, str(ROOT / "multitask_classifier.py"), *args], cwd=machines[0], check=True,
                   capture_output=True, timeout=600, env=ENV)
    # As a kill after its last checkpoint leaves it: the command did not end, so there is a run to resume.
    run_config = machines[0] / "run" / "run_config.json"
    run_config.write_text(json.dumps({k: v for k, v in json.loads(run_config.read_text()).items() if k != "finished"}))
    assert two_machines(ROOT / "multitask_classifier.py", [*args, "--resume"], machines, logs) == [1, 1]
    refusal = ("error: --resume: this is 2 x 1 = 2 processes (--nnodes x --nproc-per-node), but the run was trained "
               "by 1; resume it with as many")
    assert (logs / "node0.log").read_text().count(refusal) == 1
    assert "error:" not in (logs / "node1.log").read_text()
    assert "exitcode  : 2" in (logs / "node1.log").read_text()  # torchrun's report of its process


# Run by torchrun: multitask_classifier.py, each backward pass of the engine and each all_reduce of DDP's buckets
# written down (rank N's to FOLDER/rankN.txt) as "backward K" and "all_reduce in K".
COUNTING = '''
import sys
from pathlib import Path

from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

import multitask_classifier
from minbert.common import distributed
from minbert.engine.ddp import DataParallel
from minbert.engine.engine import Engine

folder, passes = Path(sys.argv[1]), []


def note(line):
    with open(folder / f"rank{distributed.rank()}.txt", "a") as file:
        file.write(line + "\\n")


def backward(self, loss, backward=Engine.backward):
    passes.append(len(passes))
    note(f"backward {passes[-1]}")
    backward(self, loss)


def start(self, *args, start=DataParallel.__init__, **kwargs):
    start(self, *args, **kwargs)
    if self.wrapped:
        def counted(process_group, bucket):
            note(f"all_reduce in {passes[-1]}")
            return allreduce_hook(process_group, bucket)
        self.module.register_comm_hook(None, counted)


Engine.backward, DataParallel.__init__ = backward, start
multitask_classifier.main(sys.argv[2:])
'''


def test_a_step_of_three_tasks_all_reduces_in_its_last_pass_only(tiny_model_without_dropout, data_48, tmp_path):
    """--schedule avg, one step: a backward pass per task, and DDP's all_reduces (one a bucket) in the third alone;
    the first two keep their gradients local, and the third's averages them all."""
    script = tmp_path / "counting.py"
    script.write_text(COUNTING)
    run(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(WORLD), str(script),
        str(tmp_path), *multitask_args(tiny_model_without_dropout, data_48, tmp_path / "run", 8, "--max-steps", "1"),
        env={"PYTHONPATH": str(ROOT)})  # the script, outside the repository, imports it
    for rank in range(WORLD):
        lines = (tmp_path / f"rank{rank}.txt").read_text().splitlines()
        assert [line for line in lines if line.startswith("backward")] == ["backward 0", "backward 1", "backward 2"]
        all_reduces = [line for line in lines if line.startswith("all_reduce")]
        assert all_reduces and set(all_reduces) == {"all_reduce in 2"}, lines
