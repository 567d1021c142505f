"""What a collection reports: its summary (:class:`CollectResult`), a Ctrl-C's, a dataset folder's.

:func:`costlearn.collect.loop.run_collection` fills a :class:`CollectResult`
(or raises :class:`CollectionInterrupted` with the one filled so far);
:func:`dataset_summary` says in a paragraph what a dataset folder holds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from costlearn.collect.dataset import load, valid_rows

__all__ = ["CollectResult", "CollectionInterrupted", "dataset_summary"]


@dataclass
class CollectResult:
    """Summary of one :func:`~costlearn.collect.loop.collect` call.

    Attributes
    ----------
    rows_written, rows_valid : int
        Rows written by this call, and how many of them have status ``ok``.
    problems_done : int
        Problems (a shape with one epilogue) measured by this call
        (``shapes_done``, its old name, still reads it).
    skipped : int
        (problem, config) pairs skipped because the dataset already had them.
    seconds : dict of str to float
        Wall time spent compiling, measuring and writing.
    spread_frac : float
        Median over valid rows of the relative spread (p80 - p20) / median
        of a row's samples; NaN if none.
    noise_floor : float
        Median relative difference between two independent timings of the
        same config in one session (one repeat per shape); NaN if none.
        See :func:`costlearn.collect.dataset.noise_floor`.
    parts : list of Path
    stopped : str
        Why collection stopped early (the device was lost), else "".
    other_pools : list of dict
        Candidate pools recorded in the folder for this family and dtype that
        differ from this call's (:func:`~costlearn.collect.plan.record_pool`):
        the dataset mixes them.
    target_rse, at_target : float
        The protocol's relative-standard-error target, and the share of this
        call's valid rows that reached it (the rest hit the cap).
    budget_s : float
        The call's budget, seconds; a shape started inside it is measured to
        the end, so ``seconds["total"]`` may exceed it (:attr:`over_budget_s`).
    epilogues_left_out : list of str
        Epilogues asked for that no random shape was measured with: compiling
        their pools did not fit the budget left
        (:data:`~costlearn.collect.plan.EPILOGUE_COMPILE_SHARE`).
    """

    rows_written: int = 0
    rows_valid: int = 0
    problems_done: int = 0
    skipped: int = 0
    seconds: dict = field(default_factory=dict)
    spread_frac: float = math.nan
    noise_floor: float = math.nan
    parts: list = field(default_factory=list)
    stopped: str = ""
    other_pools: list = field(default_factory=list)
    budget_s: float = math.inf
    target_rse: float = math.nan
    at_target: float = math.nan
    epilogues_left_out: list = field(default_factory=list)

    @property
    def shapes_done(self) -> int:
        """:attr:`problems_done` by its old name (it counts problems: a shape
        with one epilogue)."""
        return self.problems_done

    @property
    def over_budget_s(self) -> float:
        """Seconds past the budget (0 when within it): the last shape, with
        its compiles, started before the budget ran out and was finished."""
        return max(0.0, self.seconds.get("total", 0.0) - self.budget_s)


class CollectionInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`~costlearn.collect.loop.collect`; ``result`` says
    what was saved (every shape measured before it is on disk)."""

    def __init__(self, result: "CollectResult", folder):
        skipped = f" ({result.skipped} already measured were skipped)" if result.skipped else ""
        super().__init__(f"{result.rows_written} new rows over {result.problems_done} problems saved in {folder}"
                         f"{skipped}")
        self.result, self.folder = result, folder


def dataset_summary(folder) -> str:
    """One-paragraph summary of a dataset folder: rows, valid rows, shapes,
    configs, devices, quarantined and corrupt parts."""
    df, rep = load(folder)
    v = valid_rows(df)
    shapes = v[["m", "n", "k"]].drop_duplicates()
    return (f"{len(df)} rows ({len(v)} valid) over {len(shapes)} shapes and "
            f"{v['config_id'].nunique()} configs; devices: {sorted(df['device_slug'].unique())}; "
            f"{rep.summary()}")
