#!/usr/bin/env bash
# The test suite: creates .venv, installs costlearn with its test
# dependencies (PyOpenCL + PoCL, so kernels run on a real CPU OpenCL device),
# runs ruff (pyproject.toml's [tool.ruff]) and pytest. GPU tests skip where
# there is no GPU. Arguments go to pytest. COSTLEARN_TEST_EXTRAS names the
# extras installed (default: test; CI's .ci/run adds test-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
EXTRAS="${COSTLEARN_TEST_EXTRAS:-test}"
echo "== installing costlearn[$EXTRAS] into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
echo "== ruff check"
.venv/bin/python -m ruff check .
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
