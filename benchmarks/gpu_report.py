"""The GPU plan's results (benchmarks/gpu_suite.sh): what the machine is, every table so far in Markdown and JSON,
and the bundle that comes back from the machine (at most 8 files).

    python benchmarks/gpu_report.py machine RESULTS          # the device, torch, transformers: RESULTS/machine.json
    python benchmarks/gpu_report.py tables RESULTS           # RESULTS/tables.md and RESULTS/tables.json
    python benchmarks/gpu_report.py bundle RESULTS OUT CALL  # the tables, CALL's log and one archive, into OUT
    python benchmarks/gpu_report.py check OUT --runs NAME... [--compiled]   # is OUT a complete bundle?

RESULTS is the plan's folder: machine.json, steps.jsonl (each step's seconds and exit code), logs/, throughput.json,
shapes.json and compiled.json (benchmarks/gpu_throughput.py), baseline.json (benchmarks/hf_single_task_baseline.py)
and runs/ (benchmarks/quality_campaign.sh: each run's folder, the JSON lines of the sweep, campaign.md, seeds.json,
ensembles.json). A table whose results are missing says why (the step's exit code and log) instead of vanishing.
"""
import argparse
import json
import math
import re
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.gpu_throughput import markdown as throughput_markdown  # noqa: E402
from minbert.common.files import write_json  # noqa: E402
from minbert.common.run_folder import BEST, METRICS, RUN_CONFIG  # noqa: E402
from minbert.common.tables import markdown_table  # noqa: E402

# What the device tool brings back from $OUT: at most 8 files of at most 16 MiB, 64 MiB in all, no deeper than two
# folders, every part of a name in letters, digits, '.', '_' and '-'.
MAX_FILES, MAX_FILE_BYTES, MAX_TOTAL_BYTES, MAX_FOLDERS = 8, 16 * 2**20, 64 * 2**20, 2
NAME = re.compile(r"^[A-Za-z0-9._-]+$")
ARCHIVE = "results.tar.gz"
SOLO_RUN = "base-s1"  # the campaign's first recipe run, run alone on the GPU first: the recipe's timed run
TIME_LIMIT = 124  # timeout's exit code
SEARCH = "runs/search"  # the search call's study folder (gpu_suite.sh search)


def machine(results: Path) -> dict:
    """The device every table names (the GPU's name, or the CPU), and the libraries' versions."""
    import torch
    import transformers

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (no GPU)"
    found = {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
             "python": sys.version.split()[0]}
    write_json(results / "machine.json", found)
    return found


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def missing(steps: dict[str, dict], step: str) -> str:
    """Why a step left no results, in words."""
    done = steps.get(step)
    if done is None:
        return f"not run yet (step {step})"
    if done["rc"] == TIME_LIMIT:
        return f"step {step} stopped at its {done['limit']} s limit: see logs/{step}.log"
    return f"step {step} failed (exit code {done['rc']}): see logs/{step}.log"


def recipe_rows(results: Path, steps: dict[str, dict], precision: str | None) -> dict[str, dict]:
    """Ours (the solo 3-epoch run: training, dev evaluations and test predictions timed apart, from its
    metrics.jsonl) and transformers (three models, 3 epochs each), as table rows; a side without results says why."""
    rows = {}
    run = results / "runs" / SOLO_RUN
    lines = read_lines(run / METRICS)
    evaluations = [line for line in lines if line.get("event") == "eval"]
    finish = next((line for line in lines if line.get("event") == "finish"), None)
    config = read_json(run / RUN_CONFIG) or {}
    if evaluations and finish:
        best = max(evaluations, key=lambda line: line["dev"]["overall"])
        rows["ours: one shared encoder, mtdnn"] = {
            "precision": config.get("precision", precision), "epochs": str(evaluations[-1]["epoch"]),
            "training s": evaluations[-1]["train_seconds"],
            "dev evaluation s": round(sum(line["eval_seconds"] for line in evaluations), 2),
            "test prediction s": finish["finish_seconds"], "command s": steps.get("recipe", {}).get("seconds"),
            **{task: best["dev"][task] for task in ("sst", "para", "sts", "overall")},
            "kept": f"epoch {best['epoch']}"}
    else:
        rows["ours: one shared encoder, mtdnn"] = {"error": missing(steps, "recipe")}
    baseline = read_json(results / "baseline.json")
    if baseline and baseline["results"]:
        tasks = {r["task"]: r for r in baseline["results"]}
        rows["transformers: a model a task"] = {
            "precision": baseline.get("precision", "fp32"),
            "epochs": "/".join(str(r["epochs"]) for r in tasks.values()),
            "training s": round(sum(r["train_seconds"] for r in tasks.values()), 2),
            "dev evaluation s": round(sum(r.get("dev_seconds", 0) for r in tasks.values()), 2),
            "test prediction s": "-", "command s": steps.get("baseline", {}).get("seconds"),
            **{task: tasks[task]["dev_metric"] for task in tasks}, "kept": "last epoch"}
    else:
        rows["transformers: a model a task"] = {"error": missing(steps, "baseline")}
    ours, theirs = (rows[name].get("training s") for name in rows)
    if isinstance(ours, float) and isinstance(theirs, float) and theirs:
        rows["ours: one shared encoder, mtdnn"]["training / transformers'"] = round(ours / theirs, 2)
    return rows


RECIPE_COLUMNS = ["precision", "epochs", "training s", "training / transformers'", "dev evaluation s",
                  "test prediction s", "command s", "sst", "para", "sts", "overall", "kept"]
SECONDS = ("training s", "dev evaluation s", "test prediction s", "command s")


def shown(row: dict) -> dict:
    """A recipe row as the Markdown table shows it: seconds to a tenth, the ratio to a hundredth, metrics as
    markdown_table writes them."""
    def text(key, value):
        if not isinstance(value, (int, float)):
            return value
        return f"{value:.1f}" if key in SECONDS else f"{value:.2f}" if key == "training / transformers'" else value
    return {key: text(key, value) for key, value in row.items()}


def tables(results: Path) -> tuple[str, dict]:
    """(Markdown, JSON) of every table the results allow so far."""
    found = read_json(results / "machine.json") or {"device": "unknown device", "torch": "?"}
    step_lines = read_lines(results / "steps.jsonl")
    steps = {line["step"]: line for line in step_lines}  # a step run again: its last time
    where = f"{found['device']}, torch {found['torch']}"
    report = {"machine": found, "steps": step_lines}
    text = [f"# GPU plan results: {where}", "",
            "## Steps of the plan (wall seconds; exit code 124: stopped at its limit)", "",
            markdown_table({f"{line['call']} {line['step']}": line for line in step_lines},
                           ["seconds", "limit", "rc"], label="call and step", digits=1,
                           headers=["seconds", "limit s", "exit code"]), ""]
    for part, title in (("throughput", "Training throughput, eager"),
                        ("shapes", "Training throughput, bucketed batches and CUDA graphs"),
                        ("compiled", "Training throughput, compiled")):
        table = read_json(results / f"{part}.json")
        if table:
            peak = table["peak_bf16_tflops"]
            report[part] = table
            text += [f"## {title}: {table['device']}, torch {table['torch']}, MFU against "
                     f"{f'{peak:g} TFLOP/s dense bf16' if peak else 'no known peak'} (precision: a column)", "",
                     throughput_markdown(table["rows"]), ""]
        else:
            report[part] = {"error": missing(steps, part)}
            text += [f"## {title}", "", f"No table: {report[part]['error']}.", ""]
    recipe = recipe_rows(results, steps, None)
    report["recipe"] = recipe
    text += [f"## The documented recipe, 3 epochs, alone on the GPU, against the transformers baseline: {where}", ""]
    if any("error" not in row for row in recipe.values()):
        text += [markdown_table({k: shown(v) for k, v in recipe.items() if "error" not in v}, RECIPE_COLUMNS,
                                label="run", digits=4,
                                headers=["precision", "epochs", "training s", "training / transformers'",
                                         "dev evaluation s", "test prediction s", "command s", "SST acc",
                                         "Quora acc", "STS r", "overall", "dev metrics of"]), ""]
    text += [f"No row for {name}: {row['error']}." for name, row in recipe.items() if "error" in row]
    text += ["", "training s: wall seconds of the training steps (ours: evaluations and checkpoint saves left out); "
             "dev evaluation s: every dev pass (ours: one after each epoch); test prediction s: reloading best/ and "
             "predicting the test sets; command s: the whole command, loading included.", ""]
    seeds, ensembles = read_json(results / "runs" / "seeds.json"), read_json(results / "runs" / "ensembles.json")
    campaign_md = results / "runs" / "campaign.md"
    report["campaign"] = {"seeds": seeds, "ensembles": ensembles}
    text += [f"## Quality campaign: {where}", ""]
    if campaign_md.exists() and seeds:
        text += [campaign_md.read_text(encoding="utf-8").strip(), ""]
    else:
        report["campaign"]["error"] = missing(steps, "tables" if "campaign" in steps else "campaign")
        text += [f"No tables: {report['campaign']['error']}.", ""]
    if "search" in steps:
        trials = results / SEARCH / "trials.md"
        table = trials.read_text(encoding="utf-8") if trials.exists() else None
        report["search"] = {"trials": table}
        text += [f"## Hyperparameter study of the full recipe (search.py): {where}", "",
                 table.strip() if table is not None else
                 f"No table: {missing(steps, 'search-report' if 'search-report' in steps else 'search')}.", ""]
    return "\n".join(text), report


def bundle(results: Path, out: Path, call: str) -> list[Path]:
    """OUT/tables.md, OUT/tables.json, OUT/CALL.log and OUT/results.tar.gz (every log, step time, table's numbers,
    and each run's metrics, configuration, soft outputs and leaderboard files; no weights)."""
    text, report = tables(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text(text, encoding="utf-8")
    write_json(out / "tables.json", report)
    log = results / "logs" / f"{call}.log"
    files = [out / "tables.md", out / "tables.json"]
    if log.exists():
        files.append(out / f"{call}.log")
        files[-1].write_bytes(log.read_bytes())
    patterns = ["*.json", "*.jsonl", "logs/*", "runs/*.jsonl", "runs/*.json", "runs/*.log", "runs/*.md",
                f"runs/*/{METRICS}", f"runs/*/{RUN_CONFIG}", f"runs/*/{BEST}/metrics.json",
                f"runs/*/{BEST}/outputs-*.pt", "runs/*/predictions/*.csv",
                *(f"{SEARCH}/{pattern}" for pattern in ("study.journal", "trials.md", "best.yaml", "*.png",
                                                        "trial-*.log", f"trial-*/{METRICS}", f"trial-*/{RUN_CONFIG}"))]
    with tarfile.open(out / ARCHIVE, "w:gz") as archive:
        for pattern in patterns:
            for path in sorted(results.glob(pattern)):
                if path.is_file():
                    archive.add(path, arcname=str(path.relative_to(results)))
    files.append(out / ARCHIVE)
    print(f"bundled into {out}: " + ", ".join(f"{p.name} ({p.stat().st_size / 2**20:.2f} MiB)" for p in files))
    return files


def limit_problems(out: Path) -> list[str]:
    """What of OUT the device tool would not bring back: too many files, too large, too deep, or oddly named."""
    problems = []
    files = [path for path in out.rglob("*") if path.is_file()]
    if len(files) > MAX_FILES:
        problems.append(f"{len(files)} files, more than {MAX_FILES}")
    for path in files:
        parts = path.relative_to(out).parts
        if len(parts) - 1 > MAX_FOLDERS or not all(NAME.match(part) for part in parts):
            problems.append(f"{path.relative_to(out)}: too deep, or a name the device tool does not bring back")
        if path.stat().st_size > MAX_FILE_BYTES:
            problems.append(f"{path.name}: {path.stat().st_size} bytes, more than 16 MiB")
    if sum(path.stat().st_size for path in files) > MAX_TOTAL_BYTES:
        problems.append("more than 64 MiB in all")
    return problems


def check(out: Path, runs: list[str], compiled: bool, search: bool = False) -> list[str]:
    """What is wrong with the bundle in OUT for a plan whose campaign ran `runs` (and the compiled call, if
    `compiled`; the search call, if `search`): the device tool's limits, every table with its rows, no failed step,
    every run's files in the archive, the study's table, journal and a complete trial. [] when nothing is."""
    problems = limit_problems(out)
    report = read_json(out / "tables.json")
    if report is None or not (out / "tables.md").exists() or not (out / ARCHIVE).exists():
        return problems + [f"tables.md, tables.json or {ARCHIVE} missing"]
    problems += [f"step {line['call']} {line['step']}: exit code {line['rc']}" for line in report["steps"]
                 if line["rc"]]
    for part in ("throughput", "shapes", "compiled") if compiled else ("throughput", "shapes"):
        rows = report[part].get("rows", [])
        if not rows:
            problems.append(f"{part}: no rows ({report[part].get('error')})")
        problems += [f"{part}: {row['model']} {row['side']} {row['precision']} {row['attention']}: {row['error']}"
                     for row in rows if "error" in row]
    for name, row in report["recipe"].items():
        if "error" in row:
            problems.append(f"recipe, {name}: {row['error']}")
        # Present, not positive: a tiny rehearsal's dev pass may round to 0.0 s, its STS r be below 0.
        elif not all(isinstance(row[column], (int, float)) and math.isfinite(row[column]) and
                     (row[column] >= 0 or column not in SECONDS)
                     for column in ("training s", "dev evaluation s", "sst", "para", "sts")):
            problems.append(f"recipe, {name}: a time or metric missing: {row}")
    seeds, ensembles = report["campaign"]["seeds"] or {}, report["campaign"]["ensembles"] or {}
    if seeds.get("unfinished"):
        problems.append(f"campaign runs not finished: {seeds['unfinished']}")
    if sum(row.get("runs", 0) for row in seeds.get("rows", {}).values()) != len(runs):
        problems.append(f"campaign: {len(runs)} runs expected in the seeds table, got {seeds.get('rows')}")
    if ensembles.get("left_out"):
        problems.append(f"ensembles: runs left out: {ensembles['left_out']}")
    if sorted(ensembles.get("groups", {}).get("all runs", {})) != sorted(f"{method}, chosen on {half}" for method in
                                                       ("best member", "mean", "weighted")
                                                       for half in ("dev", "the other half")):
        problems.append(f"ensembles: the six rows of 'all runs' missing: {ensembles}")
    with tarfile.open(out / ARCHIVE) as archive:
        names = set(archive.getnames())
    if search:
        trials = (report.get("search") or {}).get("trials") or ""
        if "| complete |" not in trials:
            problems.append(f"search: no complete trial in its table: {trials or 'no table'}")
        problems += [f"{ARCHIVE}: {SEARCH}/{name} missing" for name in ("study.journal", "trials.md", "best.yaml")
                     if f"{SEARCH}/{name}" not in names]
    for run in runs:
        for needed in (METRICS, f"{BEST}/outputs-sst-dev.pt", f"{BEST}/outputs-para-test.pt"):
            if f"runs/{run}/{needed}" not in names:
                problems.append(f"{ARCHIVE}: runs/{run}/{needed} missing")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("machine", "write RESULTS/machine.json and print it"),
                       ("tables", "write RESULTS/tables.md and RESULTS/tables.json and print the Markdown")):
        commands.add_parser(name, help=text).add_argument("results", type=Path, help="the plan's results folder")
    bundler = commands.add_parser("bundle", help="the tables, a call's log and one archive of the rest, into OUT")
    bundler.add_argument("results", type=Path, help="the plan's results folder")
    bundler.add_argument("out", type=Path, help="the folder that comes back from the machine ($OUT)")
    bundler.add_argument("call", help="the call whose log (RESULTS/logs/CALL.log) goes along")
    checker = commands.add_parser("check", help="exit code 1 and the problems, if OUT is not a complete bundle")
    checker.add_argument("out", type=Path, help="a folder written by bundle")
    checker.add_argument("--runs", nargs="+", required=True, help="the campaign's runs, each expected in full")
    checker.add_argument("--compiled", action="store_true", help="the compiled call's rows expected too")
    checker.add_argument("--search", action="store_true", help="the search call's study expected too")
    args = parser.parse_args(argv)
    if args.command == "machine":
        print(json.dumps(machine(args.results)))
    elif args.command == "tables":
        text, report = tables(args.results)
        (args.results / "tables.md").write_text(text, encoding="utf-8")
        write_json(args.results / "tables.json", report)
        print(text)
    elif args.command == "bundle":
        bundle(args.results, args.out, args.call)
    else:
        problems = check(args.out, args.runs, args.compiled, args.search)
        print("\n".join(f"bundle: {problem}" for problem in problems) or f"bundle checked: {args.out}")
        sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
