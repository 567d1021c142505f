"""Does the out-of-distribution flag mean something? Flag rates on three kinds
of shapes, and the measured regret of flagged against unflagged shapes.

    python -m studies.ood [--models DIR] [--device SLUG] [--n-measure 12]
                                [--measure-dir data/<slug>/ood-study] [--eval-dir data/<slug>/eval]
                                [--budget 900] [--no-measure] [--out reports/ood_study.md]

Flag rates (no device needed), on shapes none of which is a training shape:

- *drawn like the training shapes*: the collection's own sampler
  (``ShapeBounds.for_device``), another seed, kept (as the collector keeps
  them) when some candidate's block tile fits the shape; the bar is at most
  5 % flagged (the unfiltered draw is shown too);
- *outside the ranges*: such a draw with one extent (at random) set to
  2^u times the trained maximum, u uniform in [0.5, 3];
- *far from any training shape*: log-uniform in the trained ranges, kept
  when the nearest training shape is at least 2 doublings away in
  (log2 M, log2 N, log2 K) (a criterion independent of the flag's own
  log-shape-and-aspect metric and calibrated threshold);

for the last two the bar is at least 95 % flagged.

Regret: ``--n-measure`` flagged shapes (half outside the ranges, half far
inside them, at most 2^30 flop so PoCL measures each within a minute, and
some candidate fitting) are measured
on the local device (every model candidate that fits, the collection's
protocol) into ``--measure-dir`` (resumable), and scored with the unflagged
fresh shapes already measured in ``--eval-dir`` (``costlearn evaluate``):
top-1 regret of the model on flagged vs unflagged shapes.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from studies import docs_from_reports  # noqa: E402


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.1%}"


def flag_rates(pred, n: int, seed: int):
    """The three shape groups and the share of each the predictor flags."""
    import numpy as np

    from costlearn.collect.sampler import ShapeBounds, sample_shapes

    env = pred.envelope
    train = {tuple(s) for s in env.shapes}
    bounds = ShapeBounds.for_device(pred.spec.device_type == "cpu")
    rng = np.random.default_rng([seed, 11])
    drawn = [s for s in sample_shapes(3 * n, bounds, rng) if s not in train]
    # The collector keeps a drawn shape only when a candidate's block tile fits
    # it (else it has no rows, e.g. (1, 2, 10)); "drawn like the training
    # shapes" applies the same filter. The unfiltered draw is reported too.
    like = [s for s in drawn if pred.feasible(pred.problem(*s)).any()][:n]
    unfiltered = drawn[:n]
    hi = [env.envelope["max"][d] for d in "MNK"]
    lo = [env.envelope["min"][d] for d in "MNK"]
    outside = []
    for s in sample_shapes(n, bounds, rng):
        s = list(s)
        d = int(rng.integers(3))
        s[d] = int(round(hi[d] * 2.0 ** rng.uniform(0.5, 3.0)))
        outside.append(tuple(s))
    from scipy.spatial import cKDTree
    tree = cKDTree(np.log2(np.asarray(env.shapes, np.float64)))
    far = []
    while len(far) < n:
        cand = np.round(2.0 ** rng.uniform(np.log2(lo), np.log2(hi), size=(20 * n, 3))).astype(np.int64)
        dist, _ = tree.query(np.log2(cand))
        far = list(dict.fromkeys(far + [tuple(int(v) for v in c) for c in cand[dist >= 2.0]]))
    far = far[:n]
    groups = {"drawn like the training shapes": like,
              "drawn by the sampler, unfiltered (incl. shapes no candidate fits)": unfiltered,
              "outside the trained ranges": outside,
              "inside the ranges, >= 2 doublings from any training shape": far}
    rates = {}
    for name, shapes in groups.items():
        flagged = [s for s in shapes if env.reasons(*s)]
        rates[name] = (len(shapes), len(flagged))
    return groups, rates


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="model store root (default: the committed models/)")
    ap.add_argument("--device", default=None, help="model device folder (default: the only one)")
    ap.add_argument("--family", default="gemm")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--shapes", type=int, default=2000, help="shapes per flag-rate group (default: 2000)")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--n-measure", type=int, default=12, help="flagged shapes to measure (default: 12)")
    ap.add_argument("--measure-dir", default=None, help="where flagged-shape measurements go "
                    "(default: data/<device>/ood-study)")
    ap.add_argument("--eval-dir", default=None, help="fresh unflagged measurements (default: data/<device>/eval)")
    ap.add_argument("--budget", type=float, default=900.0, help="seconds of measuring at most (default: 900)")
    ap.add_argument("--no-measure", action="store_true", help="score what is already measured")
    ap.add_argument("--out", default=None, help="also write the tables (Markdown) here")
    args = ap.parse_args(argv)
    import numpy as np
    import pandas as pd

    from costlearn.collect.dataset import load
    from costlearn.learn.evaluate import score
    from costlearn.serve.predictor import Predictor
    from costlearn.model.store import resolve_model

    folder = resolve_model(args.device, args.family, args.dtype, args.models)
    shown = folder.resolve().relative_to(ROOT) if folder.resolve().is_relative_to(ROOT) else folder
    pred = Predictor(folder)
    env = pred.envelope
    groups, rates = flag_rates(pred, args.shapes, args.seed)
    cal = env.envelope["calibration"]
    lines = [f"model: {shown}; envelope: {len(env.shapes)} training shapes, density threshold "
             f"{env.threshold_log2:.2f} doublings (the {cal['quantile']:.0%} quantile of held-out nearest-"
             f"neighbour distances over {cal['folds']} folds; median {cal.get('heldout_nn_p50', float('nan')):.2f})",
             "", "| shapes | count | flagged | bar |", "|---|---|---|---|"]
    bars = {"drawn like the training shapes": "<= 5%",
            "drawn by the sampler, unfiltered (incl. shapes no candidate fits)": "(context)"}
    for name, (total, flagged) in rates.items():
        lines.append(f"| {name} | {total} | {flagged / total:.1%} | {bars.get(name, '>= 95%')} |")
    ok = rates["drawn like the training shapes"][1] <= 0.05 * rates["drawn like the training shapes"][0] and all(
        f >= 0.95 * t for name, (t, f) in rates.items() if name not in bars)

    data_root = ROOT / "data" / pred.device
    measure_dir = Path(args.measure_dir) if args.measure_dir else data_root / "ood-study"
    eval_dir = Path(args.eval_dir) if args.eval_dir else data_root / "eval"
    if not args.no_measure and args.n_measure > 0:
        from costlearn.collect.backends import get_backend
        from costlearn.collect.loop import collect
        backend = get_backend("auto")
        if backend.spec.slug != pred.spec.slug:
            print(f"this device is {backend.spec.name}, the model's is {pred.spec.name}: not measuring",
                  file=sys.stderr)
        else:
            cap = 2.0 ** 30
            pick = []
            for name in ("outside the trained ranges", "inside the ranges, >= 2 doublings from any training shape"):
                cands = [s for s in groups[name] if env.reasons(*s) and 2.0 * s[0] * s[1] * s[2] <= cap
                         and pred.feasible(pred.problem(*s)).any()]
                pick += cands[: args.n_measure // 2]
            collect(backend, measure_dir, budget_s=args.budget, family=pred.family, dtype=pred.dtype, shapes=pick,
                    pool=list(pred.configs), configs_per_shape=len(pred.configs), seed=args.seed, progress=True)
    frames = [load(d)[0] for d in (measure_dir, eval_dir) if d.is_dir()]
    if frames:
        from costlearn.learn.metrics import geomean_regret
        res = score(pred.artifact, pd.concat(frames, ignore_index=True))
        per = res.per_shape
        lines += ["", f"Measured regret on {pred.spec.name} (every fitting candidate measured per shape; noise "
                  f"floor {res.noise_floor:.1%}, differences below it count as 0):", "",
                  "| model | shapes | flagged | top-1 regret mean | geomean | p90 | max | top-5 mean |",
                  "|---|---|---|---|---|---|---|---|"]
        for model in (res.model, "best_fixed", "roofline"):
            for flag, sub in per[per["model"] == model].groupby("ood"):
                r = sub["top1_regret"].to_numpy(np.float64)
                lines.append(f"| {model} | {len(sub)} | {'yes' if flag else 'no'} | {_pct(r.mean())} | "
                             f"{_pct(geomean_regret(r))} | {_pct(float(np.quantile(r, .9)))} | "
                             f"{_pct(r.max())} | {_pct(sub['top5_regret'].mean())} |")
        flagged = per[(per["model"] == res.model) & per["ood"]]
        if len(flagged):
            lines += ["", "Flagged shapes measured:", "", f"| M | N | K | {res.model} top-1 regret | reasons |",
                      "|---|---|---|---|---|"]
            for r in flagged.sort_values(["m", "n", "k"]).itertuples(index=False):
                lines.append(f"| {r.m} | {r.n} | {r.k} | {_pct(r.top1_regret)} | {r.ood_reasons} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        if Path(args.out).resolve() == ROOT / "reports" / "ood_study.md":
            docs_from_reports.update(["ood"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
