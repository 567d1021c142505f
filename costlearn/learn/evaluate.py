"""Evaluation: measure fresh shapes exhaustively over a model's candidate set
and compare the model's choices with the baselines' (design.md, "Metrics")."""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.loop import collect
from costlearn.collect.dataset import current_rows, load, noise_floor, rows_where, valid_rows
from costlearn.families import VENDOR_CONFIG_ID
from costlearn.collect.protocol import Protocol
from costlearn.core.problem import EPILOGUES
from costlearn.learn.metrics import evaluate_rows, random_scores, summarize, vendor_only_scores
from costlearn.model import BASELINES
from costlearn.model import artifact as _artifact
from costlearn.collect.noise import NoiseFloors, noise_floors
from costlearn.collect.sampler import ShapeBounds, sample_shapes, shape_class
from costlearn.collect.space import tile_fits_problem
from costlearn.core.version import __version__

__all__ = ["fresh_shapes", "evaluate", "score", "epilogue_subsets",
           "ranked_rows", "EvalResult", "format_table", "format_per_shape",
           "format_by_class", "write_report", "write_plots", "FIXED_SHAPES"]

FIXED_SHAPES = {
    # Always part of the fresh set: batch-1, skinny, small (launch-overhead
    # bound), just past a tile multiple, large K, square.
    "cpu": [(1, 1024, 1024), (1, 256, 768), (4, 1024, 256), (16, 16, 16), (129, 129, 129),
            (257, 33, 257), (48, 40, 1000), (200, 300, 150)],
    "gpu": [(1, 4096, 4096), (4096, 4096, 4096), (8, 8192, 1024), (16, 16, 16), (129, 129, 129),
            (257, 4096, 257), (256, 256, 8192), (2048, 1024, 768)],
}


def fresh_shapes(train_shapes, n_random: int, bounds: ShapeBounds, kind: str, seed: int = 1) -> list:
    """The evaluation shapes: :data:`FIXED_SHAPES` of ``kind`` ("cpu" or
    "gpu") plus ``n_random`` shapes drawn like training shapes (another
    seed), none of them a training shape.

    Raises
    ------
    ValueError
        If ``kind`` is unknown.
    """
    if kind not in FIXED_SHAPES:
        raise ValueError(f"kind={kind!r}; allowed: {sorted(FIXED_SHAPES)}")
    if not 0 <= n_random <= 1000:
        raise ValueError(f"n_random={n_random!r}; must be in [0, 1000]")
    train = {tuple(int(x) for x in s) for s in train_shapes}
    out = [s for s in FIXED_SHAPES[kind] if s not in train]
    rng = np.random.default_rng([seed, 99])
    for s in sample_shapes(n_random * 4 + 8, bounds, rng):
        if len(out) >= len(FIXED_SHAPES[kind]) + n_random:
            break
        if s not in train and s not in out:
            out.append(s)
    return out


@dataclass
class EvalResult:
    """Per-shape and summary metrics of one evaluation.

    Attributes
    ----------
    per_shape : DataFrame
        One row per (model, shape): regrets, tau, MAPE, ``ood``,
        ``shape_class``.
    summary : dict of str to dict
        For each model, summaries over ``all``, ``in_envelope``, ``ood``
        (and ``epilogue <name>`` for each epilogue where the rows hold
        several, :func:`epilogue_subsets`)``
        shapes (:func:`costlearn.learn.metrics.summarize`); with a vendor candidate
        among the rows also ``tile_only`` (vendor rows left out: regret
        against the best tile config), and the ``vendor_only`` ranking.
    rows : DataFrame
        The fresh measurements used.
    noise_floor : float
        Relative noise floor of the fresh measurements: across sessions where
        the data folder has re-timings, else within the session
        (:mod:`costlearn.collect.noise`); a regret at or below it
        counts as 0 (a tie). 0 when the rows carry no repeats.
    predictions : dict of str to ndarray
        Each model's predictions, aligned with ``rows``.
    vendor_us : dict
        (M, N, K) -> the vendor library's time for the shape in µs
        (cuBLAS through CuPy on CUDA); empty where there is none.
    model : str
        The artifact's model (the others are baselines).
    time_models : tuple of str
        Models whose predictions are microseconds (MAPE is shown for them).
    model_info : dict
        The scored artifact: ``device``, ``family``, ``dtype``, ``model``,
        ``sha256`` (first 12), training ``rows`` and ``shapes``.
    noise_floors : costlearn.collect.noise.NoiseFloors
        Within- and across-session noise floors of the data scored; ``noise_floor``
        is their :attr:`~costlearn.collect.noise.NoiseFloors.tie`.
    hidden_by_noise : int
        Problems on which the model's top-1 regret is above 0 but at or below
        the noise floor, so it prints as 0 (a tie).
    """

    per_shape: pd.DataFrame
    summary: dict
    rows: pd.DataFrame
    noise_floor: float = 0.0
    predictions: dict = None
    vendor_us: dict = None
    model: str = "xgboost"
    time_models: tuple = ()
    model_info: dict = None
    hidden_by_noise: int = 0
    noise_floors: NoiseFloors = None

    @property
    def models(self) -> list[str]:
        """The scored models, the artifact's first."""
        return list(self.summary)


def ranked_rows(rows: pd.DataFrame, min_tile_caps) -> pd.DataFrame:
    """The rows whose config the predictor ranks for the row's problem (block
    tile within the problem, :func:`costlearn.collect.space.tile_fits_problem` with
    the family's ``min_tile_caps``: ``min_tile_caps``), so a score covers exactly
    the candidates a prediction chooses from."""
    fits = tile_fits_problem(*(rows[c].to_numpy(np.int64) for c in ("block_m", "block_n", "block_k", "m", "n", "k")),
                             min_tile_caps)
    return rows[np.asarray(fits, bool)].reset_index(drop=True)


def score(art_folder, rows: pd.DataFrame, seed: int = 0, data=None) -> EvalResult:
    """Score the model in ``art_folder`` as it is served (its scorer,
    :meth:`~costlearn.model.artifact.Artifact.predict_rows`), the baselines
    and a random ranking on measured rows.

    Parameters
    ----------
    art_folder : path or costlearn.model.artifact.Artifact
        Model artifact folder, or the artifact already loaded.
    rows : DataFrame
        Fresh measurements (any status). Scored: valid rows of the current
        template and protocol, of the artifact's device, family and dtype,
        whose config is a candidate the predictor ranks for the row's problem.
    seed : int
        Seed of the random ranking baseline.
    data : path, optional
        The dataset folder ``rows`` came from, named in the report header.

    Returns
    -------
    EvalResult

    Raises
    ------
    ValueError
        If no row is left to score.
    costlearn.model.artifact_layout.ArtifactError
        If the artifact cannot be loaded.
    """
    art = art_folder if isinstance(art_folder, _artifact.Artifact) else _artifact.load(art_folder)
    rows, _ = current_rows(rows)
    rows = valid_rows(rows)
    held = sorted({f"{d}/{f}/{t}" for d, f, t in rows[["device_slug", "family", "dtype"]].astype(str)
                   .drop_duplicates().itertuples(index=False)}) if not rows.empty else []
    rows = rows[rows_where(rows, device_slug=art.spec.slug, family=art.family.name, dtype=art.dtype)
                & rows["layout"].isin(set(art.layouts)).to_numpy(bool)
                & rows["epilogue"].isin(set(art.epilogues)).to_numpy(bool)
                & rows["config_id"].isin(set(art.candidates["config_id"])).to_numpy(bool)]
    rows = ranked_rows(rows, art.family.min_tile_caps(art.spec))
    if rows.empty:
        raise ValueError(f"no valid measurements of the {art.device}/{art.family.name}/{art.dtype} model's candidates "
                         f"(layouts {list(art.layouts)}) to score; the measurements hold (device/family/dtype) "
                         f"{held or 'no valid rows'}")
    product = str(art.sidecar["model"])           # scored as served: the scorer, not the training library's copy
    baselines = {name: art.baseline(name) for name in BASELINES}
    shapes = rows[["m", "n", "k"]].drop_duplicates()
    # The in-envelope / OOD split is by shape; identity reasons (another
    # template or costlearn version) would mark every shape.
    env = art.envelope
    ood = {(m, n, k): "; ".join(env.reasons(int(m), int(n), int(k)))
           for m, n, k in shapes.itertuples(index=False)}
    if data is not None and Path(data).is_dir():
        floors_ = noise_floors(data, rows)          # the across-session floor where re-timings exist
    else:
        floors_ = NoiseFloors(within=noise_floor(rows))
    noise = floors_.tie
    preds = {product: art.predict_rows(rows), **{name: mdl.predict(rows) for name, mdl in baselines.items()}}
    frames, summary = [], {}
    preds["random"] = random_scores(rows, seed)
    vendor = rows["config_id"].eq(VENDOR_CONFIG_ID).to_numpy(bool)
    if vendor.any():
        preds["vendor_only"] = vendor_only_scores(rows)
    for name in preds:
        per = evaluate_rows(rows, preds[name], noise_rel=noise)
        per["model"] = name
        per["ood_reasons"] = [ood[(m, n, k)] for m, n, k in per[["m", "n", "k"]].itertuples(index=False)]
        per["ood"] = per["ood_reasons"] != ""
        per["shape_class"] = [shape_class(m, n, k) for m, n, k in per[["m", "n", "k"]].itertuples(index=False)]
        frames.append(per)
        summary[name] = {"all": summarize(per), "in_envelope": summarize(per[~per["ood"]]),
                         "ood": summarize(per[per["ood"]])}
        for subset, epi in epilogue_subsets(per).items():
            summary[name][subset] = summarize(per[per["epilogue"] == epi])
        if vendor.any() and name != "vendor_only":
            summary[name]["tile_only"] = summarize(evaluate_rows(rows[~vendor], preds[name][~vendor], noise))
    mine = frames[0]                      # the product's per-problem rows (models are scored product first)
    raw = (mine["top1_time_us"] / mine["best_time_us"] - 1.0).to_numpy()     # top-1 regret before the noise tie
    training = art.sidecar.get("training", {}) or {}
    info = dict(device=art.device, device_name=art.spec.name, family=art.family.name, dtype=art.dtype,
                model=product,
                sha256=art.model_sha256[:12], rows=training.get("rows"), shapes=training.get("shapes"),
                folder=_shown(art.path), trained_on=training.get("dataset"), data=None if data is None else str(data))
    return EvalResult(per_shape=pd.concat(frames, ignore_index=True), summary=summary, rows=rows,
                      noise_floor=noise, predictions=preds, vendor_us={}, model=product,
                      time_models=(product,) * bool(art.sidecar.get("predicts_time"))
                      + tuple(n for n, m in baselines.items() if m.predicts_time), model_info=info,
                      hidden_by_noise=int(((raw > 0) & (raw <= noise)).sum()), noise_floors=floors_)


def epilogue_subsets(per: pd.DataFrame) -> dict:
    """``{"epilogue <name>": name}`` for each epilogue of the per-problem
    rows ``per`` when they hold several (the summaries :func:`score` adds),
    else empty."""
    epis = sorted(per["epilogue"].unique(), key=EPILOGUES.index) if "epilogue" in per else []
    return {f"epilogue {e}": e for e in epis} if len(epis) > 1 else {}


def _shown(path) -> str:
    """``path`` relative to the working directory when it lies under it (a
    report written from the source tree names ``models/...``, not the
    developer's absolute path), else as it is."""
    p = os.path.abspath(path)
    rel = os.path.relpath(p)
    return rel if not rel.startswith("..") else p


def header_lines(res: EvalResult) -> list[str]:
    """What a report opens with: the model, its training data, the data
    evaluated, the date and the costlearn version, and a warning when the
    noise floor hides regrets."""
    i = res.model_info or {}
    n_problems = int((res.per_shape["model"] == res.model).sum())
    trained_on = f" of {i['trained_on']}" if i.get("trained_on") else ""
    data = f" from {i['data']}" if i.get("data") else ""
    lines = [f"Model: {i.get('device')}/{i.get('family')}/{i.get('dtype')} {i.get('model')} {i.get('sha256')} "
             f"in {i.get('folder')}, for the device {i.get('device_name')}, trained on {i.get('rows')} "
             f"rows{trained_on} over {i.get('shapes')} shapes.",
             f"Evaluated: {len(res.rows)} measurements{data} over {n_problems} problems. "
             f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}, costlearn {__version__}."]
    if res.hidden_by_noise:
        lines.append(f"Warning: the noise floor ({res.noise_floor:.1%}) hides the model's top-1 regret on "
                     f"{res.hidden_by_noise} of {n_problems} problems (above 0 but within the noise, shown as 0 %); "
                     "measure more repeats or more shapes for a finer floor.")
    return lines


def evaluate(backend, art_folder, eval_dir, *, n_random: int = 4, budget_s: float = 600.0,
             protocol: Protocol | None = None, seed: int = 1, progress: bool = True,
             before_score=None) -> EvalResult:
    """Measure fresh shapes on ``backend`` and score the model.

    Every candidate of the model that is feasible for a fresh shape is
    measured (exhaustive over the candidate set), with each epilogue the
    model was trained on. Measurements go to
    ``eval_dir`` as a dataset, so an interrupted evaluation resumes.

    Parameters
    ----------
    backend : Backend
        The device to measure on; its DeviceSpec should match the model's.
    art_folder : path
        Model artifact folder (``models/<device>/<family>/<dtype>``).
    eval_dir : path
        Dataset folder for the fresh measurements (``data/<device>/eval``).
    n_random : int
        Random fresh shapes besides :data:`FIXED_SHAPES`.
    budget_s : float
        Time budget for measuring, seconds.
    before_score : callable, optional
        Called with no argument after measuring, before scoring: the CLI
        re-times a sample of ``eval_dir`` there in a new process, so ties use
        the across-session floor (:mod:`costlearn.collect.noise`).

    Returns
    -------
    EvalResult
    """
    art = _artifact.load(art_folder)
    if backend.spec.slug != art.spec.slug:
        raise ValueError(f"the model was trained on {art.spec.name!r} ({art.spec.slug}) but this backend is "
                         f"{backend.spec.name!r} ({backend.spec.slug}); measure on the model's device, or "
                         "score measurements already made there with `costlearn evaluate --no-measure --data DIR`")
    kind = "cpu" if art.spec.device_type == "cpu" else "gpu"
    bounds = ShapeBounds.for_device(kind == "cpu")
    shapes = fresh_shapes(art.sidecar["envelope"]["shapes"], n_random, bounds, kind, seed)
    pool = list(art.configs)
    collect(backend, eval_dir, budget_s=budget_s, family=art.family.name, dtype=art.dtype, layout=art.layouts[0],
            shapes=shapes, pool=pool, configs_per_shape=len(pool), protocol=protocol, seed=seed, progress=progress,
            epilogues=art.epilogues)
    if before_score is not None:
        before_score()
    rows, _ = load(eval_dir)
    rows = rows.merge(pd.DataFrame(shapes, columns=["m", "n", "k"]), on=["m", "n", "k"])
    res = score(art, rows, data=eval_dir)
    vendor = getattr(backend, "vendor_time_us", None)
    if vendor is not None:
        for m, n, k in res.rows[["m", "n", "k"]].drop_duplicates().itertuples(index=False):
            res.vendor_us[(int(m), int(n), int(k))] = vendor(int(m), int(n), int(k), protocol or Protocol())
    return res


def _rule(head: str) -> str:
    return "|" + "---|" * (head.count("|") - 1)


def format_table(res: EvalResult, subset: str = "all") -> str:
    """Markdown summary table: one line per model, top-1/5/10 regret (mean,
    geometric mean, p90, max), TenSet top-1 score, Kendall tau, MAPE."""
    head = ("| model | shapes | top-1 mean | top-1 geomean | top-1 p90 | top-1 max | top-5 mean | "
            "top-10 mean | TenSet top-1 | Kendall tau | MAPE |")
    lines = [head, _rule(head)]
    for name, sub in res.summary.items():
        s = sub.get(subset, {})
        if not s.get("shapes"):
            continue
        mape = f"{s['mape']:.2f}" if name in res.time_models else "n/a"
        lines.append(f"| {name} | {s['shapes']} | {s['top1_mean']:.1%} | {s['top1_geomean']:.1%} | "
                     f"{s['top1_p90']:.1%} | {s['top1_max']:.1%} | {s['top5_mean']:.1%} | "
                     f"{s['top10_mean']:.1%} | {s['tenset_top1']:.3f} | {s['kendall_tau']:.3f} | {mape} |")
    return "\n".join(lines)


def format_per_shape(res: EvalResult) -> str:
    """Markdown per-shape table: top-1 regret of each model, the measured
    best time, the candidate count and the OOD flag."""
    ps = res.per_shape
    extra = [c for c in ("layout", "epilogue") if c in ps and ps[c].nunique() > 1]   # columns that vary
    key = ["m", "n", "k"] + extra
    p = ps.pivot_table(index=key, columns="model", values="top1_regret")
    meta = ps[ps["model"] == res.model].set_index(key)
    models = [c for c in res.models if c in p.columns]
    vendor = res.vendor_us or {}
    head = ("| M | N | K | " + "".join(f"{c} | " for c in extra) + "class | candidates | best µs | "
            + " | ".join(f"{c} top-1" for c in models)
            + " | model top-5 | τ | OOD |" + (" vendor µs | best / vendor throughput |" if vendor else ""))
    lines = [head, _rule(head)]
    for kv, r in p.iterrows():
        m, n, k = kv[:3]
        mt = meta.loc[kv]
        lines.append(f"| {m} | {n} | {k} | " + "".join(f"{v} | " for v in kv[3:])
                     + f"{mt['shape_class']} | {int(mt['n_candidates'])} | "
                     f"{mt['best_time_us']:.1f} | " + " | ".join(f"{r[c]:.1%}" for c in models)
                     + f" | {mt['top5_regret']:.1%} | {mt['kendall_tau']:.2f} | "
                     f"{'yes' if mt['ood'] else 'no'} |"
                     + (f" {vendor[(m, n, k)]:.1f} | {vendor[(m, n, k)] / mt['best_time_us']:.1%} |"
                        if (m, n, k) in vendor else ""))
    return "\n".join(lines)


def _floors_line(res: EvalResult) -> str:
    return res.noise_floors.describe() if res.noise_floors is not None else f"noise floor {res.noise_floor:.1%}"


def write_report(res: EvalResult, path) -> Path:
    """Write the tables (markdown) and the per-shape metrics (CSV beside it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ["# costlearn evaluation", "", *header_lines(res), "",
            f"Noise floor used for ties: {res.noise_floor:.1%}; a regret at or below it counts as 0. "
            f"({_floors_line(res)})", "",
            "## Summary (all fresh shapes)", "", format_table(res, "all"), "",
            *(["## Against the best tile config (vendor candidate left out)", "", format_table(res, "tile_only"), ""]
              if any("tile_only" in sub for sub in res.summary.values()) else []),
            "## In-envelope shapes", "", format_table(res, "in_envelope"), "",
            *[line for subset in epilogue_subsets(res.per_shape) for line in
              (f"## Problems with the {subset}", "", format_table(res, subset), "")],
            "## By shape class", "", format_by_class(res), "",
            "## Per shape", "", format_per_shape(res), ""]
    path.write_text("\n".join(text))
    res.per_shape.to_csv(path.with_suffix(".csv"), index=False)
    return path


def format_by_class(res: EvalResult) -> str:
    """Markdown table: mean top-1 regret per shape class (batch-1, skinny,
    small, square, large K, general) for each model, with shape counts."""
    p = res.per_shape.pivot_table(index="shape_class", columns="model", values="top1_regret", aggfunc="mean")
    n = res.per_shape[res.per_shape["model"] == res.model].groupby("shape_class").size()
    models = [c for c in res.models if c in p.columns]
    head = "| shape class | shapes | " + " | ".join(f"{m} top-1 mean" for m in models) + " |"
    lines = [head, _rule(head)]
    for cls, r in p.iterrows():
        lines.append(f"| {cls} | {int(n.get(cls, 0))} | " + " | ".join(f"{r[m]:.1%}" for m in models) + " |")
    return "\n".join(lines)


def write_plots(res: EvalResult, folder) -> list[Path]:
    """Write three PNGs into ``folder``: predicted vs measured time (model and
    roofline, log-log), the CDF of top-1 regret per model, and mean top-1
    regret by shape class. Needs matplotlib (``pip install 'costlearn[plot]'``).

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    ImportError
        If matplotlib is not installed (with the install hint).
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plots need matplotlib: pip install 'costlearn[plot]'") from e
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    art_pred = res.predictions
    fig, ax = plt.subplots(figsize=(5.5, 5))
    t = res.rows["time_us"].to_numpy()
    for name, color in (("roofline", "tab:gray"), (res.model, "tab:blue")):
        ax.scatter(t, art_pred[name], s=6, alpha=0.5, color=color, label=name)
    lo, hi = float(np.min(t)) / 2, float(np.max(t)) * 2
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="measured time (µs)", ylabel="predicted time (µs)",
           title="Predicted vs measured, fresh shapes")
    ax.legend()
    fig.tight_layout()
    out.append(folder / "predicted_vs_measured.png")
    fig.savefig(out[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in res.models:
        r = np.sort(res.per_shape.loc[res.per_shape["model"] == name, "top1_regret"].to_numpy())
        if r.size:
            ax.step(np.concatenate([[0], r * 100]), np.concatenate([[0], np.arange(1, r.size + 1) / r.size]),
                    where="post", label=name)
    ax.set(xlabel="top-1 regret (%)", ylabel="share of fresh shapes", title="CDF of top-1 regret", xlim=(0, None))
    ax.legend()
    fig.tight_layout()
    out.append(folder / "top1_regret_cdf.png")
    fig.savefig(out[-1], dpi=120)
    plt.close(fig)

    p = res.per_shape.pivot_table(index="shape_class", columns="model", values="top1_regret", aggfunc="mean")
    models = [c for c in res.models if c in p.columns]
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(p.index))
    w = 0.8 / max(len(models), 1)
    for i, name in enumerate(models):
        ax.bar(x + i * w, p[name].to_numpy() * 100, width=w, label=name)
    ax.set_xticks(x + w * (len(models) - 1) / 2, p.index)
    ax.set(ylabel="mean top-1 regret (%)", title="Top-1 regret by shape class")
    ax.legend()
    fig.tight_layout()
    out.append(folder / "regret_by_class.png")
    fig.savefig(out[-1], dpi=120)
    plt.close(fig)
    return out
