"""The one evaluation loop: a model's outputs on a split, the task metrics, the course's scores."""
import torch
from tqdm import tqdm

from data.batching import sorted_batches
from data.tasks import TaskSplit
from heads.similarity import MAX_SCORE
from evaluation.metrics import accuracy, mean_score, overall_score, pearson


def soft_outputs(task: str, raw: torch.Tensor) -> torch.Tensor:
    """What ensembles average: SST class probabilities [N, 5], P(paraphrase) [N], STS scores in [0, 5] [N]."""
    if task == "sst":
        return raw.float().softmax(-1)
    return raw.float().sigmoid() if task == "para" else raw.float().clamp(0.0, MAX_SCORE)


def hard_predictions(task: str, outputs: torch.Tensor) -> torch.Tensor:
    """The leaderboard's predictions from soft outputs: a class, a 0/1 label, a score."""
    if task == "sst":
        return outputs.argmax(-1)
    return (outputs > 0.5).long() if task == "para" else outputs


def task_metric(task: str, outputs: torch.Tensor, labels: torch.Tensor) -> float:
    """SST and Quora accuracy, STS Pearson r."""
    predictions = hard_predictions(task, outputs)
    return pearson(predictions, labels) if task == "sts" else accuracy(predictions, labels.long())


def summary(metrics: dict[str, float]) -> dict[str, float]:
    """Add the course's overall score and the plain mean when all three tasks were scored."""
    if {"sst", "para", "sts"} <= set(metrics):
        metrics = {**metrics, "overall": overall_score(metrics["sst"], metrics["para"], metrics["sts"]),
                   "mean": mean_score(metrics["sst"], metrics["para"], metrics["sts"])}
    return metrics


@torch.no_grad()
def predict(model, split: TaskSplit, pad_id: int, batch_size: int = 128, autocast=None) -> torch.Tensor:
    """Soft outputs for every example of `split`, in its order; batches sorted by length."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outputs = None
    for rows in tqdm(sorted_batches(split.lengths(), batch_size), desc=f"predicting {split.task}", leave=False):
        inputs = {k: v.to(device) for k, v in split.batch(rows, pad_id)["inputs"].items()}
        with autocast() if autocast else torch.enable_grad():
            batch_outputs = soft_outputs(split.task, model(split.task, inputs)).cpu()
        if outputs is None:
            outputs = torch.empty((len(split), *batch_outputs.shape[1:]))
        outputs[rows] = batch_outputs
    model.train(was_training)
    return outputs
