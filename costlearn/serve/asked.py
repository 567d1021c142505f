"""The problems compilers asked, as a collection's prior (design.md, "Tuning database": "the shapes the fleet asks
are the collection's prior"): the tuning database's predicted entries of a device class, less what is measured,
least certain first (`asked_problems`, `AskedProblems`).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from costlearn.collect.dataset import load, rows_where
from costlearn.core.problem import EPILOGUES
from costlearn.families import get_family
from costlearn.model.artifact_layout import ArtifactError
from costlearn.model.store import has_model, resolve_model
from costlearn.serve.predictor import load_predictor
from costlearn.serve.tuning_db_server import open_store

__all__ = ["AskedProblems", "asked_problems"]


@dataclass(frozen=True)
class AskedProblems:
    """What :func:`asked_problems` found.

    Attributes
    ----------
    problems : list of Problem
        The problems to measure, least certain first.
    distances_log2 : list of float
        Each one's distance to the model's nearest training shape, doublings (empty without a model).
    target : str
        The tuning database read (its path, or its URL without a password).
    device, family, dtype : str
    asked : int
        Distinct problems of ``device`` and ``family`` with a predicted entry and no measured one.
    measured : int
        Those of the collection's dtype, layout and epilogues the dataset holds rows of already (not measured again).
    left_out : dict of str to int
        Those another collection measures, by why (``"dtype float16"``, ``"layout NT"``, ``"epilogue bias"``).
    model : Path or None
        The model whose distances ordered them (None: no model, the database's order, oldest first).
    unordered : str
        Why the model of the device, family and dtype did not order them where it is in the store but does not load
        (``""`` otherwise): the database's order then.
    answered : int
        Distinct problems of ``device`` and ``family`` with a measured entry: asked and measured by the fleet
        (all of them, where ``asked`` is 0).
    """

    problems: list
    target: str
    device: str
    family: str
    dtype: str
    asked: int
    measured: int = 0
    left_out: dict = field(default_factory=dict)
    distances_log2: list = field(default_factory=list)
    model: Path | None = None
    unordered: str = ""
    answered: int = 0


def asked_problems(target, device: str, family: str, dtype: str, *, layout: str = "NN", epilogues=EPILOGUES,
                   data_dir=None, models_dir=None) -> AskedProblems:
    """The problems compilers asked costlearn on ``device``'s class (the tuning database's entries of ``device`` and
    ``family`` whose ``chosen_by`` is ``"predicted"``), that a collection of ``dtype`` and ``layout`` with
    ``epilogues`` measures next, least certain first.

    A problem with a measured entry (of any kernel template or costlearn version) is the fleet's measurement, not a
    question, and is left out; so is one the dataset ``data_dir`` holds rows of (any status). The rest are ordered
    by their distance to the nearest training shape of the model of (``device``, ``family``, ``dtype``), farthest
    first (:meth:`costlearn.model.envelope.Envelope.nearest_index`, the ranker's
    :attr:`~costlearn.ranker.RankResult.nearest_distance`), ties in the database's order: that distance is where
    the model knows least, as the OOD check and the vendor floor read it, whereas a tree ensemble's spread shrinks
    rather than grows away from its data (design.md, "What "good" means for a user"). Without a model, or with
    one that does not load (damaged, of another schema: :attr:`AskedProblems.unordered` says why; the collection
    that would retrain it is not refused for it), the database's order, oldest first.

    Parameters
    ----------
    target : path, str or None
        A tuning database file or a ``postgresql://`` URL, opened read-only; None: the default
        (:func:`costlearn.serve.tuning_db.default_target`).
    device : str
        The device class: the device slug of the entries and of the model.
    family, dtype : str
    layout : str
        The collection's layout (one a collection measures).
    epilogues : sequence of str
        The collection's epilogues.
    data_dir : path, optional
        The device's dataset folder; its problems are not asked again.
    models_dir : path, optional
        The model store (default: :func:`costlearn.model.store.default_store`).

    Returns
    -------
    AskedProblems

    Raises
    ------
    ValueError
        If the database holds no entry, or none of ``family`` and ``device`` (one line naming the database, the
        device and the classes it holds: a device slug mistyped). Where every problem asked of the device is
        measured, no problem is returned (``asked`` 0): the fleet's steady state, not an error.
    OSError, FileNotFoundError
        As :func:`costlearn.serve.tuning_db_server.open_store` (no database there, one costlearn cannot read).
    """
    fam = get_family(family)
    fam.check_dtype(dtype, layout)
    store = open_store(target, read_only=True)
    try:
        where, entries = str(store.path), store.entries()
    finally:
        store.close()
    if not entries:
        raise ValueError(f"the tuning database {where} is empty: no problem compilers asked of {device}")
    mine = [e for e in entries if e.device == device and e.family == family]
    measured = {e.problem for e in mine if e.chosen_by == "measured"}
    asked = list(dict.fromkeys(e.problem for e in mine if e.chosen_by == "predicted" and e.problem not in measured))
    if not mine:
        classes = sorted({e.device for e in entries})
        raise ValueError(f"the tuning database {where} holds no {family} entry of {device} ({len(entries)} "
                         f"entries, of device classes {', '.join(classes)})")
    if not asked:           # the fleet measured all it was asked: a steady state, not a mistake
        return AskedProblems([], where, device, family, dtype, 0, answered=len(measured))
    left_out = Counter()
    keep = []
    for p in asked:
        why = (f"dtype {p.dtype}" if p.dtype != dtype else f"layout {p.layout}" if p.layout != layout else
               f"epilogue {p.epilogue}" if p.epilogue not in epilogues or p.epilogue not in fam.epilogues else None)
        if why:
            left_out[why] += 1
        else:
            keep.append(p)
    done = _measured_problems(data_dir, family)
    todo = [p for p in keep if (p.m, p.n, p.k, p.dtype, p.layout, p.epilogue) not in done]
    out = AskedProblems(todo, where, device, family, dtype, len(asked), len(keep) - len(todo), dict(left_out),
                        answered=len(measured))
    if not todo or not has_model(device, family, dtype, models_dir):
        return out
    try:
        envelope = load_predictor(device, family, dtype, models_dir).artifact.envelope
    except ArtifactError as e:
        return replace(out, unordered=str(e)[:300])
    far = [envelope.nearest_index(*p.shape)[1] for p in todo]
    order = sorted(range(len(todo)), key=lambda i: -far[i])        # stable: ties keep the database's order
    return AskedProblems([todo[i] for i in order], where, device, family, dtype, len(asked), out.measured,
                         out.left_out, [far[i] for i in order], resolve_model(device, family, dtype, models_dir))


def _measured_problems(data_dir, family: str) -> set:
    """(m, n, k, dtype, layout, epilogue) of every problem the dataset folder ``data_dir`` holds rows of for
    ``family`` (empty where there is no folder)."""
    if data_dir is None or not Path(data_dir).is_dir():
        return set()
    df, _ = load(data_dir)
    df = df[rows_where(df, family=family)]
    cols = ["m", "n", "k", "dtype", "layout", "epilogue"]
    return {(int(m), int(n), int(k), str(d), str(lay), str(e))
            for m, n, k, d, lay, e in df[cols].drop_duplicates().itertuples(index=False, name=None)}
