"""What the model store holds: per model, what it knows (`describe_store`: device, family, dtype, layouts, epilogues,
trained extents, envelope thresholds, held-out scores, when trained, size), and those facts as lines (`summary_lines`).

Each model is read through :func:`costlearn.model.artifact.load`, so a damaged one is listed with why it does not
load, never described from unchecked files.
"""
from __future__ import annotations

from pathlib import Path

from costlearn.model.artifact import (SIDECAR, ArtifactError, list_models, load, model_folder, models_root,
                                      old_layout_folders)
from costlearn.model.envelope import RANGE_MARGIN_LOG2

__all__ = ["describe", "describe_store", "summary_lines", "SCORES"]

SCORES = ("top1_mean", "top1_geomean", "top5_mean", "kendall_tau")
"""The held-out figures described per model (:func:`costlearn.learn.metrics.summarize`'s keys), as ``train``
prints them."""


def _size_bytes(art) -> int:
    """Bytes of the artifact's files: its sidecar and the folder its files lie in (its payload folder; for an artifact
    written before payload folders, the files beside the sidecar)."""
    files = [p for p in Path(art.files).iterdir() if p.is_file() and not p.name.startswith(".")]
    if Path(art.files) != Path(art.path):
        files.append(Path(art.path) / SIDECAR)
    return sum(p.stat().st_size for p in files)


def describe(folder) -> dict:
    """What the model in ``folder`` knows, as plain values (JSON-ready).

    Returns
    -------
    dict
        ``device``, ``family``, ``dtype`` (the store's folder names), ``path``; then either ``error`` (why it does
        not load) or ``device_name``, ``learner``, ``layouts``, ``epilogues``, ``extents`` (``{"M": [min, max],
        ...}`` of the training problems), ``envelope`` (``range_margin_log2``: how far past an extent a problem is
        still in range, in doublings; ``density_threshold_log2``: the distance to the nearest training shape past
        which it is flagged; ``quantile``: of held-out training shapes it was set at), ``holdout`` (name ->
        :data:`SCORES` and ``shapes``, the model's and the baselines'), ``holdout_kind``, ``trained`` (UTC ISO
        time), ``rows``, ``shapes`` (distinct M, N, K and layout), ``problems`` (distinct problems, an epilogue
        and dtype counted; None where the sidecar records no count), ``dataset``, ``candidates``,
        ``transferred_from`` (the source device, or None), ``sha256`` (of its scorer) and ``size_bytes``.
    """
    folder = Path(folder)
    out = dict(device=folder.parents[1].name, family=folder.parent.name, dtype=folder.name, path=str(folder))
    try:
        art = load(folder)
    except ArtifactError as e:
        return dict(out, error=str(e))
    side = art.sidecar
    env, training, metrics = side.get("envelope", {}), side.get("training", {}), side.get("metrics", {})
    learner = side.get("model")
    held = sorted(metrics.get("holdout", {}).items(), key=lambda kv: kv[0] != learner)       # the model's first
    holdout = {name: {k: sm.get(k) for k in (*SCORES, "shapes")} for name, sm in held if isinstance(sm, dict)}
    return dict(out, device_name=art.spec.name, learner=learner, layouts=list(art.layouts),
                epilogues=list(art.epilogues), extents={d: [env["min"][d], env["max"][d]] for d in "MNK"},
                envelope=dict(range_margin_log2=RANGE_MARGIN_LOG2,
                              density_threshold_log2=art.envelope.threshold_log2,
                              quantile=env.get("calibration", {}).get("quantile")),
                holdout=holdout, holdout_kind=metrics.get("holdout_kind", ""), trained=side.get("created"),
                rows=training.get("rows"), shapes=training.get("shapes"), problems=_count(training.get("problems")),
                dataset=training.get("dataset"),
                candidates=len(art.configs), transferred_from=(side.get("transfer") or {}).get("source_device"),
                sha256=art.model_sha256, size_bytes=_size_bytes(art))


def describe_store(models_dir=None, *, device: str | None = None, family: str | None = None, dtypes=None) -> dict:
    """:func:`describe` of every model of the store (``models_dir``, else the default,
    :func:`costlearn.model.artifact.models_root`), of ``device``, ``family`` and ``dtypes`` where given.

    Returns
    -------
    dict
        ``root`` (the store's folder), ``models`` (a :func:`describe` each, by device, family, dtype) and ``old``
        (folders of the layout before kernel families, which ``costlearn migrate-models`` converts).

    Raises
    ------
    ValueError
        If the store is not a folder.
    """
    root = models_root(models_dir)
    if not root.is_dir():
        raise ValueError(f"the model store {root} is not a folder (--models, else $COSTLEARN_MODELS, else the source "
                         "tree's models/)")
    keys = [(dev, fam, dt) for dev, fam, dt in list_models(root) if (device is None or dev == device)
            and (family is None or fam == family) and (not dtypes or dt in dtypes)]
    return dict(root=str(root), models=[describe(model_folder(root, *key)) for key in keys],
                old=[str(p) for p in old_layout_folders(root)])


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def summary_lines(model: dict) -> list[str]:
    """A :func:`describe` result as the lines ``costlearn info`` prints: a heading line, then indented facts."""
    head = f"{model['device']}/{model['family']}/{model['dtype']}"
    if "error" in model:
        return [f"{head}: does not load: {model['error']}"]
    size = model["size_bytes"]
    size_text = f"{size / 2 ** 20:.1f} MiB" if size >= 2 ** 20 else f"{size / 2 ** 10:.0f} KiB"
    source = f", carried from {model['transferred_from']}" if model.get("transferred_from") else ""
    lines = [f"{head}: {model['learner']} model of {model['device_name']}{source}, trained {model['trained']} on "
             f"{model['rows']} rows over {_over(model)} ({model['dataset'] or 'no dataset named'}); "
             f"{model['candidates']} candidate configs; {size_text} in {model['path']}",
             f"  layouts {', '.join(model['layouts'])}; epilogues {', '.join(model['epilogues'])}"]
    ext, env = model["extents"], model["envelope"]
    widen = 2 ** env["range_margin_log2"]
    lines.append("  trained extents: " + ", ".join(f"{d} {lo}-{hi}" for d, (lo, hi) in ext.items())
                 + f"; flagged out of distribution below min/{widen:.2f} or above max x{widen:.2f}, or farther than "
                 f"{env['density_threshold_log2']:.2f} doublings from every training shape"
                 + (f" (the {env['quantile']:.0%} quantile on held-out training shapes)" if env.get("quantile")
                    else ""))
    if model["holdout"]:
        lines.append(f"  held-out problems ({model['holdout_kind']}): top-1 regret mean / geomean, top-5 mean, "
                     "Kendall tau")
        for name, sm in model["holdout"].items():
            tau = "-" if sm.get("kendall_tau") is None else f"{sm['kendall_tau']:.3f}"
            lines.append(f"    {name:<15} {_pct(sm.get('top1_mean')):>7} {_pct(sm.get('top1_geomean')):>7} "
                         f"{_pct(sm.get('top5_mean')):>7} {tau:>6}")
    else:
        lines.append("  no held-out scores (trained without a hold-out)")
    return lines


def _count(problems):
    """``training.problems``'s count (:func:`costlearn.learn.retrain.trained_problems`), or None."""
    count = problems.get("count") if isinstance(problems, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


def _over(model: dict) -> str:
    """What a model's rows are over, in words: its problems and its shapes (shapes alone where no count is
    recorded)."""
    if model.get("problems") is None:
        return f"{model['shapes']} shapes"
    return f"{model['problems']} problems, {model['shapes']} shapes of M, N, K and layout"
