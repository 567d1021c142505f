"""Noise the way a user meets it: re-timing measured configs in a later,
separate session.

Two timings of one config in one interleaved session share the session's
warm caches, clocks and machine state; :func:`costlearn.collect.dataset.noise_floor`
(the *within-session* floor) measures only that. A user who measures again
later, in a new process with other work in between, sees more. The
*across-session* floor is measured here: :func:`recheck` re-times a sample of
a dataset's (shape, config) rows in this process (a new
``costlearn.collect.rows.SESSION_ID``) and writes them to the dataset's
``recheck/`` folder; :func:`across_session_pairs` pairs each re-timing with
the row it re-timed. A later session also finds the machine at another speed
(on a shared host, by tens of percent from one minute to the next), a factor
every config of a shape shares: the floors are given raw and with that factor
removed, which is what re-measuring does to a ranking.

The evaluator's ties use the across-session floor where a dataset has one
(:func:`noise_floors`); ``collect`` and ``evaluate`` run :func:`recheck` in a
fresh process (``costlearn recheck``) after measuring.
"""
from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.rows import SESSION_ID, measure_rows
from costlearn.collect.dataset import current_rows, load, noise_floor, rows_where, valid_rows, write_part
from costlearn.families import get_family
from costlearn.collect.protocol import Protocol
from costlearn.core.problem import Problem
from costlearn.core.checks import check_int
from costlearn.core.progress import say

__all__ = ["RECHECK_FOLDER", "recheck", "across_session_pairs", "noise_floors",
           "RecheckResult", "NoiseFloors"]

RECHECK_FOLDER = "recheck"
"""Subfolder of a dataset holding its re-timings (a dataset of its own, so a
re-timing never trains a model twice on one key)."""

PAIR_KEY = ["device_slug", "family", "dtype", "layout", "epilogue", "m", "n", "k", "config_id", "template_hash",
            "protocol_version"]
"""Columns matching a re-timing to the row it re-timed."""


@dataclass
class NoiseFloors:
    """A dataset's noise floors (relative differences, 0.03 is 3 %).

    Attributes
    ----------
    within : float
        Median |t - t_repeat| / min of one config timed twice in one session
        (:func:`costlearn.collect.dataset.noise_floor`); NaN if no row has a repeat.
    across : float
        Median |t - t_recheck| / min of one config timed in two sessions
        (:func:`across_session_floor`); NaN without re-timings.
    across_p90 : float
        90th percentile of the same.
    across_shape, across_shape_p90 : float
        Median and p90 of the across-session difference with each shape's
        common factor removed (``rel_diff_shape`` of
        :func:`across_session_pairs`): what re-measuring later does to a
        ranking of one shape's configs. NaN without such pairs.
    pairs : int
        Re-timings paired with a row.
    sessions : int
        Distinct re-timing sessions.
    """

    within: float = math.nan
    across: float = math.nan
    across_p90: float = math.nan
    across_shape: float = math.nan
    across_shape_p90: float = math.nan
    pairs: int = 0
    sessions: int = 0

    @property
    def tie(self) -> float:
        """The floor below which two configs' difference is a tie: the
        across-session floor with each shape's common factor removed where
        measured (configs of one shape are compared with each other, so a
        factor they share cancels), else the raw across-session floor, else
        the within-session one, else 0."""
        for v in (self.across_shape, self.across, self.within):
            if np.isfinite(v):
                return float(v)
        return 0.0

    def describe(self) -> str:
        """One line for a person: both floors and what they compare."""
        within = "n/a" if not np.isfinite(self.within) else f"{self.within:.1%}"
        if not self.pairs:
            across = "not measured (`costlearn recheck` re-times a sample in a new session)"
        else:
            across = (f"{self.across:.1%} median, {self.across_p90:.1%} p90 over {self.pairs} configs re-timed in "
                      f"{self.sessions} later session{'s' if self.sessions != 1 else ''}")
            if np.isfinite(self.across_shape):
                across += (f"; {self.across_shape:.1%} median, {self.across_shape_p90:.1%} p90 with each shape's "
                           "common factor (the machine's speed then) removed")
        return f"noise floor: within a session {within}; across sessions {across}"


@dataclass
class RecheckResult:
    """What :func:`recheck` did.

    Attributes
    ----------
    rows_written : int
        Re-timings written to ``<folder>/recheck/``.
    shapes : int
        Shapes re-timed.
    noise_floors : NoiseFloors
        The folder's floors after this re-timing.
    part : Path or None
        The part written.
    """

    rows_written: int = 0
    shapes: int = 0
    noise_floors: NoiseFloors = field(default_factory=NoiseFloors)
    part: Path | None = None


def _measured_here(df: pd.DataFrame) -> pd.DataFrame:
    """Valid current rows that costlearn measured (not imported)."""
    df, _ = current_rows(df)
    df = valid_rows(df)
    return df[df["source_format"].fillna("").eq("").to_numpy(bool)]


def across_session_pairs(rows: pd.DataFrame, rechecks: pd.DataFrame) -> pd.DataFrame:
    """Pair each re-timing with the row it re-timed (same :data:`PAIR_KEY`,
    another session).

    Parameters
    ----------
    rows, rechecks : DataFrame
        A dataset's rows and its ``recheck/`` rows (any status).

    Returns
    -------
    DataFrame
        Columns ``PAIR_KEY + [time_us, time_us_recheck, session_id_recheck,
        rel_diff, rel_diff_shape]``, one row per valid pair; ``rel_diff`` =
        |t1 - t0| / min(t0, t1); ``rel_diff_shape`` the same after dividing
        out the later session's median ratio t1 / t0 over the shape's pairs
        (NaN for a shape re-timed with one config): the part of the
        difference that changes a ranking.
    """
    a, b = _measured_here(rows), _measured_here(rechecks)
    cols = PAIR_KEY + ["time_us", "session_id"]
    if a.empty or b.empty:
        return pd.DataFrame(columns=PAIR_KEY + ["time_us", "time_us_recheck", "session_id_recheck", "rel_diff",
                                                "rel_diff_shape"])
    p = a[cols].merge(b[cols], on=PAIR_KEY, suffixes=("", "_recheck"))
    p = p[p["session_id"].astype(str) != p["session_id_recheck"].astype(str)]
    t0, t1 = p["time_us"].to_numpy(np.float64), p["time_us_recheck"].to_numpy(np.float64)
    p = p.drop(columns=["session_id"]).assign(rel_diff=np.abs(t1 - t0) / np.minimum(t0, t1),
                                              ratio=t1 / t0)
    # The later session's common factor on each shape: the machine's speed
    # then (a shared host drifts by tens of percent over seconds), which
    # every config of the shape shares and no ranking sees.
    group = p.groupby(["m", "n", "k", "dtype", "layout", "epilogue", "session_id_recheck"])["ratio"]
    shift = group.transform("median").to_numpy(np.float64)
    r = p["ratio"].to_numpy(np.float64) / shift
    p["rel_diff_shape"] = np.where(group.transform("size").to_numpy() >= 2, np.maximum(r, 1 / r) - 1, np.nan)
    return p.drop(columns=["ratio"]).reset_index(drop=True)


def noise_floors(folder, rows: pd.DataFrame | None = None) -> NoiseFloors:
    """Both floors of the dataset in ``folder`` (``rows``: its rows, already
    loaded, or the subset being scored).

    Raises
    ------
    costlearn.collect.dataset.DatasetError
        If ``folder`` is not a dataset folder.
    """
    folder = Path(folder)
    if rows is None:
        rows, _ = load(folder)
    out = NoiseFloors(within=noise_floor(rows) if len(rows) else math.nan)
    rdir = folder / RECHECK_FOLDER
    if rdir.is_dir() and any(rdir.glob("part-*.parquet")):
        re_rows, _ = load(rdir)
        pairs = across_session_pairs(rows, re_rows)
        if len(pairs):
            d = pairs["rel_diff"].to_numpy(np.float64)
            out.across, out.across_p90, out.pairs = float(np.median(d)), float(np.quantile(d, 0.9)), int(len(d))
            out.sessions = int(pairs["session_id_recheck"].nunique())
            ds = pairs["rel_diff_shape"].to_numpy(np.float64)
            ds = ds[np.isfinite(ds)]
            if ds.size:
                out.across_shape, out.across_shape_p90 = float(np.median(ds)), float(np.quantile(ds, 0.9))
    return out


def recheck(backend, folder, *, shapes: int = 6, configs_per_shape: int = 4, seed: int | None = None,
            protocol=None, progress=None) -> RecheckResult:
    """Re-time a sample of the dataset in ``folder`` in this process (a new
    measurement session) and write the re-timings to ``<folder>/recheck/``.

    A sample is ``shapes`` random shapes measured by another session on this
    backend's device, and on each up to ``configs_per_shape`` of its valid
    configs, re-timed interleaved under ``protocol``. Call it from a new
    process (``costlearn recheck``) some time after the collection, so the
    two timings do not share a session's state.

    Parameters
    ----------
    backend : Backend
        The dataset's device.
    folder : path
        Dataset folder (``data/<device>/``).
    shapes, configs_per_shape : int
        Sample size, >= 1.
    seed : int, optional
        Seed of the sample; default: drawn from this session, so repeated
        rechecks sample other rows.
    protocol : costlearn.collect.protocol.Protocol, optional
        Of the re-timings; ``Protocol()`` by default.
    progress : callable, optional
        Called with one line of text per shape re-timed
        (:mod:`costlearn.core.progress`).

    Returns
    -------
    RecheckResult

    Raises
    ------
    costlearn.collect.dataset.DatasetError
        If ``folder`` is not a dataset folder.
    ValueError
        If a sample size is < 1, or the folder holds no row of this device
        measured in another session.
    """
    shapes = check_int("shapes", shapes, 1)
    configs_per_shape = check_int("configs_per_shape", configs_per_shape, 1)
    protocol = protocol or Protocol()
    folder = Path(folder)
    df, _ = load(folder)
    mine = _measured_here(df)
    mine = mine[(mine["device_slug"] == backend.spec.slug).to_numpy(bool)
                & (mine["session_id"].astype(str) != SESSION_ID).to_numpy(bool)
                & (mine["protocol_version"] == protocol.version).to_numpy(bool)]
    if mine.empty:
        raise ValueError(f"{folder} holds no valid {backend.spec.slug} rows of protocol {protocol.version} "
                         "measured in another session to re-time")
    rng = np.random.default_rng(seed if seed is not None else int(SESSION_ID, 16) % 2**32)
    keys = mine[["family", "dtype", "layout", "epilogue", "m", "n", "k"]].drop_duplicates().reset_index(drop=True)
    pick = keys.iloc[np.sort(rng.permutation(len(keys))[:shapes])]
    prov = backend.provenance()
    overhead = backend.launch_overhead_us()
    run_id = f"recheck-{uuid.uuid4().hex[:8]}"
    written, compiled = [], {}
    for i, (fam_name, dtype, layout, epi, m, n, k) in enumerate(pick.itertuples(index=False), 1):
        say(progress)(f"re-timing shape {i} of {len(pick)}: {m}x{n}x{k} {dtype} {layout} {epi}")
        fam = get_family(fam_name)
        on = mine[rows_where(mine, family=fam_name, dtype=dtype, layout=layout, epilogue=epi, m=m, n=n, k=k)]
        ids = sorted(set(on["config_id"]))
        ids = [ids[i] for i in np.sort(rng.permutation(len(ids))[:configs_per_shape])]
        missing = [fam.config_from_id(c) for c in ids if (dtype, epi, c) not in compiled]
        for kern in backend.compile_many(missing, dtype, epilogue=epi) if missing else ():
            compiled[(dtype, epi, kern.config.config_id)] = kern
        kernels = [compiled[(dtype, epi, c)] for c in ids]
        written += measure_rows(backend, kernels, Problem(int(m), int(n), int(k), dtype, layout, epi), protocol,
                                overhead, prov, run_id, int(rng.integers(2**31)), repeat_index=0)
    res = RecheckResult(rows_written=len(written), shapes=len(pick))
    if written:
        res.part = write_part(written, folder / RECHECK_FOLDER)
    res.noise_floors = noise_floors(folder, df)
    return res
