"""Carrying a triton_mm model from one GPU to another, on real Inductor logs:
A100 (all three logs, ../shared/data/inductor-autoheuristic-a100/) -> H100
(random log, ../shared/data/inductor-autoheuristic-h100-random/), and back.

For each dtype both devices measure and each n in --n (destination problems
seen), a random n of the destination's problems (grouped by problem: M, N,
K, layout) are given to ``costlearn.learn.transfer.transfer`` (the product's path:
the source model's training rows plus those n problems, the destination's
feasibility rules, the vendor floor calibrated on held-out destination
problems, or the zero-shot floor below 8); every other destination problem
is scored by what ``predict_best`` answers (``costlearn.learn.study.decision_scores``),
against

- a model trained on those n problems alone (``costlearn.learn.train.train``, floor
  included; from 8 problems),
- the vendor library alone, and the best fixed config of the n problems (of
  the source's rows at n = 0).

Regret: measured time of the answer / best measured of all (vendor
included) - 1, geometric mean over problems. The zero-shot margin sweep
scores the zero-shot model's predictions with the floor's margin rule at each
margin of the floor's grid (the vendor unless a tile config is predicted
faster by that many doublings).

The data has no licence: everything stays under --work (default
out/transfer-study/). Writes reports/transfer_a100_h100.md and the docs/results.md
block between ``<!-- transfer:begin -->`` and ``<!-- transfer:end -->``.

    .venv/bin/python -m studies.transfer                 # about 60 min on 2 cores
    .venv/bin/python -m studies.transfer --dtypes tfloat32 --n 0 8   # a few minutes
    .venv/bin/python -m studies.transfer --mechanisms --work out/ts-m   # the ways of carrying it
    .venv/bin/python -m studies.transfer --tables-from out/transfer-study out/ts-m   # report from both
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

from studies import docs_from_reports  # noqa: E402

from studies.a100 import import_logs  # noqa: E402
from costlearn.collect.loop import write_device_json  # noqa: E402
from costlearn.collect.dataset import write_part  # noqa: E402
from costlearn.core.device import preset  # noqa: E402
from costlearn.families import VENDOR_CONFIG_ID, get_family  # noqa: E402
from costlearn.features import get_feature_set  # noqa: E402
from costlearn.features.device import DEVICE_FEATURES, device_features  # noqa: E402
from costlearn.learn.holdout import MARGIN_GRID  # noqa: E402
from costlearn.learn.metrics import evaluate_rows, geomean_regret  # noqa: E402
from costlearn.model import artifact_layout, get_model  # noqa: E402
from costlearn.model.transfer import ROOFLINE_COLUMN  # noqa: E402
from costlearn.serve.predictor import Predictor  # noqa: E402
from costlearn.learn.study import decision_scores  # noqa: E402
from costlearn.learn.train import train  # noqa: E402
from costlearn.learn.transfer import transfer  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
SOURCES = {"a100": SHARED / "inductor-autoheuristic-a100" / "a100_mm.zip",
           "h100": SHARED / "inductor-autoheuristic-h100-random" / "h100_mm.zip"}
PROBLEM = ["m", "n", "k", "layout"]
FAMILY = "triton_mm"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def source_models(work: Path, device: str, dtypes) -> Path:
    """Train (once) the source device's model of each dtype on all its logs:
    the artifact ``transfer`` starts from. No hold-out: its floor is not used."""
    models = work / "models-source"
    for dt in dtypes:
        if (artifact_layout.model_folder(models, device, FAMILY, dt) / artifact_layout.SIDECAR).exists():
            continue
        log(f"training the {device} {dt} source model")
        train(work / device / "data" / device, models, family=FAMILY, dtype=dt, holdout=False)
    return models


def subset_folder(rows: pd.DataFrame, device: str, folder: Path) -> Path:
    """A dataset folder holding ``rows`` (and the device's description)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    write_device_json(preset(device), folder)
    if len(rows):
        write_part(rows, folder)
    return folder


def margin_regret(rows: pd.DataFrame, pred: np.ndarray, margin: float) -> float:
    """Geomean regret of the floor's margin rule without evidence: the vendor
    unless the best predicted tile is ``margin`` doublings faster."""
    t = rows.assign(_p=np.log2(pred))
    t = t.groupby(PROBLEM + ["config_id"], observed=True).agg(time_us=("time_us", "median"), _p=("_p", "mean"))
    out = []
    for _, g in t.groupby(level=[0, 1, 2, 3], observed=True):
        ids = g.index.get_level_values("config_id")
        best = g["time_us"].min()
        vend, tiles = g[ids == VENDOR_CONFIG_ID], g[ids != VENDOR_CONFIG_ID]
        if vend.empty or tiles.empty:
            continue
        j = tiles["_p"].idxmin()
        pick = tiles.loc[j, "time_us"] if tiles.loc[j, "_p"] < vend["_p"].iloc[0] - margin else vend["time_us"].iloc[0]
        out.append(pick / best - 1.0)
    return geomean_regret(np.array(out))


def best_fixed_regret(train_rows: pd.DataFrame, test: pd.DataFrame) -> float:
    """Regret of the one config with the lowest geomean slowdown over the
    training problems that measured it on all of them (the vendor counts)."""
    g = train_rows.groupby(PROBLEM + ["config_id"], observed=True)["time_us"].median().reset_index()
    g["slow"] = np.log2(g["time_us"] / g.groupby(PROBLEM, observed=True)["time_us"].transform("min"))
    n = g.groupby(PROBLEM, observed=True).ngroups
    agg = g.groupby("config_id")["slow"].agg(["mean", "count"])
    agg = agg[agg["count"] >= 0.9 * n]
    fixed = agg["mean"].idxmin()
    t = test.groupby(PROBLEM + ["config_id"], observed=True)["time_us"].median().reset_index()
    out = []
    for _, p in t.groupby(PROBLEM, observed=True):
        hit = p[p["config_id"] == fixed]
        if len(hit):
            out.append(hit["time_us"].iloc[0] / p["time_us"].min() - 1.0)
    return geomean_regret(np.array(out)) if out else float("nan")


def run_direction(work: Path, src: str, dst: str, rows: dict, dtypes, ns, seed: int) -> tuple[list, list]:
    """Every (dtype, n) of one direction: table rows and the zero-shot sweep."""
    models_src = source_models(work, src, dtypes)
    table, sweep = [], []
    for dt in dtypes:
        d = rows[dst][rows[dst]["dtype"] == dt].reset_index(drop=True)
        if d.empty or not (artifact_layout.model_folder(models_src, src, FAMILY, dt)
                           / artifact_layout.SIDECAR).exists():
            continue
        probs = d[PROBLEM].drop_duplicates().reset_index(drop=True)
        pid = d.merge(probs.reset_index(), on=PROBLEM, how="left")["index"].to_numpy()
        perm = np.random.default_rng(seed).permutation(len(probs))
        for n in ns:
            if n and n > len(probs) - 8:
                continue
            seen = np.isin(pid, perm[:n])
            test = d[~seen]
            folder = subset_folder(d[seen], dst, work / f"{src}-to-{dst}" / f"data-{dt}-{n}" / dst)
            models = work / f"{src}-to-{dst}" / f"models-{dt}-{n}"
            shutil.rmtree(models, ignore_errors=True)
            shutil.copytree(artifact_layout.model_folder(models_src, src, FAMILY, dt),
                            artifact_layout.model_folder(models, src, FAMILY, dt))
            t0 = time.perf_counter()
            res = transfer(models, src, dst, data_dir=folder, family=FAMILY, dtype=dt, seed=seed, progress=log)[0]
            secs = time.perf_counter() - t0
            pred = Predictor(res.path.parent)
            sc = decision_scores(pred, test)
            rec = dict(direction=f"{src} -> {dst}", dtype=dt, n=n, test_problems=int(len(sc)),
                       transfer=geomean_regret(sc["top1_regret"].dropna()),
                       transfer_argmin=geomean_regret(sc["model_regret"].dropna()),
                       vendor=geomean_regret(sc["vendor_regret"].dropna()),
                       unmeasured=int(sc["top1_regret"].isna().sum()), vendor_chosen=float(
                           (sc["chosen_by"] != "predicted").mean()), transfer_s=secs)
            rec["best_fixed"] = best_fixed_regret(d[seen] if n else rows[src][rows[src]["dtype"] == dt], test)
            rec["destination_only"] = float("nan")
            if n >= 8:
                own = work / f"{src}-to-{dst}" / f"own-{dt}-{n}"
                shutil.rmtree(own, ignore_errors=True)
                r = train(folder, own, family=FAMILY, dtype=dt)
                rec["destination_only"] = geomean_regret(decision_scores(Predictor(r.path.parent), test)
                                                         ["top1_regret"].dropna())
            log(str({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items()}))
            table.append(rec)
            if n == 0:
                raw = pred.artifact.model().predict(test)
                sweep += [dict(direction=f"{src} -> {dst}", dtype=dt, margin_log2=m, regret=margin_regret(test, raw, m),
                               vendor=rec["vendor"]) for m in MARGIN_GRID]
    return table, sweep


MECHANISMS = ("destination only", "zero-shot, log2 time", "zero-shot, time / roofline",
              "continued boosting", "per-config offset", "joint, no descriptors", "joint (costlearn transfer)")
"""The ways of using the source's rows compared by :func:`mechanisms`."""


def mechanisms(rows: dict, src: str, dst: str, dtypes, ns, seeds) -> list:
    """Each way of carrying the model, scored by the model's own ranking of
    the measured configs of the destination problems not seen (top-1 vs best
    of all; no floor, no coverage): the measurement behind the choice of
    :class:`costlearn.model.transfer.MultiDeviceXGBModel`.

    The ablations are fit with XGBoost directly (400 rounds, step 0.1,
    depth 8) on the product's feature set and descriptors; the last column is
    the product's model itself."""
    import xgboost as xgb
    fs = get_feature_set("analytic")
    spec = {src: preset(src), dst: preset(dst)}
    params = dict(objective="reg:squarederror", max_depth=8, eta=0.1, subsample=0.8, colsample_bytree=0.8,
                  min_child_weight=2, nthread=1, seed=0, tree_method="hist")

    def matrix(r, dev, dt):
        X = fs.transform(r, spec[dev]).to_numpy(np.float64)
        desc = np.broadcast_to(device_features(spec[dev], dt), (len(r), len(DEVICE_FEATURES)))
        return np.hstack([X, desc]).astype(np.float32)

    def fit(X, y, rounds=400, w=None, base=None):
        return xgb.train(params, xgb.DMatrix(X, label=y, weight=w), num_boost_round=rounds, xgb_model=base)

    def top1(test, pred):
        return geomean_regret(evaluate_rows(test, pred)["top1_regret"].to_numpy())

    out = []
    roof_col = list(fs.feature_names(get_family(FAMILY))).index(ROOFLINE_COLUMN)
    for dt in dtypes:
        a = rows[src][rows[src]["dtype"] == dt].reset_index(drop=True)
        d = rows[dst][rows[dst]["dtype"] == dt].reset_index(drop=True)
        if a.empty or d.empty:
            continue
        Xa, Xd = matrix(a, src, dt), matrix(d, dst, dt)
        ya, yd = np.log2(a["time_us"].to_numpy()), np.log2(d["time_us"].to_numpy())
        ra, rd = Xa[:, roof_col].astype(np.float64), Xd[:, roof_col].astype(np.float64)
        nf = Xa.shape[1] - len(DEVICE_FEATURES)
        log(f"mechanisms {src} -> {dst} {dt}: source fits")
        src_time, src_eff = fit(Xa, ya), fit(Xa, ya - ra)
        probs = d[PROBLEM].drop_duplicates().reset_index(drop=True)
        pid = d.merge(probs.reset_index(), on=PROBLEM, how="left")["index"].to_numpy()
        for n in ns:
            if n and n > len(probs) - 8:
                continue
            for seed in (seeds if n else seeds[:1]):
                perm = np.random.default_rng(seed).permutation(len(probs))
                seen = np.isin(pid, perm[:n])
                test, Xt = d[~seen], Xd[~seen]
                rec = dict(direction=f"{src} -> {dst}", dtype=dt, n=n, seed=seed, test_problems=int(len(probs) - n))
                rec["vendor only"] = geomean_regret(evaluate_rows(test, np.where(
                    test["config_id"].eq(VENDOR_CONFIG_ID), 1.0, 2.0))["top1_regret"].to_numpy())
                rec["zero-shot, log2 time"] = top1(test, src_time.predict(xgb.DMatrix(Xt)))
                eff = src_eff.predict(xgb.DMatrix(Xt)) + rd[~seen]
                rec["zero-shot, time / roofline"] = top1(test, eff)
                if n:
                    Xs, ys, rs = Xd[seen], yd[seen], rd[seen]
                    rec["destination only"] = top1(test, fit(Xs[:, :nf], ys, 200).predict(xgb.DMatrix(Xt[:, :nf])))
                    rec["continued boosting"] = top1(test, fit(Xs, ys - rs, 50, base=src_eff).predict(
                        xgb.DMatrix(Xt)) + rd[~seen])
                    res = ys - rs - src_eff.predict(xgb.DMatrix(Xs))
                    agg = pd.DataFrame(dict(c=d["config_id"][seen].to_numpy(), r=res)).groupby("c")["r"].agg(
                        ["sum", "count"])
                    off = (agg["sum"] / (agg["count"] + 2)).to_dict()           # shrunk to 0 with 2 pseudo-rows
                    rec["per-config offset"] = top1(test, eff + test["config_id"].map(off).fillna(0).to_numpy())
                    w = np.r_[np.ones(len(ya)), np.full(seen.sum(), max(1.0, 0.2 * len(ya) / seen.sum()))]
                    nodev = fit(np.vstack([Xa, Xs])[:, :nf], np.r_[ya - ra, ys - rs], w=w)
                    rec["joint, no descriptors"] = top1(test, nodev.predict(xgb.DMatrix(Xt[:, :nf])) + rd[~seen])
                    both = pd.concat([a.assign(device_slug=src), d[seen].assign(device_slug=dst)], ignore_index=True)
                    mdl = get_model("xgboost_devices", device_specs={src: spec[src]}).fit(both, spec[dst])
                    rec["joint (costlearn transfer)"] = top1(test, mdl.predict(test))
                log(str({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items()}))
                out.append(rec)
    return out


def format_mechanisms(mech: pd.DataFrame) -> str:
    """Mean over seeds per (direction, dtype, n)."""
    cols = ["vendor only"] + [m for m in MECHANISMS if m in mech]
    g = mech.groupby(["direction", "dtype", "n"], sort=False)
    lines = ["| direction | dtype | destination problems seen | seeds | " + " | ".join(cols) + " |",
             "|---|---|---:|---:|" + "---:|" * len(cols)]
    for (dirn, dt, n), sub in g:
        lines.append(f"| {dirn} | {dt} | {n} | {len(sub)} | " + " | ".join(pct(sub[c].mean()) if c in sub else ""
                                                                          for c in cols) + " |")
    return "\n".join(lines)


def pct(x) -> str:
    return "" if not np.isfinite(x) else f"{100 * x:.2f} %"


def format_tables(table: pd.DataFrame, sweep: pd.DataFrame) -> str:
    out = ["| direction | dtype | destination problems seen | problems scored | transfer (predict_best) | "
           "destination only | vendor only | best fixed | vendor kept |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in table.itertuples():
        out.append(f"| {r.direction} | {r.dtype} | {r.n} | {r.test_problems} | {pct(r.transfer)} | "
                   f"{pct(r.destination_only)} | {pct(r.vendor)} | {pct(r.best_fixed)} | "
                   f"{100 * r.vendor_chosen:.0f} % |")
    if len(sweep):
        out += ["", "Zero-shot: the floor's margin rule at each margin (no destination evidence)", "",
                "| direction | dtype | vendor only | " + " | ".join(f"margin {m:g}" for m in MARGIN_GRID) + " |",
                "|---|---|---:|" + "---:|" * len(MARGIN_GRID)]
        for (dirn, dt), g in sweep.groupby(["direction", "dtype"], sort=False):
            out.append(f"| {dirn} | {dt} | {pct(g['vendor'].iloc[0])} | "
                       + " | ".join(pct(v) for v in g.sort_values("margin_log2")["regret"]) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "transfer-study")
    ap.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16", "float32", "tfloat32"])
    ap.add_argument("--n", nargs="+", type=int, default=[0, 8, 16, 32, 64, 128])
    ap.add_argument("--reverse-n", nargs="*", type=int, default=[0, 32],
                    help="n of the H100 -> A100 direction (none: skip it)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report", type=Path, default=ROOT / "reports" / "transfer_a100_h100.md")
    ap.add_argument("--mechanisms", action="store_true", help="only compare the ways of carrying the model "
                    "(model ranking, no floor; n in 0, 8, 32) into WORK/mechanisms.csv; --tables-from adds it to "
                    "the report")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds of --mechanisms")
    ap.add_argument("--tables-from", type=Path, nargs="+", metavar="WORK",
                    help="measure nothing: write the report and docs/results.md from these earlier runs' CSVs (runs of "
                         "other dtypes, e.g. in parallel processes; a later run's row replaces an earlier one's of "
                         "the same direction, dtype and n)")
    args = ap.parse_args(argv)
    if args.tables_from:
        table = pd.concat([pd.read_csv(w / "transfer.csv") for w in args.tables_from
                           if (w / "transfer.csv").is_file()], ignore_index=True)
        sweep = pd.concat([pd.read_csv(w / "zero_shot_margins.csv") for w in args.tables_from
                           if (w / "zero_shot_margins.csv").is_file()
                           and (w / "zero_shot_margins.csv").stat().st_size > 1], ignore_index=True)
        args.work = args.tables_from[0]
        # a later run replaces an earlier one's rows of the same (direction, dtype, n)
        table = table.drop_duplicates(["direction", "dtype", "n"], keep="last")
        sweep = sweep.drop_duplicates(["direction", "dtype", "margin_log2"], keep="last")
        return write_outputs(table.sort_values(["direction", "dtype", "n"], kind="stable"), sweep, args)
    rows = {}
    for dev, zpath in SOURCES.items():
        if not zpath.is_file():
            print(f"{zpath} is missing: this study needs the shared Inductor logs", file=sys.stderr)
            return 2
        rows[dev] = import_logs(zpath, args.work / dev, dev)
    if args.mechanisms:
        mech = pd.DataFrame(mechanisms(rows, "a100", "h100", args.dtypes, [0, 8, 32], args.seeds))
        mech.to_csv(args.work / "mechanisms.csv", index=False)
        print(format_mechanisms(mech))
        return 0
    table, sweep = run_direction(args.work, "a100", "h100", rows, args.dtypes, args.n, args.seed)
    t2, s2 = run_direction(args.work, "h100", "a100", rows, args.dtypes, args.reverse_n, args.seed)
    table, sweep = pd.DataFrame(table + t2), pd.DataFrame(sweep + s2)
    table.to_csv(args.work / "transfer.csv", index=False)
    sweep.to_csv(args.work / "zero_shot_margins.csv", index=False)
    return write_outputs(table, sweep, args)


def write_outputs(table: pd.DataFrame, sweep: pd.DataFrame, args) -> int:
    """Write the report (and, for the default one, the docs' blocks made from it); print the tables."""
    body = format_tables(table, sweep)
    mech_csv = [w / "mechanisms.csv" for w in (args.tables_from or [args.work]) if (w / "mechanisms.csv").is_file()]
    mech = format_mechanisms(pd.concat([pd.read_csv(p) for p in mech_csv], ignore_index=True)) if mech_csv else ""
    args.report.write_text(
        "# Transfer across devices: A100 <-> H100 (Inductor triton_mm logs)\n\nGenerated by "
        "`studies/transfer.py`; see its docstring for the protocol. Top-1 regret (geomean) on the destination "
        "problems not seen, against the best measured of all (cuBLAS included).\n\n" + body + "\n"
        + ("\n## Which way of carrying the model works\n\nThe model's own ranking of the measured configs (no floor, "
           "no coverage), mean over seeds; `mechanisms()` in the script.\n\n" + mech + "\n" if mech else ""))
    if args.report.resolve() == ROOT / "reports" / "transfer_a100_h100.md":
        docs_from_reports.update(["transfer", "headline"])
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
