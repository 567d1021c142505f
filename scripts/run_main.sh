#!/usr/bin/env bash
# The main job, end to end, on this machine's device (CUDA if an NVIDIA GPU
# and CuPy are present, else PoCL's CPU OpenCL device): creates .venv,
# installs costlearn, then collects, trains, predicts and evaluates into out/.
# Extra arguments go to `costlearn run` (see `costlearn run --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    extras="cuda,opencl"
else
    extras="opencl"
fi
echo "== installing costlearn[${extras},plot] into .venv (about a minute the first time)"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extras},plot]"
exec .venv/bin/costlearn run --data out/data --models out/models --report out/report.md "$@"
