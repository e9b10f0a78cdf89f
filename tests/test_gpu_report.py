"""benchmarks/gpu_report.py: a table whose step failed says why instead of vanishing, and the bundle check finds
what the device tool would not bring back or what is missing. (A complete bundle: tests/test_gpu_suite.py.)"""
import json

from benchmarks import gpu_report


def step(name, rc, call="call1", limit=150):
    return {"call": call, "step": name, "seconds": 12.5, "limit": limit, "rc": rc}


def test_tables_say_why_a_part_is_missing(tmp_path):
    lines = [step("setup", 0), step("throughput", 124), step("recipe", 1, limit=270)]
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    text, report = gpu_report.tables(tmp_path)
    assert "No table: step throughput stopped at its 150 s limit: see logs/throughput.log." in text
    assert "No table: not run yet (step compiled)." in text
    assert "No row for ours: one shared encoder, mtdnn: step recipe failed (exit code 1): see logs/recipe.log." in text
    assert "No row for transformers: a model a task: not run yet (step baseline)." in text
    assert report["throughput"] == {"error": "step throughput stopped at its 150 s limit: see logs/throughput.log"}
    assert "| call1 throughput | 12.5 | 150 | 124 |" in text  # every step with its time and exit code


def test_the_check_finds_what_the_device_tool_would_not_bring_back(tmp_path):
    for i in range(8):
        (tmp_path / f"file{i}.txt").write_text("x")
    (tmp_path / "a name.txt").write_text("x")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "file.txt").write_text("x")
    with open(tmp_path / "big.bin", "wb") as big:
        big.truncate(gpu_report.MAX_FILE_BYTES + 1)
    problems = gpu_report.check(tmp_path, ["base-s1"], compiled=False)
    assert problems[0] == "11 files, more than 8"
    assert "a name.txt: too deep, or a name the device tool does not bring back" in problems
    assert "a/b/c/file.txt: too deep, or a name the device tool does not bring back" in problems
    assert f"big.bin: {gpu_report.MAX_FILE_BYTES + 1} bytes, more than 16 MiB" in problems
    assert problems[-1] == "tables.md, tables.json or results.tar.gz missing"


def test_the_check_of_an_early_bundle_lists_every_missing_table(tmp_path):
    """call1's bundle, the campaign still running: no campaign tables, no compiled rows yet."""
    results, out = tmp_path / "results", tmp_path / "out"
    (results / "logs").mkdir(parents=True)
    (results / "steps.jsonl").write_text(json.dumps(step("setup", 0)) + "\n")
    (results / "logs" / "call1.log").write_text("call1\n")
    files = gpu_report.bundle(results, out, "call1")
    assert [path.name for path in files] == ["tables.md", "tables.json", "call1.log", "results.tar.gz"]
    problems = gpu_report.check(out, ["base-s1", "base-s2"], compiled=True)
    assert "throughput: no rows (not run yet (step throughput))" in problems
    assert "shapes: no rows (not run yet (step shapes))" in problems
    assert "compiled: no rows (not run yet (step compiled))" in problems
    assert "recipe, ours: one shared encoder, mtdnn: not run yet (step recipe)" in problems
    assert "results.tar.gz: runs/base-s2/metrics.jsonl missing" in problems


def baseline_problems(tmp_path, sts_metric: float) -> list[str]:
    """The check of a bundle whose baseline ran as a tiny CPU rehearsal does: each dev pass in under 5 ms."""
    results = tmp_path / "results"
    (results / "logs").mkdir(parents=True)
    (results / "steps.jsonl").write_text(json.dumps(step("baseline", 0)) + "\n")
    (results / "logs" / "call1.log").write_text("call1\n")
    (results / "baseline.json").write_text(json.dumps({"precision": "fp32", "results": [
        {"task": task, "epochs": 3, "train_seconds": 2.0, "dev_seconds": 0.001, "dev_metric": metric}
        for task, metric in (("sst", 0.54), ("para", 0.67), ("sts", sts_metric))]}))
    gpu_report.bundle(results, tmp_path / "out", "call1")
    return [line for line in gpu_report.check(tmp_path / "out", [], compiled=False) if "transformers" in line]


def test_a_dev_pass_that_rounds_to_0_s_and_a_negative_correlation_are_results_but_nan_is_not(tmp_path):
    assert baseline_problems(tmp_path / "tiny", -0.09) == []  # dev evaluation s: 0.0; STS r below 0
    [problem] = baseline_problems(tmp_path / "nan", float("nan"))
    assert problem.startswith("recipe, transformers: a model a task: a time or metric missing")
