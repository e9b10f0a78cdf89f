"""Silver data for `minbert train --silver`, labelled by a teacher (`minbert silver`, commands/silver.py):

- a sentence task (SST, CFIMDB), SentAugment's way (Du et al., NAACL 2021): the bank sentences nearest to each
  training sentence by embedding (data/retrieval.py), labelled by the teacher, the K most confident of each class
  kept with their soft labels;
- a pair task (Quora, STS), Augmented SBERT's way (Thakur et al., NAACL 2021): new pairs of training sentences,
  each sentence with its nearest neighbour among them and with a random one, labelled by the teacher, through its
  own head for the task (cross-encoded where the run cross-encodes the task).

The teacher is a finished run, or several (the mean of their soft outputs: an ensemble distilled into one student).
No sentence of any task's dev or test file enters silver data, nor a copy of the task's own training sentences or
pairs: they are matched after data.silver.normalise and counted.
"""
import logging
import random
from pathlib import Path

import torch

from minbert.common.errors import UsageError
from minbert.common.progress import Progress, named
from minbert.data.retrieval import BankEmbeddings, nearest_in_chunks
from minbert.data.silver import SilverSet, normalise
from minbert.models.sentence_encoder import SentenceEncoder
from minbert.predictor import MultitaskPredictor
from minbert.tasks import REGISTRY, Task

log = logging.getLogger(__name__)
CHUNK = 512  # examples the teacher labels between two progress counts


class Teacher:
    """One or more finished runs; a task's soft outputs are the mean of the runs' (tasks.Task.soft)."""

    def __init__(self, runs: list[str], device: str = "cpu"):
        self.runs = runs
        self.members = [MultitaskPredictor.from_run(run, device=device) for run in runs]

    def check(self, tasks: list[str]) -> None:
        """A UsageError naming the run that was not trained on one of the tasks."""
        for run, member in zip(self.runs, self.members):
            missing = [task for task in tasks if task not in member.tasks]
            if missing:
                raise UsageError(f"--teacher {run}: trained on {', '.join(member.tasks)}, not on "
                                 f"{', '.join(missing)}; give a teacher trained on every task of --tasks")

    def soft(self, task: str, examples: list) -> torch.Tensor:
        """The mean of the members' soft outputs for the examples, with progress naming the member under way."""
        total = torch.zeros(len(examples), *REGISTRY[task].soft_shape, dtype=torch.float64)
        for run, member in zip(self.runs, self.members):
            with named(f"teacher {run}"), Progress(len(examples), f"labelling {task}", "example") as bar:
                for start in range(0, len(examples), CHUNK):
                    part = examples[start:start + CHUNK]
                    total[start:start + len(part)] += member.soft_outputs(task, part).double()
                    bar.update(len(part))
        return (total / len(self.members)).float()

    def describe(self) -> dict:
        return {"runs": [str(Path(run).expanduser().resolve()) for run in self.runs],
                "combined": "mean of the runs' soft outputs" if len(self.runs) > 1 else "one run"}


class HeldOut:
    """The normalised sentences no silver example may hold: every task's dev and test sentences; and the task's own
    training sentences (or, for a pair task, its training pairs), which it has gold labels for."""

    def __init__(self, data_dir: Path):
        self.sentences = set()
        for task in REGISTRY.values():
            for file, labeled in zip(task.files[1:], (True, False)):
                if (data_dir / file).is_file():
                    for record in task.read(data_dir / file, labeled):
                        self.sentences.update(normalise(text) for text in task.texts(record))
        self.sentences.discard("")

    def holds(self, texts: tuple[str, ...]) -> bool:
        return any(normalise(text) in self.sentences for text in texts)


def wordless(texts: tuple[str, ...]) -> bool:
    """A sentence without a letter or a digit (punctuation alone): nothing to learn from."""
    return any(not normalise(text) for text in texts)


def sentence_silver(task: Task, train: list, teacher: Teacher, retriever: SentenceEncoder, bank: list[str],
                    cache: BankEmbeddings, held_out: HeldOut, neighbours: int,
                    per_class: int) -> tuple[SilverSet, dict]:
    """SentAugment: each training sentence's `neighbours` nearest bank sentences, labelled by the teacher; of each
    class (the teacher's), the `per_class` the teacher is most sure of, with their soft labels."""
    sentences = [record.sentence for record in train]
    log.info("%s: embedding its %s training sentences to retrieve their neighbours", task.name, f"{len(sentences):,}")
    queries = retriever.encode(sentences, progress=f"embedding {task.name}'s training sentences")
    cache.build()
    _, rows = cache.nearest(queries, neighbours)
    found = list(dict.fromkeys(rows.flatten().tolist()))  # each bank sentence once, in order of first retrieval
    own = {normalise(sentence) for sentence in sentences}
    dev_test = {row for row in found if held_out.holds((bank[row],))}
    training = {row for row in found if row not in dev_test and normalise(bank[row]) in own}
    empty = {row for row in found if wordless((bank[row],))}
    removed = dev_test | training | empty
    candidates = [row for row in found if row not in removed]
    soft = teacher.soft(task.name, [bank[row] for row in candidates])
    confidence, classes = soft.max(-1)
    kept, per_class_counts = [], {}
    for label, name in enumerate(task.class_names):
        of_class = (classes == label).nonzero().squeeze(1)
        best = of_class[confidence[of_class].argsort(descending=True)[:per_class]].tolist()
        per_class_counts[name] = {"retrieved": len(of_class), "kept": len(best)}
        kept += best
    kept.sort()
    silver = SilverSet([f"bank-{candidates[i] + 1}" for i in kept], [(bank[candidates[i]],) for i in kept],
                       soft[kept])
    counts = {"training_sentences": len(sentences), "retrieved": len(found),
              "removed_dev_or_test": len(dev_test), "removed_in_training": len(training),
              "removed_without_words": len(empty - dev_test - training), "labelled": len(candidates),
              "per_class": per_class_counts, "kept": len(silver)}
    return silver, counts


def pair_silver(task: Task, train: list, teacher: Teacher, retriever: SentenceEncoder, held_out: HeldOut,
                sentences_used: int, seed: int) -> tuple[SilverSet, dict]:
    """Augmented SBERT: up to `sentences_used` training sentences (a random sample), each paired with its nearest
    neighbour among them and with a random one of them; pairs that are training pairs, repeats, or hold a dev or
    test sentence are left out; the rest labelled by the teacher."""
    pool = list(dict.fromkeys(text for record in train for text in task.texts(record) if not wordless((text,))))
    generator = random.Random(seed)
    pool = generator.sample(pool, min(sentences_used, len(pool)))
    embeddings = torch.nn.functional.normalize(
        retriever.encode(pool, progress=f"embedding {task.name}'s training sentences"), dim=-1)
    _, rows = nearest_in_chunks(embeddings, [(0, embeddings)], min(2, len(pool)))
    gold = {frozenset((normalise(r.sentence1), normalise(r.sentence2))) for r in train}
    pairs, seen = [], set()
    counts = {"sentences": len(pool), "nearest_pairs": 0, "random_pairs": 0, "removed_dev_or_test": 0,
              "removed_in_training": 0, "removed_repeats": 0}
    for i, sentence in enumerate(pool):
        nearest = next((j for j in rows[i].tolist() if j != i), None)
        for kind, j in (("nearest_pairs", nearest), ("random_pairs", generator.randrange(len(pool)))):
            if j is None or j == i:
                continue
            pair = (sentence, pool[j])
            key = frozenset(normalise(text) for text in pair)
            if key in seen:
                counts["removed_repeats"] += 1
            elif held_out.holds(pair):
                counts["removed_dev_or_test"] += 1
            elif key in gold:
                counts["removed_in_training"] += 1
            else:
                pairs.append(pair)
                counts[kind] += 1
            seen.add(key)
    soft = teacher.soft(task.name, pairs)
    counts["kept"] = len(pairs)
    return SilverSet([f"pair-{i + 1}" for i in range(len(pairs))], pairs, soft), counts
