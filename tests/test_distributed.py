"""Data-parallel training on CPU with the gloo backend: two processes must train exactly as one process with the
whole batch does (dropout off, so that splitting a batch changes nothing but who computes what)."""
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file

from common import distributed
from data.contrastive import PairBatch
from models import BertConfig, BertModel
from tests.conftest import assert_same_weights, checkpoint_weights, multitask_argv, write_course_files
from training.objectives import SimCSE

ROOT = Path(__file__).resolve().parents[1]
PAIRS, WORLD = 16, 2


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


def loss_and_gradients(objective, batch):
    loss = objective(batch)
    loss.backward()
    distributed.average_gradients(list(objective.parameters()))
    return loss.detach(), {name: p.grad.clone() for name, p in objective.named_parameters() if p.grad is not None}


def contrastive_worker(rank: int, init_file: str, out: str):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    objective, batch = simcse_and_batch()
    share = PAIRS // WORLD
    torch.save(loss_and_gradients(objective, rows(batch, rank * share, (rank + 1) * share)), f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


def test_all_gathered_negatives_give_the_loss_and_gradients_of_one_big_batch(tmp_path):
    """2 processes x 8 pairs, embeddings all-gathered, gradients averaged = 1 process x 16 pairs."""
    mp.spawn(contrastive_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD)
    objective, batch = simcse_and_batch()
    loss, gradients = loss_and_gradients(objective, batch)
    for rank in range(WORLD):
        rank_loss, rank_gradients = torch.load(tmp_path / f"rank{rank}.pt")
        torch.testing.assert_close(rank_loss, loss, atol=1e-5, rtol=1e-5)
        assert rank_gradients.keys() == gradients.keys()
        for name, gradient in gradients.items():
            torch.testing.assert_close(rank_gradients[name], gradient, atol=1e-5, rtol=1e-4, msg=name)


# ---- multitask_classifier.py under torchrun ----

@pytest.fixture(scope="module")
def data_48(tmp_path_factory):
    """48 training examples a task: three batches of 16."""
    return write_course_files(tmp_path_factory.mktemp("data-48"), random.Random(0), train_rows=48)


def multitask_args(model, data, out: Path, batch_size: int, *extra) -> list[str]:
    return multitask_argv(model, data, out, "--batch-size", str(batch_size), "--epochs", "1", "--schedule", "avg",
                          "--head-dropout", "0", *extra)


def run(*command, env=None):
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def torchrun(*args):
    return run(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(WORLD), *args)


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return checkpoint_weights(out / "run" / "last")


def test_two_processes_train_like_one_with_the_whole_batch(tiny_model_without_dropout, data_48, tmp_path):
    """3 avg steps (every task each step): 2 ranks x 8 examples a task = 1 process x 16, over the same examples."""
    model = tiny_model_without_dropout
    torchrun("multitask_classifier.py", *multitask_args(model, data_48, tmp_path / "two", 8))
    run(sys.executable, "multitask_classifier.py", *multitask_args(model, data_48, tmp_path / "one", 16))
    initial = load_file(Path(model) / "model.safetensors")
    two, one = final_weights(tmp_path / "two"), final_weights(tmp_path / "one")
    assert not torch.equal(two["encoder.layer.0.attention.self.query.weight"],
                           initial["encoder.layer.0.attention.self.query.weight"]), "the runs trained"
    assert_same_weights(two, one, atol=1e-5, rtol=1e-4)
    # Only rank 0 writes: one metrics line per evaluation, the leaderboard files once.
    assert len((tmp_path / "two" / "run" / "metrics.jsonl").read_text().splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "two" / "predictions").iterdir()) == sorted(
        f"{task}-{split}-output.csv" for task in ("sst", "para", "sts") for split in ("dev", "test"))


KILLED_AFTER_STEP_4 = """
import os, sys
sys.path.insert(0, {root!r})
from training import multitask
import multitask_classifier
step = multitask.MultitaskRun.step
def dies(self, item, share):
    if self.engine.step == 4:  # the checkpoint of step 4 is on disk
        os._exit(137)  # as a SIGKILL: no clean-up of any kind
    return step(self, item, share)
multitask.MultitaskRun.step = dies
multitask_classifier.main(sys.argv[1:])
"""


def test_a_run_killed_under_two_processes_resumes_to_the_same_weights(tiny_model, data_48, tmp_path):
    """Dropout on: the resumed processes must restore each one's own random state."""
    args = lambda out: multitask_args(tiny_model, data_48, out, 4, "--epochs", "2", "--eval-every", "2",  # noqa: E731
                                      "--schedule", "mtdnn", "--head-dropout", "0.3")
    torchrun("multitask_classifier.py", *args(tmp_path / "full"))
    killer = tmp_path / "killed_after_step_4.py"
    killer.write_text(KILLED_AFTER_STEP_4.format(root=str(ROOT)))
    died = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(WORLD), str(killer), *args(tmp_path / "resumed")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert died.returncode != 0
    result = torchrun("multitask_classifier.py", *args(tmp_path / "resumed"), "--resume")
    assert "resuming at step 4" in result.stderr
    assert_same_weights(final_weights(tmp_path / "resumed"), final_weights(tmp_path / "full"), atol=1e-6)
