"""Ragged operands: where both operands' rows allow no vector load, do tile
configs fall off a cliff, and does the training data hold such problems?

    python -m studies.ragged --log DEVICE=ZIP [--log DEVICE=ZIP ...] [--per-problem NAME=CSV ...]
                             [--work DIR] [--report FILE]

A Triton matmul loads a row of an operand in vectors of up to 16 bytes only
where the row's start is aligned that far: its *vector width* here is the
largest power of two dividing the operand's leading dimension, in elements,
at most 16 bytes' worth (A's leading dimension is K in layouts N?, M in T?;
B's is N in ?N, K in ?T). Every problem of each log (``--log``: a zip of
PyTorch Inductor AutoHeuristic mm logs, imported with the product's
importer into ``--work``; K = 1 left out: no K loop) falls in a class (A's
width, B's width). Per log, dtype and class, the first table gives:

- **problems**;
- **tile configs off a cliff**: the share of the tile configs timed on the
  class's problems that ran at least :data:`CLIFF` times slower than the
  best config of their problem;
- **best tile / cuBLAS**: the geometric mean over the class's problems of
  the best tile config's time over the vendor library's;
- **cuBLAS alone**: the vendor library's geometric-mean regret (time over the
  best measured, vendor included, - 1).

``--per-problem``: ``studies.thin_data``'s per-problem file of a split
(``<work>/<split>/per_problem.csv``), whose second table splits that
split's scores by the same classes: ``predict_best``'s answer, the plain
argmin of the model and cuBLAS alone, each the geometric-mean regret.

The logs have no licence: the imported rows stay under --work (default
out/ragged-study/). Writes --report (default reports/ragged_study.md).
"""
from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.core.dtypes import get_dtype
from costlearn.families import VENDOR_CONFIG_ID
from costlearn.learn.metrics import geomean_regret
from costlearn.model.vendor import problem_table as vendor_problems
from studies.a100 import import_logs

CLIFF = 10.0
"""A tile config at least this many times slower than the best on a problem falls off a cliff there."""
VECTOR_BYTES = 16
"""The widest load one thread issues (``ld.global.v4.b32``): the width of a vector load is capped at this."""
PROBLEM = ["source_file", "dtype", "m", "n", "k", "layout", "epilogue"]


def vector_width(ld, elem_bytes) -> np.ndarray:
    """Elements one aligned vector load moves from rows whose leading dimension is ``ld`` (int array): the
    largest power of two dividing it, at most ``VECTOR_BYTES // elem_bytes``."""
    ld = np.asarray(ld, np.int64)
    cap = VECTOR_BYTES // np.asarray(elem_bytes, np.int64)
    return np.minimum(ld & -ld, cap)


def classes(m, n, k, layout, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(A's, B's) vector width of each problem (arrays of the problems' extents, layouts and dtypes)."""
    layout = np.asarray(layout).astype(str)
    nbytes = np.array([get_dtype(str(d)).element_bytes for d in dtype], np.int64)
    lda = np.where(np.char.startswith(layout, "N"), k, m)
    ldb = np.where(np.char.endswith(layout, "N"), n, k)
    return vector_width(lda, nbytes), vector_width(ldb, nbytes)


def class_problems(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per problem (K > 1) of ``rows`` (dataset rows: the problem columns, ``config_id``, ``time_us``):
    its class (``width_a``, ``width_b``), its tile configs timed (``tiles``) and those :data:`CLIFF` times slower
    than the best (``cliffs``), log2 of the best tile's time over the vendor's (``tile_lr``: the vendor model's
    target, :func:`costlearn.model.vendor.problem_table`) and the vendor's regret, ``max(1, 2**-tile_lr) - 1``
    (both NaN where the vendor was not measured). A config timed more than once counts with its median."""
    rows = rows[rows["k"] > 1].assign(epilogue=rows["epilogue"] if "epilogue" in rows else "none")
    t = rows.groupby(PROBLEM + ["config_id"], observed=True)["time_us"].median().reset_index()
    t["ratio"] = t["time_us"] / t.groupby(PROBLEM, observed=True)["time_us"].transform("min")
    tiles = t[t["config_id"].astype(str) != VENDOR_CONFIG_ID].assign(cliff=lambda d: d["ratio"] >= CLIFF)
    out = tiles.groupby(PROBLEM, observed=True).agg(tiles=("ratio", "size"), cliffs=("cliff", "sum")).reset_index()
    y = pd.concat([vendor_problems(g).assign(source_file=log, dtype=dtype)
                   for (log, dtype), g in rows.groupby(["source_file", "dtype"], observed=True)])
    y = y.astype({c: out[c].dtype for c in PROBLEM})           # (a group without a vendor time: an empty frame)
    out = out.merge(y, on=PROBLEM, how="left")
    out["tile_lr"] = out.pop("y").to_numpy(np.float64)
    out["vendor_regret"] = np.maximum(1.0, np.exp2(-out["tile_lr"])) - 1.0
    out["width_a"], out["width_b"] = classes(out["m"], out["n"], out["k"], out["layout"], out["dtype"])
    return out


def class_table(per: pd.DataFrame, device: str) -> list[str]:
    """The first table's rows (Markdown) of one device's problems."""
    lines = []
    for (log, dtype, wa, wb), g in per.groupby(["source_file", "dtype", "width_a", "width_b"], observed=True):
        lr = g["tile_lr"].to_numpy()
        ratio = f"{2.0 ** np.mean(lr[np.isfinite(lr)]):.2f}" if np.isfinite(lr).any() else "n/a"
        lines.append(f"| {device} | {log} | {dtype} | {wa} | {wb} | {len(g)} | "
                     f"{_pct(g['cliffs'].sum() / g['tiles'].sum())} | {ratio} | "
                     f"{_pct(geomean_regret(g['vendor_regret']))} |")
    return lines


def picks_table(name: str, per: pd.DataFrame) -> list[str]:
    """The second table's rows of one ``studies.thin_data`` per-problem file."""
    wa, wb = classes(per["m"], per["n"], per["k"], per["layout"], per["dtype"])
    per = per.assign(width_a=wa, width_b=wb)
    lines = []
    for (dtype, a, b), g in per.groupby(["dtype", "width_a", "width_b"]):
        lines.append(f"| {name} | {dtype} | {a} | {b} | {len(g)} | {int((g['pick'] != VENDOR_CONFIG_ID).sum())} | "
                     f"{_pct(geomean_regret(g['top1_regret']))} | {_pct(geomean_regret(g['model_regret']))} | "
                     f"{_pct(geomean_regret(g['vendor_regret']))} |")
    return lines


def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{100 * x:.2f}%"


def _pairs(values: list, flag: str) -> list[tuple[str, Path]]:
    out = []
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"{flag} {v!r}: give NAME=PATH")
        out.append((name, Path(path)))
    return out


def read_per_problem(path: Path) -> pd.DataFrame:
    """A ``studies.thin_data`` per-problem file; SystemExit naming the file where it is not one."""
    need = ["m", "n", "k", "dtype", "layout", "pick", "top1_regret", "model_regret", "vendor_regret"]
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: {str(e)[:200]}") from None
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise SystemExit(f"{path}: no column {missing}; give a studies.thin_data per_problem.csv")
    return df


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", action="append", default=[], metavar="DEVICE=ZIP", required=True,
                    help="a zip of Inductor mm logs and the device preset they were measured on")
    ap.add_argument("--per-problem", action="append", default=[], metavar="NAME=CSV",
                    help="a studies.thin_data per_problem.csv, scored by class")
    ap.add_argument("--work", type=Path, default=Path("out/ragged-study"))
    ap.add_argument("--report", type=Path, default=Path("reports/ragged_study.md"))
    args = ap.parse_args(argv)
    logs, picks = _pairs(args.log, "--log"), _pairs(args.per_problem, "--per-problem")
    per_problem = [(name, read_per_problem(path)) for name, path in picks]
    lines = ["# Ragged operands: vector widths and cliffs", "",
             "Written by `python -m studies.ragged " + " ".join(f"--log {d}={z.name}" for d, z in logs)
             + "".join(f" --per-problem {n}=.../{p.parent.name}/{p.name}" for n, p in picks)
             + "`. Vector width: elements one aligned load moves from the operand's rows (the largest power of "
             "two dividing its leading dimension, at most 16 bytes' worth). "
             f"A cliff: a tile config at least {CLIFF:g} times slower than the best on the problem. Problems with "
             "K = 1 left out.", "",
             "| device | log | dtype | A's width | B's width | problems | tile configs off a cliff | "
             "best tile / cuBLAS | cuBLAS alone |", "|---|---|---|---|---|---|---|---|---|"]
    for device, zpath in logs:
        try:
            rows = import_logs(zpath, args.work / device, device)
        except (OSError, zipfile.BadZipFile) as e:
            raise SystemExit(f"--log {device}={zpath}: {str(e)[:200]}") from None
        lines += class_table(class_problems(rows), device)
    if per_problem:
        lines += ["", "By class, a `studies.thin_data` split's scores (geometric-mean regret vs the best measured):",
                  "", "| split | dtype | A's width | B's width | problems | tile answers | predict_best | "
                  "plain argmin | cuBLAS alone |", "|---|---|---|---|---|---|---|---|---|"]
        for name, df in per_problem:
            lines += picks_table(name, df)
    text = "\n".join(lines) + "\n"
    print(text)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
