"""Import speed and memory of an Inductor AutoHeuristic mm log (issue 37:
a 10^7-line log must import in <= 1 GB of memory).

Writes a synthetic log of N lines (a header and the Inductor columns; its
times are a formula, not measurements: the log exists to be read, and
nothing of it is kept) and imports it into an empty dataset folder in a
fresh process per size, reporting wall seconds, rows per second and the
process's peak resident memory (``ru_maxrss``). Prints a table.

    python -m benchmarks.imports [--lines 200000 1000000 10000000] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADER = {"shared_memory": 166912, "device_capa": [8, 0], "name": "mm", "numerical_features": [],
          "categorical_features": []}
COLUMNS = ("m,k,n,mat1_dtype,mat2_dtype,mat1_stride_0,mat1_stride_1,mat2_stride_0,mat2_stride_1,mat1_iscontig,"
           "mat2_iscontig,using_tf32,choice,feedback")
CHOICES = ["extern_mm"] + [f"type=triton_BLOCK-M={bm}_BLOCK-K={bk}_BLOCK-N={bn}_numstages={s}_numwarps={w}"
                           for bm, bn, bk, w, s in [(64, 64, 32, 4, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4),
                                                    (128, 128, 32, 8, 3), (32, 32, 32, 2, 2), (64, 32, 64, 4, 5)]]


def write_log(path: Path, lines: int) -> None:
    """``lines`` records: problems of 7 choices each, distinct shapes."""
    with open(path, "w") as fh:
        fh.write(json.dumps(HEADER) + "\n" + COLUMNS + "\n")
        for i in range(lines):
            p, c = divmod(i, len(CHOICES))
            m, n, k = 64 + p % 4096, 128 + (p // 4096) % 4096, 256 + p // (4096 * 4096)
            fh.write(f"{m},{k},{n},torch.float16,torch.float16,{k},1,{n},1,True,True,not_float_32,{CHOICES[c]},"
                     f"{0.01 + 1e-3 * c + 1e-9 * m * n * k:.6f}\n")


CHILD = """
import sys, time, resource
from costlearn.interop import import_file
t = time.perf_counter()
rep = import_file("inductor", sys.argv[1], device="a100", data_root=sys.argv[2])
print(rep.rows_added, rep.parts, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, nargs="+", default=[200_000, 1_000_000])
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-import-"))
    work.mkdir(parents=True, exist_ok=True)
    print("| lines | rows added | parts | seconds | rows/s | peak memory MB |")
    print("|---|---|---|---|---|---|")
    for n in args.lines:
        log, data = work / f"log-{n}.txt", work / f"data-{n}"
        shutil.rmtree(data, ignore_errors=True)
        t0 = time.perf_counter()
        write_log(log, n)
        print(f"(wrote the {n}-line log in {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        out = subprocess.run([sys.executable, "-c", CHILD, str(log), str(data)], capture_output=True, text=True,
                             check=True).stdout.split()
        rows, parts, secs, rss_kb = int(out[0]), int(out[1]), float(out[2]), int(out[3])
        print(f"| {n:,} | {rows:,} | {parts} | {secs:.1f} | {rows / secs:,.0f} | {rss_kb / 1024:.0f} |")
        log.unlink()
        shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
