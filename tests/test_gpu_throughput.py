"""benchmarks/gpu_throughput.py: its FLOP count against torch's, and a run at tiny shapes on the CPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.gpu_throughput import dense_bf16_peak, training_flops
from models import BertConfig, BertModel

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


def run(tmp_path, *args):
    # One thread: on a shared 2-core machine, tiny models run far slower with torch's thread pool.
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_throughput.py"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_the_table_at_tiny_shapes_on_the_cpu(tmp_path, minilm_dir, data_dir):
    out = tmp_path / "throughput.json"
    result = run(tmp_path, "--shape", "tiny", "--model", "none", "--device", "cpu", "--data", str(data_dir),
                 "--steps", "2", "--warmup", "1", "--fixed", "4x16", "--real-batches", "2", "--batch-size", "4",
                 "--compile", "eager", "--peak-tflops", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "| model | side | precision | attention | compile | batches | tokens/s |" in result.stdout
    assert "CPU (1 threads); MFU against 2 TFLOP/s dense bf16" in result.stdout
    report = json.loads(out.read_text())
    rows = report["rows"]
    # Per precision: on the fixed shape ours (padded: nothing to unpad) and transformers; on real batches ours
    # padded, packed and unpadded, and transformers.
    assert sorted((r["precision"], r["batches"], r["side"], r["attention"]) for r in rows) == sorted(
        (precision, *combination) for precision in ("fp32", "bf16") for combination in
        [("4x16", "ours", "padded"), ("4x16", "transformers", "sdpa"), ("real", "ours", "padded"),
         ("real", "ours", "packed"), ("real", "ours", "unpadded"), ("real", "transformers", "sdpa")])
    for r in rows:
        assert r["tokens_per_s"] > 0 and r["peak_memory_gib"] is None  # no GPU, no GPU memory
        assert r["mfu"] == pytest.approx(r["tflops"] / 2)
    assert all(r["tokens"] == 2 * 4 * 16 for r in rows if r["batches"] == "4x16")  # two steps of 4 x 16
    real = {r["attention"]: r for r in rows if r["batches"] == "real" and r["precision"] == "fp32"}
    # The same real sentences on every side: the same real tokens and FLOPs, whatever the attention; padding
    # is not counted (two steps of 4 sentences of at most 128 tokens, and the course's are far shorter).
    assert real["padded"]["tokens"] == real["packed"]["tokens"] == real["unpadded"]["tokens"] == real["sdpa"]["tokens"] \
        < 2 * 4 * 64
    assert real["padded"]["flops"] == real["packed"]["flops"] == real["unpadded"]["flops"] == real["sdpa"]["flops"]
    assert real["sdpa"]["vs_transformers"] == 1.0


def test_a_bad_shape_is_a_usage_error(tmp_path):
    result = run(tmp_path, "--fixed", "32by128")
    assert result.returncode == 2 and "--fixed takes shapes like 32x128, got 32by128" in result.stderr
