"""Table the runs of benchmarks/seed_sweep.sh: per set of flags (the seed left out), the spread of the
checkpoint each run keeps, how many runs reach the targets, and which runs did not finish and why.

    python benchmarks/summarize_sweep.py benchmarks/results/gpu_seed_sweep.jsonl
    python benchmarks/summarize_sweep.py runs/quality/*.jsonl --precision bf16 --out runs/quality/sweep.json

A run keeps its best evaluation by dev overall score. "epoch ends" judges only the evaluations after
each epoch (the README's command, which has no --eval-every); "every 379" judges all of them. Only the
files' evaluation lines count (a run's metrics.jsonl also has training lines); seed_sweep.sh's "exit" line
of a run says how it ended (a time limit, a failure).
"""
import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minbert.common.cli import HelpFormatter, parse_task_weights  # noqa: E402
from minbert.common.files import write_json  # noqa: E402
from minbert.common.tables import markdown_table  # noqa: E402
from minbert.tasks import COURSE_TASKS  # noqa: E402

METRICS = (*COURSE_TASKS, "overall")
TIME_LIMIT = 124  # timeout's exit code: seed_sweep.sh's LIMIT stopped the run


def kept(records: list[dict], epoch_ends_only: bool) -> dict:
    """The dev metrics of the evaluation a run keeps as its best checkpoint."""
    if epoch_ends_only:  # the last evaluation of each epoch is the one after it
        records = list({r["epoch"]: r for r in records}.values())
    return max(records, key=lambda r: r["dev"]["overall"])["dev"]


def meets(metrics: dict, targets: dict) -> bool:
    return all(metrics[task] >= target for task, target in targets.items())


def is_evaluation(record: dict) -> bool:
    """An evaluation line: "event": "eval", or no event at all (files written before events were named)."""
    return record.get("event", "eval") == "eval" and "dev" in record


def group_name(flags: str) -> str:
    """The flags without the seed, nor --eval-every 0 (an evaluation after each epoch, as the documented command)."""
    return " ".join(re.sub(r"--seed\s+\d+|--eval-every\s+0\b", "", flags).split()) or "(documented command)"


def ending(exit_record: dict | None, evaluations: list[dict]) -> str | None:
    """How a run that did not finish ended, in words; None for one that finished (or whose end is unknown)."""
    rc = None if exit_record is None else exit_record["rc"]
    if not rc:
        return None
    reached = f"after epoch {evaluations[-1]['epoch']}" if evaluations else "before its first evaluation"
    if rc == TIME_LIMIT:
        return f"stopped at the time limit {reached}"
    return f"failed (exit code {rc}) {reached}: see {exit_record.get('log', 'its log')}"


def summarize(records: list[dict], targets: dict) -> tuple[dict[str, dict], dict[str, str]]:
    """(a row per group of flags, {run: how it ended} for the runs that did not finish)."""
    runs, exits = defaultdict(list), {}
    for record in records:
        key = record["run"], record["flags"]
        if record.get("event") == "exit":
            exits[key] = record
        elif is_evaluation(record):
            runs[key].append(record)
    unfinished = {run: text for (run, flags) in {**runs, **exits}
                  if (text := ending(exits.get((run, flags)), runs.get((run, flags), [])))}
    groups = defaultdict(list)
    for (_, flags), run_records in runs.items():
        groups[group_name(flags)].append(run_records)
    rows = {}
    for flags, group in groups.items():
        ends = [kept(r, epoch_ends_only=True) for r in group]
        row = {"runs": len(group)}
        for metric in METRICS:
            values = [m[metric] for m in ends]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            row[metric] = f"{statistics.mean(values):.4f} ± {spread:.4f} ({min(values):.3f}-{max(values):.3f})"
        last_epochs = sorted(r[-1]["epoch"] for r in group)
        row["epochs"] = str(last_epochs[0]) if last_epochs[0] == last_epochs[-1] else \
            f"{last_epochs[0]}-{last_epochs[-1]}"
        row["targets met, epoch ends"] = sum(meets(m, targets) for m in ends)
        row["targets met, every 379"] = sum(meets(kept(r, epoch_ends_only=False), targets) for r in group)
        rows[flags] = row
    for _, flags in exits:  # a group none of whose runs reached an evaluation still gets a row
        rows.setdefault(group_name(flags), {"runs": 0})
    return rows, unfinished


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("results", type=Path, nargs="+",
                        help="the JSON lines files benchmarks/seed_sweep.sh wrote ($RESULTS)")
    parser.add_argument("--targets", default="sst=0.48,para=0.84,sts=0.87",
                        help="the dev scores a run must reach on every task to count as meeting the targets: "
                             "task=value, comma-separated, for sst (accuracy), para (accuracy), sts (Pearson r)")
    parser.add_argument("--precision", help="the runs' --precision, named in the table's title")
    parser.add_argument("--out", type=Path, help="also write the rows and the unfinished runs here as JSON")
    args = parser.parse_args(argv)
    records = [json.loads(line) for path in args.results
               for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows, unfinished = summarize(records, parse_task_weights(args.targets, COURSE_TASKS, option="--targets"))
    columns = ["runs", "epochs", *METRICS, "targets met, epoch ends", "targets met, every 379"]
    if args.precision:
        print(f"Dev metrics of the checkpoint each run keeps, --precision {args.precision}:\n")
    print(markdown_table(rows, columns, label="flags beside the seed",
                         headers=["runs", "epochs", "SST acc", "Quora acc", "STS r", "overall",
                                  "meet targets (epoch ends)", "meet targets (every 379 steps)"]))
    if unfinished:
        print("\nNot finished:\n" + "\n".join(f"- {run}: {text}" for run, text in unfinished.items()))
    if args.out:
        write_json(args.out, {"precision": args.precision, "rows": rows, "unfinished": unfinished})


if __name__ == "__main__":
    main()
