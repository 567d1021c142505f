"""What ``costlearn dispatch`` reports of a selector (:mod:`costlearn.serve.dispatch`): its predicted regret,
fresh shapes in its ranges measured, and its measured regret against the per-shape best; as lines (printed by
the command line, and written as ``<out>/report.md``), never printed here.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.dataset import current_rows, device_dataset_folder, load, rows_where, valid_rows
from costlearn.collect.loop import collect
from costlearn.collect.summary import CollectResult
from costlearn.collect.noise import noise_floors
from costlearn.core.files import atomic_write
from costlearn.learn.metrics import geomean_regret
from costlearn.serve.dispatch import Dispatch, evaluate_dispatch, range_shapes

REPORT_NAME = "report.md"
"""The report's file name in the selector's folder."""


def default_eval_dir(device: str, data="data") -> Path:
    """Where the measured fresh shapes of a model device's selectors go unless given:
    ``dispatch-eval`` in the device's dataset folder that ``data`` (a dataset root or that folder) names
    (:func:`costlearn.collect.dataset.device_dataset_folder`).

    Raises
    ------
    ValueError
        If ``data`` is another device's dataset folder.
    """
    return device_dataset_folder(data, device) / "dispatch-eval"


def _span(ranges: dict, epilogue: str) -> str:
    return ", ".join(f"{d_} {lo}..{hi}" for d_, (lo, hi) in ranges.items()) \
        + ("" if epilogue == "none" else f", epilogue {epilogue}")


def report_title(d: Dispatch, ranges: dict, epilogue: str = "none") -> list[str]:
    """The report file's heading lines (not printed)."""
    return [f"# costlearn dispatch: {len(d.configs)} configs for {_span(ranges, epilogue)}", ""]


def predicted_lines(d: Dispatch, device: str, ranges: dict, epilogue: str = "none") -> list[str]:
    """The selector's members and its predicted regret (:attr:`Dispatch.predicted`) over the shapes sampled to
    fit it, ``device`` the model's device folder."""
    q = d.predicted
    single = (f"one config for all ({d.single_best.config_id}) {q['single_best_geomean']:.1%}"
              if d.single_best is not None else "no single config fits every shape")
    return [f"{len(d.configs)} configs for {_span(ranges, epilogue)} (model {device}; {q['shapes']} sampled shapes):",
            "", *(f"  {i}. `{c.config_id}`" for i, c in enumerate(d.configs)), "",
            f"predicted regret vs the per-shape best: selector geomean {q['selector_geomean']:.1%}, mean "
            f"{q['selector_mean']:.1%}, max {q['selector_max']:.1%}; best member per shape "
            f"{q['subset_geomean']:.1%}; " + single]


def measure_fresh_shapes(predictor, backend, ranges: dict, eval_dir, *, n: int, seed: int, budget_s: float,
                         epilogue: str = "none") -> CollectResult:
    """Measure up to ``n`` fresh shapes in ``ranges`` (none the model was trained on, each with a feasible
    candidate; drawn with seed ``seed + 1000``), every candidate of ``predictor``, on ``backend`` into
    ``eval_dir`` (resumed: :func:`costlearn.collect.loop.collect`).

    Raises
    ------
    ValueError
        If ``backend``'s device is not the model's.
    """
    if backend.spec.slug != predictor.spec.slug:
        raise ValueError(f"the model is for {predictor.spec.name}, this device is {backend.spec.name}; "
                         "measure on the model's device")
    known = {tuple(x) for x in predictor.envelope.shapes}
    fresh = [s for s in range_shapes(ranges, 4 * n, seed + 1000, corners=False)
             if tuple(s) not in known and predictor.feasible(predictor.problem(*s)).any()]
    return collect(backend, eval_dir, budget_s=budget_s, family=predictor.family, dtype=predictor.dtype,
                   shapes=fresh[:n], pool=list(predictor.configs), configs_per_shape=len(predictor.configs),
                   seed=seed, epilogues=(epilogue,))


def measured_lines(d: Dispatch, predictor, eval_dir, *, epilogue: str = "none",
                   measured_now: bool = False) -> tuple[list[str], pd.DataFrame | None]:
    """The selector's measured regret on the valid rows of ``eval_dir`` (the model's device, family and dtype)
    in its ranges, against the per-shape best, beside ``predict_best`` per shape and the single best config
    (:func:`costlearn.serve.dispatch.evaluate_dispatch`; regrets at or below the folder's noise floor count as 0).

    Returns
    -------
    (list of str, DataFrame or None)
        The lines (a markdown table; or one line saying there is nothing to evaluate) and the per-shape
        regrets (None where there is nothing). ``measured_now``: the rows were measured by this run.
    """
    eval_dir = Path(eval_dir)
    if not eval_dir.is_dir():
        return [f"no measurements in {eval_dir} to evaluate the selector on; add --measure N"], None
    rows = valid_rows(current_rows(load(eval_dir)[0])[0])
    rows = rows[rows_where(rows, device_slug=predictor.spec.slug, family=predictor.family, dtype=predictor.dtype)]
    noise = noise_floors(eval_dir, rows).tie
    ev = evaluate_dispatch(d, predictor, rows, noise_rel=noise)
    if ev.empty:
        fused = "" if epilogue == "none" else f" with the epilogue {epilogue}"
        return [f"no measured shape{fused} in {eval_dir} lies in the ranges; add --measure N"], None
    when = "" if measured_now else " earlier (--measure N measures fresh shapes now)"
    lines = ["", f"measured on {predictor.spec.name}{when}: {len(ev)} fresh shapes in range from {eval_dir} (every "
             f"candidate measured; noise floor {noise:.1%}, regrets at or below it count as 0)", "",
             "| choice | shapes | top-1 regret mean | geomean | max |", "|---|---|---|---|---|"]
    choices = [("selector", f"selector ({len(d.configs)} configs, chosen at launch)"),
               ("model", "predict_best per shape (a kernel per shape)")]
    if d.single_best is not None:
        choices.append(("single", f"one config for all ({d.single_best.config_id})"))
    for who, label in choices:
        r = ev[f"{who}_regret"].to_numpy(np.float64)
        r = r[np.isfinite(r)]
        lines.append(f"| {label} | {len(r)} | {r.mean():.1%} | {geomean_regret(r):.1%} | {r.max():.1%} |")
    return lines, ev


def write_report(folder, lines) -> Path:
    """Write ``lines`` as ``<folder>/report.md`` (atomically); returns its path."""
    path = Path(folder) / REPORT_NAME
    atomic_write(path, "\n".join(lines) + "\n")
    return path
