"""How much a trained model's data covers: per layout, the training problems
and the extents they span, and how the model answers a fixed set of real
models' layer shapes (:data:`costlearn.collect.real_shapes.REFERENCE_LAYERS`).

A model of a few dozen random problems per layout answers most real layers
from far away: beyond the vendor floor's reach
(:data:`~costlearn.model.vendor_floor.NEAR_LOG2` of every training shape) its
tile-or-vendor decision rests on what leaving regions out measured, and where
that found the estimate did not carry, the answer is the vendor library.
:func:`data_coverage` counts those answers so that ``costlearn train`` can say
so before anyone compiles with the model.
"""
from __future__ import annotations

import pandas as pd

from costlearn.collect.real_shapes import REFERENCE_LAYERS
from costlearn.families import VENDOR_CONFIG_ID
from costlearn.model.vendor_floor import NEAR_LOG2

__all__ = ["data_coverage", "coverage_lines"]


def data_coverage(predictor, rows: pd.DataFrame) -> dict:
    """Per layout of ``predictor``: its training problems and how it answers
    :data:`~costlearn.collect.real_shapes.REFERENCE_LAYERS`.

    Parameters
    ----------
    predictor : costlearn.serve.predictor.Predictor
        The trained model.
    rows : DataFrame
        The valid rows it was trained on (``m, n, k, layout``).

    Returns
    -------
    dict
        JSON-ready, by layout name: ``problems`` (distinct M, N, K trained
        on), ``m``, ``n``, ``k`` ([min, max] of each extent over them), and
        for the reference layers: ``reference`` (how many), ``tile`` and
        ``vendor`` (answers of each kind), ``has_vendor`` (the family has a
        vendor candidate), ``far`` (beyond the floor's reach,
        :data:`~costlearn.model.vendor_floor.NEAR_LOG2` where it has no
        transfer, of every training shape), ``sure``
        (:attr:`~costlearn.serve.prediction.Prediction.sure`) and
        ``chosen_by`` (answers per ``chosen_by``).
    """
    out = {}
    env, floor = predictor.envelope, predictor.floor
    near = floor.transfer[0] if floor.transfer is not None else NEAR_LOG2
    for layout in predictor.layouts:
        trained = rows[rows["layout"].astype(str) == layout][["m", "n", "k"]].drop_duplicates()
        rec = dict(problems=int(len(trained)),
                   **{c: [int(trained[c].min()), int(trained[c].max())] if len(trained) else [] for c in "mnk"},
                   reference=len(REFERENCE_LAYERS), tile=0, vendor=0, far=0, sure=0, chosen_by={},
                   has_vendor=predictor.vendor_index is not None)
        for _, m, n, k in REFERENCE_LAYERS:
            p = predictor.predict(predictor.problem(m, n, k, layout), 1)
            vendor = p.config.config_id == VENDOR_CONFIG_ID
            rec["vendor" if vendor else "tile"] += 1
            rec["sure"] += bool(p.sure)
            rec["chosen_by"][p.chosen_by] = rec["chosen_by"].get(p.chosen_by, 0) + 1
            rec["far"] += not (len(env.shapes) and env.nearest_index(m, n, k)[1] <= near)
        out[layout] = rec
    return out


def coverage_lines(coverage: dict, dtype: str, transfer) -> list[str]:
    """:func:`data_coverage` in words, one line per layout (what ``costlearn
    train`` prints; the tile-or-vendor counts only for a family with a
    vendor candidate). "Sure" and "flagged" are :attr:`Prediction.sure
    <costlearn.serve.prediction.Prediction.sure>` (in distribution, and the
    vendor estimate's interval on the answer's side), not the floor's reach:
    a shape farther than the reach may still be sure. ``transfer``: the
    floor's (its ``near_log2`` is the reach; None:
    :data:`~costlearn.model.vendor_floor.NEAR_LOG2`, and far problems are
    only counted)."""
    lines = []
    near = NEAR_LOG2 if transfer is None else transfer[0]
    for layout, c in coverage.items():
        span = ", ".join(f"{e.upper()} {c[e][0]}-{c[e][1]}" for e in "mnk" if c[e])
        far = f"{c['far']} farther than {near:g} doublings from every measured shape (the vendor floor's reach" + (
            ", decided by what leaving regions out measured)" if transfer is not None else ")")
        vendor = (f"{c['tile']} answered with a tile config, {c['vendor']} with the vendor library, {far}; "
                  if c["has_vendor"] else "")
        lines.append(f"  {dtype} {layout}: {c['problems']} problems ({span}); of {c['reference']} real-model "
                     f"layer shapes: {vendor}{c['sure']} answered sure, {c['reference'] - c['sure']} flagged as "
                     "guesses (`costlearn predict M N K` says why)")
    return lines
