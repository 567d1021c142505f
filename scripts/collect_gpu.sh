#!/usr/bin/env bash
# Collect an NVIDIA GPU's dataset for costlearn in one prepared run (about
# 9 minutes on an H200), from the source tree, without xgboost:
#   1. random feasible float32 tiles x random shapes (batch-1 to 8192 a side),
#      interleaved, clocks recorded, no GPU setting changed  -> OUTDIR/data/<device>/
#   2. every pool config on fixed fresh shapes for evaluation -> OUTDIR/eval/<device>/
#   3. cuBLAS (CuPy matmul, TF32 off) on the same fresh shapes -> OUTDIR/vendor.json
# Each dataset is compacted to one Parquet part, so OUTDIR holds a few files.
# Then, on a CPU machine: copy OUTDIR/data/<device> to data/, OUTDIR/eval/<device>
# to data/<device>/eval, `costlearn train`, and
# `costlearn evaluate --no-measure --model <device> --data data/<device>/eval` (scores without a GPU).
#
# usage: scripts/collect_gpu.sh OUTDIR [TRAIN_SECONDS] [EVAL_SECONDS]
# env:   COSTLEARN_DEVICE=cuda (default) or opencl, to rehearse on PoCL
set -euo pipefail
OUT="${1:?usage: scripts/collect_gpu.sh OUTDIR [TRAIN_SECONDS] [EVAL_SECONDS]}"
TRAIN_S="${2:-330}"
EVAL_S="${3:-120}"
DEV="${COSTLEARN_DEVICE:-cuda}"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
if [ "$DEV" = cuda ]; then
    POOL=160
    FRESH="1,4096,4096 4096,4096,4096 8,8192,1024 16,16,16 129,129,129 257,4096,257 2048,1024,768"
else
    POOL=24
    FRESH="1,1024,1024 16,16,16 129,129,129 4,1024,256"
fi
mkdir -p "$OUT"
"$PY" -m costlearn collect --device "$DEV" --data "$OUT/data" --budget "$TRAIN_S" --pool "$POOL" \
    --seed 0 --no-progress
"$PY" -m costlearn collect --device "$DEV" --data "$OUT/eval" --budget "$EVAL_S" --pool "$POOL" \
    --seed 0 --no-progress --shapes $FRESH
if [ "$DEV" = cuda ]; then
    "$PY" scripts/vendor_times.py --out "$OUT/vendor.json" $FRESH
fi
for d in "$OUT"/data/* "$OUT"/eval/*; do
    [ -d "$d" ] && "$PY" -m costlearn compact "$d"
done
ls -la "$OUT"/data/* "$OUT"/eval/*
