"""``costlearn train``, ``transfer`` and ``migrate-models``: fitting a model per (family, dtype) of a dataset and
printing its held-out tables; carrying a device's models to another; converting old artifacts."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from costlearn.cli.common import (DATA_HELP, add_dtypes_arg, dataset_folder, models_out, nonneg_int, old_spelling,
                                  positive_int)
from costlearn.collect.sampler import STRATEGIES
from costlearn.core.progress import ProgressLog
from costlearn.families import FAMILIES


def train_stage(data, models_dir, *, family: str | None, dtypes, learner: str, feature_set: str | None,
                if_new_problems: int | None = None) -> list:
    """Train one model per (family, dtype) pair of a dataset folder (those of
    ``family`` and ``dtypes`` where given) and print each held-out table; a
    pair with too few rows, or whose training fails with a ValueError or
    ArtifactError, is skipped, named with the reason, and the others are
    trained. With ``if_new_problems`` N, a pair whose model in the store was
    trained on all but fewer than N of its problems is left as it is, in one
    line (:func:`costlearn.learn.retrain.new_problems`).

    Returns
    -------
    list of TrainResult
        In the order of the pairs, (family, dtype) sorted.

    Raises
    ------
    ValueError
        If the folder holds no rows of the pairs asked for, or no pair could
        be trained (each named with why).
    """
    from costlearn.collect.dataset import load
    from costlearn.model.artifact_layout import ArtifactError, models_root
    from costlearn.learn.retrain import new_problems
    from costlearn.learn.train import MIN_PROBLEMS, MIN_ROWS, pair_counts, train
    folder = dataset_folder(data)
    settings = {} if feature_set is None else dict(feature_set=feature_set)
    with ProgressLog() as progress:
        progress(f"reading {folder}")
        frame = load(folder)[0]
        counts = pair_counts(frame)
    asked = [p for p in sorted(counts) if (family is None or p[0] == family) and (not dtypes or p[1] in dtypes)]
    if not asked:
        which = f"{family or '*'}/{'|'.join(dtypes) if dtypes else '*'}"
        raise ValueError(f"{folder} holds no valid {which} rows; it holds "
                         f"{[f'{f}/{d}' for f, d in sorted(counts)] or 'none'}")
    skipped = {p: f"{counts[p][0]} valid rows over {counts[p][1]} shapes; need {MIN_ROWS} over {MIN_PROBLEMS} "
               "(collect longer, or import more measurements)"
               for p in asked if counts[p][0] < MIN_ROWS or counts[p][1] < MIN_PROBLEMS}
    if len(asked) > 1:
        print(f"{folder} holds rows of {len(asked)} (family, dtype) pairs" + (" asked for" if family or dtypes else "")
              + "; training " + ", ".join(f"{f}/{d}" for f, d in asked if (f, d) not in skipped), file=sys.stderr)
    results = []
    for fam, dt in asked:
        if (fam, dt) in skipped:
            print(f"skipping {fam}/{dt}: {skipped[fam, dt]}", file=sys.stderr)
            continue
        if if_new_problems is not None:
            news = new_problems(folder, models_root(models_dir or None), family=fam, dtype=dt, frame=frame)
            if not news.due(if_new_problems):
                print(f"{news.folder} is current: {news.new} new problem{'' if news.new == 1 else 's'} since it was "
                      f"trained, fewer than --if-new-problems {if_new_problems} (--if-new-rows counts problems too: "
                      "a problem counts once however many configs were measured on it); not retrained")
                continue
            if news.damaged:
                print(f"{news.folder}: the model there does not load ({news.damaged}); training a new one",
                      file=sys.stderr)
            elif news.has_model:
                print(f"{news.folder}: {news.new} new problems since it was trained (--if-new-problems "
                      f"{if_new_problems}); retraining", file=sys.stderr)
        t0 = time.perf_counter()
        try:
            with ProgressLog() as progress:          # a line per stage in a log, at least every EVERY_S s
                res = train(folder, models_root(models_dir or None), family=fam, dtype=dt, model=learner,
                            settings=settings, progress=progress)
        except (ValueError, ArtifactError) as e:
            skipped[fam, dt] = str(e)
            print(f"skipping {fam}/{dt}: {e}", file=sys.stderr)
            continue
        results.append(res)
        print(f"trained {learner} on {res.rows} {res.family}/{res.dtype} rows of {folder} (device {res.device}) over "
              f"{res.shapes} shapes in {time.perf_counter() - t0:.1f}s -> {res.path.parent}"
              + (" (replaced the model that was there)" if res.replaced else ""))
        _print_trained(res, learner)
    if skipped:
        why = "; ".join(f"{f}/{d}: {r}" for (f, d), r in sorted(skipped.items()))
        if not results:
            raise ValueError(f"no (family, dtype) pair of {folder} could be trained: {why}")
        print(f"trained {len(results)} of {len(asked)} (family, dtype) pairs; skipped {why}", file=sys.stderr)
    return results


def _print_trained(res, learner: str = "xgboost") -> None:
    """What :func:`train_stage` prints of one trained model: its shortlist
    table, held-out table (and a line where the model is no better than a
    baseline in it), vendor floor and what its data covers."""
    sl = json.loads((res.path).read_text()).get("shortlist")
    if sl:
        print(f"shortlist table: the {sl['tiles']} best tile configs at {'x'.join(map(str, sl['grid']))} points "
              f"per layout, {sl['trees']} trees at the query (built in {sl['build_s']:.0f}s): a deep model "
              "answers unseen problems in microseconds (python -m benchmarks.predict measures it)")
    if res.holdout:
        print(f"held-out problems ({res.holdout_kind}): top-1 regret mean / geomean, top-5 mean, Kendall tau")
        for name, sm in res.holdout.items():
            print(f"  {name:<11} {sm['top1_mean']:7.1%} {sm['top1_geomean']:7.1%} {sm['top5_mean']:7.1%} "
                  f"{sm['kendall_tau']:6.3f}")
        from costlearn.learn.metrics import no_better_than
        worse = no_better_than(res.holdout, learner)
        if worse is not None:
            figure = "mean" if worse.metric == "top1_mean" else "geomean"
            print(f"warning: the {learner} model is no better than the {worse.baseline} baseline on these held-out "
                  f"problems (top-1 regret {figure} {worse.model_regret:.1%} against {worse.baseline_regret:.1%}): "
                  f"{res.rows} rows over {res.shapes} shapes are too few, or too unlike the held-out problems "
                  f"({res.holdout_kind}), to learn from; it is saved all the same, but measure more rows like the "
                  "problems you compile (`costlearn collect`, or import more measurements) and train again")
    cal = (res.floor or {}).get("calibration", {})
    if "rule_geomean" in cal:
        f = res.floor
        rho, tau, est = f["unsure_regret"], f["vendor_near_min"], f.get("estimate")
        rule = [f"it is predicted {2 ** f['margin_log2'] - 1:.0%} faster than the vendor library"]
        if tau is not None:
            rule.append(f"the vendor lost more than {tau:.0%} on the nearest held-out problems")
        if est is not None:
            rule.append(f"the vendor model's estimate of its time over the vendor's, {est[1]:g} deviations up, is "
                        f"below {2 ** -est[0]:.2f}")
        flagged = (f"flagged (vendor kept) where the model's held-out top-1 regret there is above {rho:.0%}"
                   if rho is not None else "no problem is flagged for the model's held-out regret")
        outside = "; outside the extent envelope the vendor is kept" if f.get("ood_fallback") else ""
        tr = f.get("transfer")
        own = sorted((tr or {}).get("intercepts", {}).items())
        a = f"{tr['intercept']:+.2f}" if tr and not own else tr and "a (" + ", ".join(
            f"{v:+.2f} {lay}" for lay, v in own) + f", {tr['intercept']:+.2f} any other layout)"
        far = (f"; farther than {tr['near_log2']:g} doublings from every training shape, where the estimate "
               f"extrapolates, a tile config only where {a} + {tr['slope']:.2f} x the estimate "
               f"(the line the estimates held to on the {tr['problems']} held-out problems) is below 0"
               if tr else "")
        which = "the near-data rule on every one (the line was fitted on them)" if tr else "the floor"
        print(f"vendor floor: a tile config is chosen where {' and '.join(rule)}{far}; {flagged}{outside}. On the "
              f"held-out problems, top-1 vs best of all (geomean): {cal['rule_geomean']:.2%} with {which}, "
              f"{cal['argmin_geomean']:.2%} plain argmin, {cal['vendor_geomean']:.2%} vendor only")
    if res.data_coverage:
        from costlearn.learn.coverage import coverage_lines
        tr = (res.floor or {}).get("transfer")
        print("what the data covers, per layout (training problems; answers to real models' layer shapes: BERT, "
              "GPT-2, LLaMA-7B, ViT-B/16, ResNet-50):")
        for line in coverage_lines(res.data_coverage, res.dtype, None if tr is None else (tr["near_log2"],)):
            print(line)


def cmd_train(args) -> int:
    models_out(args.models)
    train_stage(args.data, args.models, family=args.family, dtypes=args.dtype, learner=args.learner,
                feature_set=args.feature_set, if_new_problems=args.if_new_problems)
    return 0


def cmd_transfer(args) -> int:
    from costlearn.model.artifact_layout import models_root
    from costlearn.model.transfer import MIN_DESTINATION_PROBLEMS
    from costlearn.learn.transfer import transfer
    from costlearn.collect.dataset import device_dataset_folder
    if Path(models_root(args.models or None)).is_dir():       # else transfer names the store it cannot read
        models_out(args.models)
    data = device_dataset_folder(args.data, args.to.lower()) if args.data else None
    with ProgressLog() as progress:
        results = transfer(models_root(args.models or None), args.source, args.to, data_dir=data,
                           source_data=args.source_data,
                           family=args.family, dtype=args.dtype, destination_share=args.destination_share,
                           replace=args.replace, progress=progress, problems=args.problems, strategy=args.strategy)
    for r in results:
        h = r.holdout.get("xgboost_devices", {})
        held = (f"held-out top-1 {100 * h['top1_geomean']:.2f} % over {h['shapes']} {r.destination} problems"
                if h else "no held-out figures (too few destination problems)")
        kind = (f"zero-shot: every prediction is flagged until {MIN_DESTINATION_PROBLEMS} {r.destination} problems "
                "are measured" if r.zero_shot else "adapted")
        print(f"{r.family}/{r.dtype}: {r.source} -> {r.destination} from {r.source_rows} {r.source} rows and "
              f"{r.destination_rows} {r.destination} rows over {r.destination_problems} problems; {kind}; {held}; "
              f"{r.path.parent}")
    return 0


def cmd_migrate_models(args) -> int:
    from costlearn.learn.migrate import migrate_models
    done = migrate_models(args.root)
    if not done:
        print(f"{args.root}: no artifact in the layout before kernel families")
    for old, new in done:
        print(f"{old} -> {new}")
    return 0


def add_train(sub) -> None:
    from costlearn.features import FEATURE_SETS
    from costlearn.model import MODELS

    p = sub.add_parser("train", help="fit the cost model on a dataset",
                       description="Fit a cost model on data/<device>/ and write "
                       "models/<device>/<family>/<dtype>/; prints held-out regret against the baselines.")
    p.add_argument("--data", default="data", help=f"{DATA_HELP}; of a root, the one device's folder in it, else "
                   "this machine's (default: data)")
    p.add_argument("--models", default=None,
                   help="model store root (default: $COSTLEARN_MODELS, else the source tree's models/)")
    p.add_argument("--family", default=None, choices=FAMILIES.names(),
                   help="kernel family of the rows to train on (default: every one in the folder)")
    add_dtypes_arg(p, "every one in the folder; each (family, dtype) with enough rows gets its model, the others "
                    "are named with why")
    p.add_argument("--learner", default="xgboost", choices=MODELS.names(),
                   help="the cost model to fit (default: xgboost)")
    old_spelling(p, "--model", "--learner", check=MODELS.names())
    p.add_argument("--feature-set", default=None, choices=FEATURE_SETS.names(),
                   help="features a gradient-boosted model uses (default: analytic; raw and derived are ablations)")
    p.add_argument("--if-new-problems", "--if-new-rows", dest="if_new_problems", type=nonneg_int, default=None,
                   metavar="N", help="retrain a (family, dtype) model only where the dataset holds at least N "
                   "problems (M, N, K, dtype, layout, epilogue) it was not trained on, or it has no model yet; else "
                   "say so and leave it (default: always train); --if-new-rows is the same, and counts problems too, "
                   "not rows")
    p.set_defaults(func=cmd_train)


def add_transfer(sub) -> None:
    p = sub.add_parser("transfer", help="carry a device's models to another device (zero-shot or from a few "
                       "measurements)",
                       description="For every (family, dtype) model of the --from device, fit one model on its "
                       "training rows and the --to device's rows in --data (none: zero-shot, from the device "
                       "descriptors alone), with the --to device's feasibility rules, and write it to "
                       "MODELS/<to>/<family>/<dtype>/, served by predict --model <to> like any other. A zero-shot "
                       "model's predictions are flagged OOD, naming the source device.")
    p.add_argument("--from", dest="source", required=True, help="device folder of the models to carry (e.g. a100)")
    p.add_argument("--to", required=True, help="destination device folder (a preset, e.g. h100, or the device of "
                   "--data's device.json)")
    p.add_argument("--models", default=None, help="model store root holding the --from device's models (default: "
                   "$COSTLEARN_MODELS, else the source tree's models/)")
    p.add_argument("--data", default=None, help=f"{DATA_HELP}: the --to device's rows (e.g. data or data/h100); "
                   "omit for zero-shot")
    p.add_argument("--source-data", default=None, help="the source's dataset folder (default: the one its model "
                   "was trained on)")
    p.add_argument("--family", default=None, choices=FAMILIES.names(), help="only this family")
    add_dtypes_arg(p, "every dtype the --from device has a model of")
    p.add_argument("--destination-share", type=float, default=0.2, help="weight of the destination's rows "
                   "against the source's, in (0, 1] (default: %(default)s)")
    p.add_argument("--replace", action="store_true", help="overwrite a destination model trained on its own rows")
    p.add_argument("--problems", type=positive_int, default=None, metavar="K",
                   help="learn from only K of --data's problems, chosen by --strategy from them as a pool (a "
                   "destination log) (default: all of them)")
    p.add_argument("--strategy", choices=STRATEGIES, default="random",
                   help="with --problems: how the K are chosen: random, prior (nearest to real models' shapes), or "
                   "active (rounds: an ensemble of models on the source's rows and those chosen so far, taking the "
                   "problems where its pick is least sure) (default: random)")
    p.set_defaults(func=cmd_transfer)


def add_migrate_models(sub) -> None:
    p = sub.add_parser("migrate-models", help="convert model artifacts of the layout before kernel families",
                       description="Move every artifact ROOT/<device>/<dtype>/ (schema 2) to "
                       "ROOT/<device>/gemm/<dtype>/ (schema 3): the same model file, its compiled scorer and "
                       "cascade, the baselines' states.")
    p.add_argument("root", help="model store root, e.g. models")
    p.set_defaults(func=cmd_migrate_models)


PARSERS = {"train": add_train, "transfer": add_transfer, "migrate-models": add_migrate_models}
"""The commands this module adds, each by its function of the subparsers."""
