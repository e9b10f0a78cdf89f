"""The time of each command of the README and the pages that continue it (the tutorial, the CPU guide's benchmarks)
as written, on the full data, in a fresh copy of the repository: one measurement behind every time they quote.

    .venv/bin/python benchmarks/readme_times.py [--page PAGE ...] [--skip TEXT ...] [--out FILE]

Runs the pages' commands in order, as tests/readme_commands.py does (the same pages, copy and order: tracked and
not-ignored files, .venv linked to this environment; a command a page before gave already runs once), but on
../shared/data itself and with no flag changed, so each command runs at the size a user runs it. For each it prints
the wall time and the CPU time (user + system of the command and every process it started), next to the time the
page's comment gives. Skipped: what tests/readme_commands.py skips
(setup, the test suite, [network], [manual], [gpu] without CUDA) and the commands holding a --skip text (by
default the full recipe and the search: 55 minutes and hours, measured on their own in docs/results.md).
Run it alone on the machine: on a machine whose cores are shared, CPU time grows with the load. Each command's own
output is passed through (a progress line at least every 30 s off a terminal) and kept in FILE.log beside --out.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from minbert.common.files import write_json  # noqa: E402
from minbert.common.precision import processor  # noqa: E402
from readme_commands import (  # noqa: E402
    DATA, PAGES, invocation, make_copy, page_commands, skip_reason, trailing_comment)

SKIPPED_BY_DEFAULT = ["runs/mtdnn-minilm", "minbert search"]


def children_cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--page", dest="pages", nargs="+", type=Path, default=PAGES,
                        help="the pages whose commands to time, in this order (default: README.md, docs/tutorial.md, "
                             "docs/speed.md)")
    parser.add_argument("--skip", nargs="*", default=SKIPPED_BY_DEFAULT,
                        help="skip the commands holding any of these texts (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("runs/readme-times.json"),
                        help="the table as JSON (default: %(default)s); the commands' output goes to its .log")
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="readme-times-"))
    repo = make_copy(workdir)
    (workdir / "shared").mkdir()
    (workdir / "shared" / "data").symlink_to(DATA, target_is_directory=True)  # the commands' default --data-dir
    args.out.parent.mkdir(parents=True, exist_ok=True)
    log_path = args.out.with_suffix(".log")
    print(f"fresh copy: {repo}; data: {DATA}; the commands' output: {log_path}", flush=True)
    rows, failed = [], 0
    with open(log_path, "w", encoding="utf-8") as log:
        for _, command, given_on in page_commands(args.pages):
            first_line = command.text.strip().splitlines()[0][:100]
            reason = skip_reason(command, cuda=False) or next(
                (f"--skip {text!r}" for text in args.skip if text in command.text), None) or (
                f"timed above: {given_on} gave it" if given_on else None)
            if reason:
                print(f"skipped  {first_line}\n         {reason}", flush=True)
                continue
            argv_, folder, env = invocation(command, repo)  # as written: no flag changed
            log.write(f"\n$ {command.text}\n")
            log.flush()
            wall, cpu = time.perf_counter(), children_cpu_seconds()
            with subprocess.Popen(argv_, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) as done:
                for line in done.stdout:
                    log.write(line)
                    print(f"  | {line}", end="", flush=True)
            wall, cpu = time.perf_counter() - wall, children_cpu_seconds() - cpu
            readme = trailing_comment(command.text).strip() if command.kind == "bash" else ""
            rows.append({"command": command.text.strip(), "exit_code": done.returncode, "wall_s": round(wall, 1),
                         "cpu_s": round(cpu, 1), "readme_says": readme})
            failed += done.returncode != 0
            status = "ok" if done.returncode == 0 else f"FAILED ({done.returncode})"
            print(f"{status:8s} {wall:7.1f} s wall {cpu:7.1f} s CPU  {first_line}"
                  + (f"\n         the page: {readme}" if readme else ""), flush=True)
    load = os.getloadavg()
    write_json(args.out, {"machine": f"{processor()}, {os.cpu_count()} CPUs, threads as each command sets",
                          "load_average_at_end": load, "commands": rows})
    print(f"{len(rows)} commands timed, {failed} failed; load average at the end {load[0]:.2f}; table: {args.out}")
    subprocess.run(["rm", "-rf", str(workdir)], check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
