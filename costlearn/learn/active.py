"""The model an active collection refits each round
(:mod:`costlearn.collect.active_shapes`, ``active``): a bootstrap ensemble of
small cost models and how unsure it is of its pick on a problem.

It lives here, above the collection and the models, and is passed down as
``ActiveSettings(ensemble=EnsembleDisagreement)`` (the command line and
``transfer`` do so).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from costlearn.collect.active_shapes import ActiveSettings
from costlearn.model import get_model
from costlearn.model.base import shape_groups
from costlearn.model.xgb import XGBParams

__all__ = ["EnsembleDisagreement", "member_params", "active_settings"]


def member_params(settings: ActiveSettings, j: int) -> XGBParams:
    """The XGBoost parameters of member ``j``: ``settings``' trees, depth and
    threads, a learning rate of 0.15, early stopping after a fifth of the
    trees (at least 10), seed ``j``."""
    return XGBParams(n_estimators=settings.trees, max_depth=settings.max_depth, learning_rate=0.15,
                     early_stopping_rounds=max(10, settings.trees // 5), n_jobs=settings.n_jobs, seed=j)


def active_settings(**kw) -> ActiveSettings:
    """:class:`~costlearn.collect.active_shapes.ActiveSettings` of ``kw`` with this
    module's :class:`EnsembleDisagreement` (what ``collect --strategy active``
    uses)."""
    return ActiveSettings(**{"ensemble": EnsembleDisagreement, **kw})


class EnsembleDisagreement:
    """How unsure a bootstrap ensemble of the cost model is of its pick on a
    problem.

    :meth:`fit` trains ``members`` small XGBoost models (the analytic
    features, log-time objective), each on a bootstrap sample of the measured
    problems. :meth:`score` predicts every candidate config of a problem
    with every member and returns the expected regret of the ensemble's
    pick: the mean over members j of log2 t_j(pick) - min_c log2 t_j(c),
    where the pick minimises the members' mean prediction. It is 0 where
    every member agrees on the best config, and grows with how much faster
    the members think another config is.

    Parameters
    ----------
    spec : DeviceSpec
        The device whose times are predicted.
    settings : ActiveSettings
    seed : int
    make_member : callable (int) -> CostModel, optional
        An unfitted member, given its index (default: XGBoost on the
        analytic features with ``settings``' trees and depth, log-time
        objective); a transfer passes a multi-device model.
    """

    def __init__(self, spec, settings: ActiveSettings, seed: int, make_member=None):
        self.spec, self.settings, self.seed = spec, settings, seed
        self.make_member = make_member or self.default_member
        self.members_ = []

    def default_member(self, j: int):
        """Member ``j``: a small XGBoost model on the analytic features (log time)."""
        return get_model("xgboost", feature_set="analytic", params=member_params(self.settings, j))

    def fit(self, rows: pd.DataFrame) -> "EnsembleDisagreement":
        """Fit the members on ``rows`` (valid measured rows of one family and
        dtype, with ``time_us``); returns self.

        Raises
        ------
        ValueError
            If ``rows`` hold fewer than 2 problems or lack a model's columns.
        """
        s = self.settings
        groups = shape_groups(rows)
        n = int(groups.max()) + 1 if len(groups) else 0
        if n < 2:
            raise ValueError(f"cannot fit the active strategy's ensemble on {n} measured problems; it needs 2 "
                             "(ActiveSettings.first_round >= 2)")
        by_group = np.argsort(groups, kind="stable")
        starts = np.searchsorted(groups[by_group], np.arange(n + 1))
        size = n if s.member_problems is None else min(n, s.member_problems)
        self.members_ = []
        for j in range(s.members):
            rng = np.random.default_rng([self.seed, 8, j, n])
            picks = rng.integers(n, size=size)
            while len(np.unique(picks)) < 2:            # a member learns from 2 problems at least (its early stop)
                picks = rng.integers(n, size=max(size, 2))
            idx = np.concatenate([by_group[starts[g]:starts[g + 1]] for g in picks])
            self.members_.append(self.make_member(j).fit(rows.iloc[idx].reset_index(drop=True), self.spec))
        return self

    def time_us(self, candidates: pd.DataFrame) -> np.ndarray:
        """The members' geometric-mean predicted time of each candidate row.

        Parameters
        ----------
        candidates : DataFrame
            As :meth:`score`'s.

        Returns
        -------
        ndarray of float64, microseconds, one per row
        """
        return np.exp2(self._log2_times(candidates).mean(axis=0))

    def _log2_times(self, candidates: pd.DataFrame) -> np.ndarray:
        """log2 of every member's predicted time, shape (members, rows)."""
        return np.stack([np.log2(np.maximum(mem.predict(candidates), 1e-30)) for mem in self.members_])

    def score(self, candidates: pd.DataFrame) -> pd.Series:
        """Expected regret (log2) of the ensemble's pick per problem.

        Parameters
        ----------
        candidates : DataFrame
            One row per (problem, candidate config): ``m, n, k, dtype,
            layout, epilogue, family, config_id``.

        Returns
        -------
        Series of float64, indexed by (m, n, k, layout)
        """
        problem = ["m", "n", "k", "layout"]
        logs = self._log2_times(candidates)
        key = candidates.groupby(problem, sort=True, observed=True).ngroup().to_numpy()
        members = list(range(len(self.members_)))
        frame = pd.DataFrame(logs.T, columns=members).assign(_key=key, _mean=logs.mean(axis=0))
        pick = frame.loc[frame.groupby("_key")["_mean"].idxmin()].set_index("_key").sort_index()
        best = frame.groupby("_key")[members].min().sort_index()
        regret = (pick[members] - best).mean(axis=1)
        index = candidates[problem].drop_duplicates().astype({"m": int, "n": int, "k": int, "layout": str})
        return pd.Series(regret.to_numpy(), index=pd.MultiIndex.from_frame(index.sort_values(problem)))
