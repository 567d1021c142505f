"""Vendor-library reference times: cuBLAS float32 (CuPy matmul, TF32 off) on
given shapes, timed like our kernels (warm-up, n back-to-back calls between
one event pair, median over rounds, rotating buffers).

    python scripts/vendor_times.py --out vendor.json 1,4096,4096 4096,4096,4096 ...

Runs from the source tree without xgboost. Needs CuPy and an NVIDIA GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("CUPY_TF32", "0")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shapes", nargs="+", metavar="M,N,K")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    from costlearn.collect.backends import get_backend
    from costlearn.cli.common import parse_shapes
    from costlearn.collect.protocol import Protocol
    be = get_backend("cuda")
    rows = []
    for m, n, k in parse_shapes(args.shapes):
        t = be.vendor_time_us(m, n, k, Protocol(rounds=args.rounds))
        rows.append(dict(m=m, n=n, k=k, dtype="float32", library="cuBLAS via cupy.matmul (TF32 off)",
                         time_us=t, tflops=2.0 * m * n * k / t / 1e6))
        print(f"{m}x{n}x{k}: {t:.1f} us, {rows[-1]['tflops']:.2f} TFLOP/s", flush=True)
    Path(args.out).write_text(json.dumps(dict(provenance=be.provenance(), clocks=be.clocks(), rows=rows),
                                          indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
