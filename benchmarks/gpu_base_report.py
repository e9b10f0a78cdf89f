"""The tables of benchmarks/gpu_base_recipe.sh (the base recipe on a GPU: its seeds, their ensemble, the silver data
it teaches, the grid of its choices, the student), what comes back from the machine, and the scores of the
leaderboard files committed from it.

    python benchmarks/gpu_base_report.py tables RESULTS CALL      # RESULTS/CALL.md and RESULTS/CALL.json
    python benchmarks/gpu_base_report.py bundle RESULTS OUT CALL  # those, CALL's log and the archives, into OUT
    python benchmarks/gpu_base_report.py check OUT CALL --runs NAME... [--silver]   # is OUT a complete bundle?
    python benchmarks/gpu_base_report.py unpack OUT [--to benchmarks/results/gpu/CALL]
    python benchmarks/gpu_base_report.py score [benchmarks/results/gpu/base] [--data-dir ../shared/data]

RESULTS is a call's folder on the machine (PLAN_DIR/CALL): machine.json, steps.jsonl (each step's seconds and exit
code), runs.jsonl (each training run's flags and exit code), logs/, runs/NAME/ (each run: metrics.jsonl,
run_config.json, best/, predictions/), runs/ensemble/ (the seeds' mean ensemble: ensemble.json, predictions/) and
silver/ (the silver folder of `minbert silver`). The archives that come back: runs.tar.gz (each run's metrics.jsonl,
run_config.json and six leaderboard files, the ensemble's, the steps and the logs; no weights) and silver.tar.gz
(the silver folder). `unpack` puts them, the tables too, into a folder to commit (benchmarks/results/gpu/CALL);
`score` scores its dev leaderboard files against the dev labels, apart from what the runs logged.
"""
import argparse
import json
import shutil
import statistics
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.gpu_report import limit_problems, read_json, read_lines  # noqa: E402
from benchmarks.summarize_sweep import group_name, is_evaluation, kept  # noqa: E402
from minbert.common.files import DEFAULT_DATA, write_json  # noqa: E402
from minbert.common.run_folder import METRICS, RUN_CONFIG  # noqa: E402
from minbert.common.tables import markdown_table  # noqa: E402
from minbert.tasks import COURSE_TASKS, summary  # noqa: E402

ENSEMBLE = "ensemble"  # the seeds' mean ensemble: runs/ensemble/
RUNS_ARCHIVE, SILVER_ARCHIVE = "runs.tar.gz", "silver.tar.gz"
METRIC_COLUMNS = (*COURSE_TASKS, "overall")
METRIC_HEADERS = ["SST acc", "Quora acc", "STS r", "overall"]
TIME_LIMIT = 124  # timeout's exit code
COMMITTED = Path(__file__).resolve().parent / "results" / "gpu"  # a call's files go to its folder there
CALLS = ("base", "grid", "student")


# ---- the tables of a call ----

def run_row(results: Path, record: dict) -> dict:
    """A training run as a table row: the dev metrics of the checkpoint it keeps (the best of its epoch ends),
    each epoch's overall score, its training seconds, and how it ended."""
    lines = read_lines(results / "runs" / record["run"] / METRICS)
    evaluations = [line for line in lines if is_evaluation(line)]
    finished = any(line.get("event") == "finish" for line in lines)
    row = {"flags": record["flags"], "rc": record["rc"]}
    reached = f"after epoch {evaluations[-1]['epoch']}" if evaluations else "before its first evaluation"
    row["status"] = ("finished" if record["rc"] == 0 and finished else
                     f"stopped at its time limit {reached}" if record["rc"] == TIME_LIMIT else
                     f"failed (exit code {record['rc']}) {reached}: see logs/{record['run']}.log")
    if evaluations:
        best = kept(evaluations, epoch_ends_only=True)
        ends = {line["epoch"]: line for line in evaluations}  # the last evaluation of each epoch is its end
        row |= {metric: best[metric] for metric in METRIC_COLUMNS}
        row["kept"] = f"epoch {next(e for e, line in ends.items() if line['dev'] is best)}"
        row["overall per epoch"] = " / ".join(f"{line['dev']['overall']:.4f}" for line in ends.values())
        row["training s"] = evaluations[-1]["train_seconds"]
    return row


def mean_sd(values: list[float]) -> dict:
    return {"mean": statistics.mean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values)}


def shown(spread: dict, digits: int = 4) -> str:
    return f"{spread['mean']:.{digits}f} ± {spread['sd']:.{digits}f}"


def group_rows(rows: dict[str, dict]) -> dict[str, dict]:
    """Per set of flags (the seed left out), the mean ± sd of the finished runs' metrics and training seconds."""
    groups = {}
    for row in rows.values():
        if row["status"] == "finished":
            groups.setdefault(group_name(row["flags"]), []).append(row)
    return {flags: {"runs": len(group), **{column: mean_sd([row[column] for row in group])
                                           for column in (*METRIC_COLUMNS, "training s")}}
            for flags, group in groups.items()}


def group_cells(group: dict) -> dict:
    """A group's row as the Markdown table shows it: mean ± sd, metrics to 4 decimals, seconds to 1."""
    return {"runs": group["runs"], **{column: shown(group[column]) for column in METRIC_COLUMNS},
            "training s": shown(group["training s"], digits=1)}


def tables(results: Path, call: str) -> tuple[str, dict]:
    """(Markdown, JSON) of a call: its steps, each run's dev metrics, the mean ± sd over seeds, the ensemble's row
    against the best seed, the silver data's counts."""
    found = read_json(results / "machine.json") or {"device": "unknown device", "torch": "?"}
    where = f"{found['device']}, torch {found['torch']}"
    steps, records = read_lines(results / "steps.jsonl"), read_lines(results / "runs.jsonl")
    rows = {record["run"]: run_row(results, record) for record in records}
    groups = group_rows(rows)
    report = {"machine": found, "call": call, "steps": steps, "runs": rows, "groups": groups}
    text = [f"# gpu_base_recipe.sh {call}: {where}", "",
            "## Steps (wall seconds; exit code 124: stopped at its limit)", "",
            markdown_table({line["step"]: line for line in steps}, ["seconds", "limit", "rc"], label="step",
                           digits=1, headers=["seconds", "limit s", "exit code"]), "",
            "## Dev metrics of the checkpoint each run keeps (the best of its epoch ends)", "",
            markdown_table({name: {**row, "training s": f"{row['training s']:.1f}"} if "training s" in row else row
                            for name, row in rows.items()},
                           ["flags", *METRIC_COLUMNS, "kept", "overall per epoch", "training s", "status"],
                           label="run", digits=4,
                           headers=["flags", *METRIC_HEADERS, "kept", "overall per epoch", "training s", "status"]),
            ""]
    if groups:
        text += ["## Mean ± sd over seeds (finished runs)", "",
                 markdown_table({flags: group_cells(group) for flags, group in groups.items()},
                                ["runs", *METRIC_COLUMNS, "training s"], label="flags beside the seed",
                                headers=["runs", *METRIC_HEADERS, "training s"]), ""]
    ensemble = read_json(results / "runs" / ENSEMBLE / "ensemble.json")
    if ensemble:
        best_member = max(ensemble["members"].values(), key=lambda member: member["overall"])
        report["ensemble"] = {"members": list(ensemble["members"]), "dev": ensemble["ensemble"],
                              "best member": best_member,
                              "above its best member": ensemble["ensemble"]["overall"] > best_member["overall"]}
        text += ["## The seeds' mean ensemble (`minbert ensemble --method mean`), dev", "",
                 markdown_table({"ensemble": ensemble["ensemble"], "its best member": best_member},
                                METRIC_COLUMNS, label="", digits=4, headers=METRIC_HEADERS), ""]
    silver = read_json(results / "silver" / "silver.json")
    if silver:
        report["silver"] = {task: {"examples": record["examples"], **record["counts"]}
                            for task, record in silver["tasks"].items()}
        text += ["## Silver data taught by the ensemble (`minbert silver`)", "",
                 "\n".join(f"- {task}: {record['examples']:,} examples; {json.dumps(record['counts'])}"
                           for task, record in silver["tasks"].items()), ""]
    return "\n".join(text), report


# ---- what comes back from the machine ----

def bundle(results: Path, out: Path, call: str) -> list[Path]:
    """OUT/CALL.md, OUT/CALL.json, OUT/CALL.log, OUT/runs.tar.gz and, where the call made silver data,
    OUT/silver.tar.gz."""
    text, report = tables(results, call)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{call}.md").write_text(text, encoding="utf-8")
    write_json(out / f"{call}.json", report)
    files = [out / f"{call}.md", out / f"{call}.json"]
    log = results / "logs" / f"{call}.log"
    if log.exists():
        files.append(out / log.name)
        shutil.copyfile(log, files[-1])
    patterns = ["machine.json", "steps.jsonl", "runs.jsonl", "logs/*", f"runs/*/{METRICS}", f"runs/*/{RUN_CONFIG}",
                "runs/*/predictions/*.csv", f"runs/{ENSEMBLE}/ensemble.json"]
    for archive_name, chosen in ((RUNS_ARCHIVE, patterns), (SILVER_ARCHIVE, ["silver/*"])):
        paths = [path for pattern in chosen for path in sorted(results.glob(pattern)) if path.is_file()]
        if archive_name == SILVER_ARCHIVE and not paths:
            continue  # the call made none
        with tarfile.open(out / archive_name, "w:gz") as archive:
            for path in paths:
                archive.add(path, arcname=str(path.relative_to(results)))
        files.append(out / archive_name)
    print(f"bundled into {out}: " + ", ".join(f"{p.name} ({p.stat().st_size / 2**20:.2f} MiB)" for p in files))
    return files


LEADERBOARD = [f"{task}-{split}-output.csv" for task in COURSE_TASKS for split in ("dev", "test")]


def check(out: Path, call: str, runs: list[str], silver: bool) -> list[str]:
    """What is wrong with OUT for a call that trained `runs` (and made silver data, if `silver`): the device
    tool's limits, no failed step or run, every run's metrics and six leaderboard files, the ensemble's and
    silver's. [] when nothing is."""
    problems = limit_problems(out)
    report = read_json(out / f"{call}.json")
    if report is None or not (out / RUNS_ARCHIVE).exists():
        return problems + [f"{call}.json or {RUNS_ARCHIVE} missing"]
    problems += [f"step {line['step']}: exit code {line['rc']}" for line in report["steps"] if line["rc"]]
    problems += [f"run {name}: {row['status']}" for name, row in report["runs"].items()
                 if row["status"] != "finished"]
    if sorted(report["runs"]) != sorted(runs):
        problems.append(f"runs {sorted(report['runs'])}, expected {sorted(runs)}")
    with tarfile.open(out / RUNS_ARCHIVE) as archive:
        names = set(archive.getnames())
    expected = [f"runs/{run}/{METRICS}" for run in runs]
    expected += [f"runs/{run}/predictions/{file}" for run in (*runs, *([ENSEMBLE] if silver else []))
                 for file in LEADERBOARD]
    problems += [f"{RUNS_ARCHIVE}: {name} missing" for name in expected if name not in names]
    if silver:
        if "ensemble" not in report or "silver" not in report:
            problems.append("no ensemble row or no silver counts in the tables")
        if not (out / SILVER_ARCHIVE).exists():
            problems.append(f"{SILVER_ARCHIVE} missing")
        else:
            with tarfile.open(out / SILVER_ARCHIVE) as archive:
                silver_names = set(archive.getnames())
            problems += [f"{SILVER_ARCHIVE}: silver/{task}-silver.csv missing" for task in COURSE_TASKS
                         if f"silver/{task}-silver.csv" not in silver_names]
    return problems


def unpack(out: Path, to: Path | None = None) -> Path:
    """The archives' leaderboard files, metrics, tables and silver folder, into TO (by default the call's folder
    under benchmarks/results/gpu/; files of the same names are replaced). Returns TO."""
    calls = [call for call in CALLS if (out / f"{call}.json").is_file()]
    if len(calls) != 1:
        raise ValueError(f"{out}: not the files of one call of gpu_base_recipe.sh (no base.json, grid.json or "
                         f"student.json, or several)")
    to = to or COMMITTED / calls[0]
    to.mkdir(parents=True, exist_ok=True)
    for path in sorted(out.iterdir()):
        if path.name.endswith(".tar.gz"):
            with tarfile.open(path) as archive:
                archive.extractall(to, filter="data")
        elif path.suffix in (".md", ".json", ".log"):
            shutil.copyfile(path, to / path.name)
    print(f"unpacked {out} into {to}")
    return to


# ---- scoring the committed leaderboard files ----

def read_leaderboard(path: Path) -> dict[str, float]:
    """id -> prediction, from a leaderboard file ("id , prediction" lines after a header)."""
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return {sentence_id.strip(): float(value) for sentence_id, value in (line.split(",") for line in lines)}


def scored(predictions: Path, data_dir: Path) -> dict[str, float]:
    """The course's dev metrics of a folder's three dev leaderboard files: SST and Quora accuracy, STS's Pearson r,
    and the overall score."""
    import numpy
    from minbert.evaluation.outputs import dev_records

    metrics = {}
    for task in COURSE_TASKS:
        predicted = read_leaderboard(predictions / f"{task}-dev-output.csv")
        labels = numpy.array([float(record.label) for record in dev_records(data_dir, task, list(predicted))])
        values = numpy.array(list(predicted.values()))
        metrics[task] = float(numpy.corrcoef(values, labels)[0, 1] if task == "sts" else (values == labels).mean())
    return summary(metrics)


def score(folder: Path, data_dir: Path) -> tuple[str, dict]:
    """Every run's (and the ensemble's) dev scores from its leaderboard files, and the seeds' mean ± sd."""
    rows = {path.parent.name: scored(path, data_dir) for path in sorted(folder.glob("runs/*/predictions"))}
    seeds = [row for name, row in rows.items() if name != ENSEMBLE]
    table = dict(rows)
    if len(seeds) > 1:
        table[f"mean ± sd of {len(seeds)} runs"] = {column: shown(mean_sd([row[column] for row in seeds]))
                                                   for column in METRIC_COLUMNS}
    return markdown_table(table, METRIC_COLUMNS, label="dev, from the leaderboard files", digits=4,
                          headers=METRIC_HEADERS), rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    tabler = commands.add_parser("tables", help="write RESULTS/CALL.md and RESULTS/CALL.json and print the Markdown")
    bundler = commands.add_parser("bundle", help="a call's tables, log and archives, into OUT")
    for sub in (tabler, bundler):
        sub.add_argument("results", type=Path, help="the call's results folder (PLAN_DIR/CALL)")
        if sub is bundler:
            sub.add_argument("out", type=Path, help="the folder that comes back from the machine ($OUT)")
        sub.add_argument("call", help="the call: base, grid or student")
    checker = commands.add_parser("check", help="exit code 1 and the problems, if OUT is not a complete bundle")
    checker.add_argument("out", type=Path, help="a folder written by bundle")
    checker.add_argument("call", help="the call that wrote it")
    checker.add_argument("--runs", nargs="+", required=True, help="the call's training runs, each expected in full")
    checker.add_argument("--silver", action="store_true", help="the ensemble's files and silver data expected too")
    unpacker = commands.add_parser("unpack", help="a returned OUT's archives and tables into a folder to commit")
    unpacker.add_argument("out", type=Path, help="the files that came back from the machine")
    unpacker.add_argument("--to", type=Path, help="the folder (default: benchmarks/results/gpu/CALL)")
    scorer = commands.add_parser("score", help="score the dev leaderboard files of an unpacked folder")
    scorer.add_argument("folder", type=Path, nargs="?", default=COMMITTED / "base",
                        help="an unpacked call's folder (default: benchmarks/results/gpu/base)")
    scorer.add_argument("--data-dir", type=Path, default=DEFAULT_DATA,
                        help="the course's data, for the dev labels (default: ../shared/data)")
    args = parser.parse_args(argv)
    if args.command == "tables":
        text, report = tables(args.results, args.call)
        (args.results / f"{args.call}.md").write_text(text, encoding="utf-8")
        write_json(args.results / f"{args.call}.json", report)
        print(text)
    elif args.command == "bundle":
        bundle(args.results, args.out, args.call)
    elif args.command == "check":
        problems = check(args.out, args.call, args.runs, args.silver)
        print("\n".join(f"bundle: {problem}" for problem in problems) or f"bundle checked: {args.out}")
        sys.exit(1 if problems else 0)
    elif args.command == "unpack":
        try:
            unpack(args.out, args.to)
        except ValueError as error:
            print(f"gpu_base_report.py: {error}", file=sys.stderr)
            sys.exit(2)
    else:
        if not any(args.folder.glob("runs/*/predictions")):
            print(f"gpu_base_report.py: no runs/*/predictions/ in {args.folder} (unpack a call's files first)",
                  file=sys.stderr)
            sys.exit(2)
        print(score(args.folder, args.data_dir)[0])


if __name__ == "__main__":
    main()
