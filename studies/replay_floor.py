"""Where a replayed fleet's pure prediction loses: could the vendor floor,
told by the fleet's own measurements, close the gap?

    python -m studies.replay_floor --per-problem CSV[,CSV] [--radius R] [--neighbours K] [--align E]
                                   [--report FILE]

CSV: a ``studies.fleet_replay --per-problem`` file (one row per stream
problem: its position, layout, extents, ``pure_chosen_by`` and the regrets
``pure`` and ``vendor``). Over the stream's second half, as the replay
scores it, this prints:

- **pure**: the replay's pure prediction;
- **perfect floor**: where the model picked a tile (``pure_chosen_by`` is
  ``predicted``), the better of that tile and cuBLAS; elsewhere the answer
  as it was. What a floor that always knew would reach with the same model;
- **floor told by the tunings**: where the model picked a tile, cuBLAS
  instead when the model's pick lost to cuBLAS on average (log time) on the
  ``--neighbours`` nearest earlier problems of the layout within ``--radius``
  (log2 distance of (M, N, K)) where it also picked a tile. A fleet knows
  this for each earlier problem: its top K and cuBLAS were timed. The rule
  uses only problems answered before the one it decides (as a fleet would).

Where the loss lies, a second table:

- **the worst problem**: its shape and regret, and the pure figure without
  it (how much one problem carries);
- **unaligned picks**: where the model picked a tile on a problem whose K or
  N is not a multiple of ``--align`` elements (default 8: 16 bytes of
  float16; Triton vectorises a row's loads only at that alignment, so such
  a problem is unlike the aligned ones the data mostly holds), their pure
  regret and cuBLAS's there, and the second half with every such pick
  turned to cuBLAS: whether a floor that knows alignment would help.

Regrets as ``studies.fleet_replay``'s: geometric mean of time / best - 1,
problems whose pure answer the log never timed left out. A problem where the
model kept cuBLAS cannot be flipped to a tile here (the CSV does not hold the
tile the model would have picked), so the rules are bounded by that.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.learn.metrics import geomean_regret

COLUMNS = ("position", "layout", "m", "n", "k", "pure_chosen_by", "pure", "vendor")


def read(path: Path) -> pd.DataFrame:
    """The per-problem rows of one replay, in stream order; SystemExit naming the file where it is none."""
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:                   # no file, empty, not CSV
        raise SystemExit(f"{path}: {str(e)[:200]}") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise SystemExit(f"{path}: no column {missing}; give a `studies.fleet_replay --per-problem` file")
    for c in ("position", "m", "n", "k", "pure", "vendor"):
        v = pd.to_numeric(df[c], errors="coerce")
        bad = v.isna() & df[c].notna() if c in ("pure", "vendor") else ~(v >= 1)
        bad |= v < 0
        if bad.any():
            raise SystemExit(f"{path}: column {c} holds {str(df[c][bad].iloc[0])!r} (row {int(bad.idxmax()) + 2}); "
                             f"{'a regret is a number >= 0 or empty' if c in ('pure', 'vendor') else 'at least 1'}")
        df[c] = v
    df = df.sort_values("position").reset_index(drop=True)
    if not np.isfinite(df["pure"].iloc[len(df) // 2:]).any():
        raise SystemExit(f"{path}: no problem of the stream's second half has a timed pure answer")
    return df


def told_floor(df: pd.DataFrame, radius: float, neighbours: int) -> tuple[np.ndarray, int, int]:
    """The second half's regrets under the floor told by the tunings (see the module); how many picks it
    turned to cuBLAS, and how many of those cuBLAS did win."""
    logs = np.log2(df[["m", "n", "k"]].to_numpy(np.float64))
    picked = (df["pure_chosen_by"] == "predicted").to_numpy()
    timed = np.isfinite(df["pure"].to_numpy()) & np.isfinite(df["vendor"].to_numpy())
    advantage = np.log1p(df["pure"].to_numpy()) - np.log1p(df["vendor"].to_numpy())
    layout = df["layout"].to_numpy()
    out, flips, right = [], 0, 0
    for i in range(len(df) // 2, len(df)):
        pure, vendor = df.at[i, "pure"], df.at[i, "vendor"]
        if not np.isfinite(pure):
            continue
        answer = pure
        if picked[i]:
            seen = np.flatnonzero(picked[:i] & timed[:i] & (layout[:i] == layout[i]))
            dist = np.sqrt(((logs[seen] - logs[i]) ** 2).sum(axis=1))
            near = seen[np.argsort(dist, kind="stable")[:neighbours]]
            near = near[np.sqrt(((logs[near] - logs[i]) ** 2).sum(axis=1)) <= radius]
            if len(near) and advantage[near].mean() > 0 and np.isfinite(vendor):
                answer, flips, right = vendor, flips + 1, right + int(vendor < pure)
        out.append(answer)
    return np.array(out), flips, right


def figures(df: pd.DataFrame, radius: float, neighbours: int, align: int = 8) -> dict:
    """The second-half regrets of one replay (pure, the perfect and the told floor; the worst problem, the
    unaligned picks: see the module), and the counts behind them."""
    half = df.iloc[len(df) // 2:]
    half = half[np.isfinite(half["pure"])]
    picked = half["pure_chosen_by"] == "predicted"
    with_vendor = picked & np.isfinite(half["vendor"])
    perfect = np.where(with_vendor, np.fmin(half["pure"], half["vendor"]), half["pure"])
    told, flips, right = told_floor(df, radius, neighbours)
    worst = half["pure"].idxmax()
    unaligned = with_vendor & ((half["k"] % align != 0) | (half["n"] % align != 0))
    return dict(problems=len(half), picked=int(picked.sum()),
                vendor_better=int((picked & (half["vendor"] < half["pure"])).sum()),
                pure=geomean_regret(half["pure"]), perfect=geomean_regret(perfect), told=geomean_regret(told),
                flips=flips, flips_right=right,
                worst=f"{half.at[worst, 'm']}x{half.at[worst, 'n']}x{half.at[worst, 'k']} {half.at[worst, 'layout']}",
                worst_regret=float(half.at[worst, "pure"]), without_worst=geomean_regret(half["pure"].drop(worst)),
                unaligned=int(unaligned.sum()), unaligned_pure=geomean_regret(half["pure"][unaligned]),
                unaligned_vendor=geomean_regret(half["vendor"][unaligned]),
                unaligned_to_vendor=geomean_regret(np.where(unaligned, half["vendor"], half["pure"])))


def report(rows: list, radius: float, neighbours: int, align: int = 8) -> str:
    lines = ["# Where a replayed fleet's pure prediction loses: the vendor floor", "",
             f"Written by `python -m studies.replay_floor --per-problem ... --radius {radius:g} --neighbours "
             f"{neighbours} --align {align}` from `studies.fleet_replay --per-problem` files; the stream's second "
             "half.", "",
             "| replay | problems | model picked a tile | cuBLAS was better there | pure | perfect floor | "
             "floor told by the tunings | picks turned to cuBLAS (cuBLAS won) |", "|---|---|---|---|---|---|---|---|"]
    for name, f in rows:
        lines.append(f"| {name} | {f['problems']} | {f['picked']} | {f['vendor_better']} | {100 * f['pure']:.2f}% | "
                     f"{100 * f['perfect']:.2f}% | {100 * f['told']:.2f}% | {f['flips']} ({f['flips_right']}) |")
    lines += ["", "Where it loses: the worst problem, and the model's picks on problems whose K or N is not a "
              f"multiple of {align} elements.", "",
              "| replay | pure | worst problem | its regret | pure without it | unaligned picks | their pure | "
              "cuBLAS there | pure with them turned to cuBLAS |", "|---|---|---|---|---|---|---|---|---|"]
    for name, f in rows:
        lines.append(f"| {name} | {100 * f['pure']:.2f}% | {f['worst']} | {100 * f['worst_regret']:.0f}% | "
                     f"{100 * f['without_worst']:.2f}% | {f['unaligned']} | {100 * f['unaligned_pure']:.2f}% | "
                     f"{100 * f['unaligned_vendor']:.2f}% | {100 * f['unaligned_to_vendor']:.2f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-problem", required=True, metavar="CSV[,CSV]", help="fleet_replay --per-problem files")
    ap.add_argument("--radius", type=float, default=2.0, help="largest log2 distance of a neighbour (default 2)")
    ap.add_argument("--neighbours", type=int, default=5, help="nearest earlier problems asked (default 5)")
    ap.add_argument("--align", type=int, default=8, metavar="E",
                    help="elements K and N must be a multiple of to count as aligned (default 8: 16 bytes of float16)")
    ap.add_argument("--report", type=Path, default=None, metavar="FILE", help="write the tables there too")
    args = ap.parse_args(argv)
    if args.neighbours < 1 or not args.radius > 0 or args.align < 1:
        ap.error("--neighbours and --align must be >= 1 and --radius > 0")
    files = [Path(p) for p in args.per_problem.split(",") if p]
    if not files:
        ap.error("--per-problem names no file")
    rows = [(p.stem, figures(read(p), args.radius, args.neighbours, args.align)) for p in files]
    text = report(rows, args.radius, args.neighbours, args.align)
    print(text)
    if args.report is not None:
        args.report.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
