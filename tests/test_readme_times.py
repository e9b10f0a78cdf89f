"""benchmarks/readme_times.py: each command of a page timed as written, wall and CPU apart, in a fresh copy."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PAGE = """# A page

```bash
python3 -c "import time; t = time.process_time(); all(iter(lambda: time.process_time() - t < 0.6, False))"    # 0.6 s
sleep 0.6    # no CPU
ls runs/long-job    # too long to time: skipped by --skip
bash setup.sh    # installs [network]
test -f benchmarks/readme_times.py && false
```

```python
from pathlib import Path
assert Path("runs").is_symlink()  # run outside the copy, its runs/ at hand
```
"""


def test_each_command_gets_its_own_wall_and_cpu_time_and_a_failure_is_reported(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    out = tmp_path / "times" / "times.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "readme_times.py"), "--page", str(page),
                             "--skip", "runs/long-job", "--out", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr  # the `false` failed
    rows = json.loads(out.read_text())["commands"]
    busy, sleeping, failing, python = rows
    # The busy loop spends its 0.6 s on the CPU; sleep spends its 0.6 s waiting. Bash and python's start add a
    # little CPU to each, far under the 0.6 s that tells them apart.
    assert busy["cpu_s"] >= 0.6 and busy["wall_s"] >= 0.6 and busy["readme_says"] == "0.6 s"
    assert sleeping["wall_s"] >= 0.6 and sleeping["cpu_s"] < 0.3
    # The copy holds the repository's files (the `test -f` passed), then `false` ended the command.
    assert failing["exit_code"] == 1 and "FAILED (1)" in result.stdout
    assert python["exit_code"] == 0 and python["command"].startswith("from pathlib")
    assert "--skip 'runs/long-job'" in result.stdout and "tagged [network]" in result.stdout
    assert out.with_suffix(".log").read_text().count("\n$ ") == 4  # each timed command's output, in the log
