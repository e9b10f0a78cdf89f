"""The fine-tuning tasks as flags, files and tables name them: each task's name, title, description, data files,
leaderboard column and kind (one sentence an example or a pair; its dev metric), and the recipe's task flags.

The task registry (tasks.py) gives each task its code, which loads torch; what is here loads nothing, so that every
command's --help names the tasks at once. Adding a task is one entry in TASKS, plus its kind's class in tasks.py
where it is a new kind (and a reader or head if it needs one that does not exist yet).

    sst     SST-5 sentiment, 5 classes, accuracy                  (the course's first task)
    para    Quora paraphrase detection, 0/1, accuracy              (second)
    sts     STS similarity, a score in [0, 5], Pearson r           (third)
    cfimdb  CFIMDB movie-review polarity, 2 classes, accuracy      (the course's optional extra set)
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """What a kind of task is to the flags: two sentences an example or one, and the dev metric that scores it."""
    pair: bool
    metric_name: str


# Each kind's class in tasks.py reads, trains and scores its tasks.
KINDS = {"classification": Kind(pair=False, metric_name="accuracy"),
         "paraphrase": Kind(pair=True, metric_name="accuracy"),
         "similarity": Kind(pair=True, metric_name="pearson")}


@dataclass(frozen=True)
class TaskInfo:
    name: str
    title: str  # what pictures and tables call it
    description: str
    files: tuple[str, str, str]  # train, dev, test-student in --data-dir, the course's names
    column: str  # the leaderboard file's prediction column
    kind: str  # one of KINDS
    class_names: tuple[str, ...] = ()  # a classification's classes, in the order of their labels

    @property
    def pair(self) -> bool:
        return KINDS[self.kind].pair

    @property
    def metric_name(self) -> str:
        return KINDS[self.kind].metric_name


TASKS: dict[str, TaskInfo] = {task.name: task for task in (
    TaskInfo("sst", "SST-5", "SST-5 sentiment (5 classes)",
             ("ids-sst-train.csv", "ids-sst-dev.csv", "ids-sst-test-student.csv"), "Predicted_Sentiment",
             "classification", ("negative", "somewhat negative", "neutral", "somewhat positive", "positive")),
    TaskInfo("para", "Quora", "Quora paraphrase detection",
             ("quora-train.csv", "quora-dev.csv", "quora-test-student.csv"), "Predicted_Is_Paraphrase", "paraphrase"),
    # The later starter's column name; the 2023 starter misspelled it "Predicted_Similiary".
    TaskInfo("sts", "STS", "STS semantic similarity (0-5)",
             ("sts-train.csv", "sts-dev.csv", "sts-test-student.csv"), "Predicted_Similarity", "similarity"),
    TaskInfo("cfimdb", "CFIMDB", "CFIMDB movie-review polarity (2 classes)",
             ("ids-cfimdb-train.csv", "ids-cfimdb-dev.csv", "ids-cfimdb-test-student.csv"), "Predicted_Sentiment",
             "classification", ("negative", "positive")),
)}
TASK_NAMES = tuple(TASKS)
# The three the course's overall score combines, and each by what it predicts.
SENTIMENT, PARAPHRASE, SIMILARITY = COURSE_TASKS = ("sst", "para", "sts")
# The documented recipe's task flags (docs/training.md), the trainer's defaults: Quora cross-encoded, STS
# bi-encoded (its target then the cosine range), and Quora, ten times the others' size, sampled at 0.8 by mtdnn.
RECIPE_PAIR_ENCODING = f"{PARAPHRASE}=cross,{SIMILARITY}=bi"
RECIPE_TASK_WEIGHTS = {PARAPHRASE: 0.8}
# The course's training files that pretrain_contrastive.py --data names (by their data's name), in the order
# --data all3 visits them: Chen's CS224N report section 4.1 takes supervised Quora first, then SST and STS.
CONTRASTIVE_COURSE_DATA = {"quora": PARAPHRASE, "sst": SENTIMENT, "sts": SIMILARITY}
