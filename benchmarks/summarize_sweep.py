"""Table the runs of benchmarks/seed_sweep.sh: per set of flags (the seed left out), the spread of the
checkpoint each run keeps, and how many runs reach the targets.

    python benchmarks/summarize_sweep.py benchmarks/results/gpu_seed_sweep.jsonl

A run keeps its best evaluation by dev overall score. "epoch ends" judges only the evaluations after
each epoch (the README's command, which has no --eval-every); "every 379" judges all of them.
"""
import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common.cli import HelpFormatter, parse_task_weights  # noqa: E402
from common.tables import markdown_table  # noqa: E402
from tasks import COURSE_TASKS  # noqa: E402

METRICS = (*COURSE_TASKS, "overall")


def kept(records: list[dict], epoch_ends_only: bool) -> dict:
    """The dev metrics of the evaluation a run keeps as its best checkpoint."""
    if epoch_ends_only:  # the last evaluation of each epoch is the one after it
        records = list({r["epoch"]: r for r in records}.values())
    return max(records, key=lambda r: r["dev"]["overall"])["dev"]


def meets(metrics: dict, targets: dict) -> bool:
    return all(metrics[task] >= target for task, target in targets.items())


def summarize(records: list[dict], targets: dict) -> dict[str, dict]:
    runs = defaultdict(list)
    for record in records:
        runs[record["run"], record["flags"]].append(record)
    groups = defaultdict(list)
    for (_, flags), run_records in runs.items():
        groups[re.sub(r"--seed\s+\d+", "", flags).strip() or "(documented command)"].append(run_records)
    rows = {}
    for flags, group in groups.items():
        ends = [kept(r, epoch_ends_only=True) for r in group]
        row = {"runs": len(group)}
        for metric in METRICS:
            values = [m[metric] for m in ends]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            row[metric] = f"{statistics.mean(values):.4f} ± {spread:.4f} ({min(values):.3f}-{max(values):.3f})"
        row["targets met, epoch ends"] = sum(meets(m, targets) for m in ends)
        row["targets met, every 379"] = sum(meets(kept(r, epoch_ends_only=False), targets) for r in group)
        rows[flags] = row
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("results", type=Path, help="the JSON lines file benchmarks/seed_sweep.sh wrote ($RESULTS)")
    parser.add_argument("--targets", default="sst=0.48,para=0.84,sts=0.87",
                        help="the dev scores a run must reach on every task to count as meeting the targets: "
                             "task=value, comma-separated, for sst (accuracy), para (accuracy), sts (Pearson r)")
    args = parser.parse_args(argv)
    records = [json.loads(line) for line in args.results.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = summarize(records, parse_task_weights(args.targets, COURSE_TASKS, option="--targets"))
    columns = ["runs", *METRICS, "targets met, epoch ends", "targets met, every 379"]
    print(markdown_table(rows, columns, label="flags beside the seed",
                         headers=["runs", "SST acc", "Quora acc", "STS r", "overall",
                                  "meet targets (epoch ends)", "meet targets (every 379 steps)"]))


if __name__ == "__main__":
    main()
