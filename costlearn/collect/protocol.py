"""The measurement protocol's settings: :class:`Protocol`, its version, and the values its rows take.

What :func:`costlearn.collect.measure.measure_shape` is told (rounds, the
relative-standard-error target, caps, warm-up, sample length, the input
distribution), with the row statuses (:data:`STATUSES`), the reasons a row's
sampling stops (:data:`STOP_REASONS`) and the input distributions
(:data:`DISTRIBUTIONS`). The protocol itself is described in
:mod:`costlearn.collect.measure` and design.md ("Measurement protocol").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from costlearn.core.checks import check_int, check_real

__all__ = ["Protocol", "PROTOCOL_VERSION", "STATUSES", "STOP_REASONS", "DISTRIBUTIONS"]

PROTOCOL_VERSION = 3
"""Bumped whenever a change to the protocol makes old timings incomparable.
3: adaptive repetition to a relative-standard-error target, ties by
interval, and (on CPU OpenCL devices) fewer PoCL worker threads than cores,
pinned (:mod:`costlearn.collect.backends.opencl`). 2: one candidate per shape is
timed twice (``repeat_time_us``) for the noise floor; tolerance is the
probabilistic bound; below-overhead flag."""

STOP_REASONS = ("target", "cap", "separated", "fixed")
"""Why a row's sampling stopped: its relative standard error reached
``target_rse``; its cap (rounds or sampling time) was reached first; (with
``until="separated"``) the fastest candidate's interval no longer overlaps
this one's; or adaptation was off (``target_rse=0``: ``rounds`` rounds)."""

STATUSES = ("ok", "compile_error", "launch_error", "wrong_result", "timeout")
"""Row statuses; only ``ok`` rows carry a time."""

DISTRIBUTIONS = ("normal", "uniform", "sparse")
"""Input distributions: standard normal; uniform on [-1, 1); ``sparse``:
normal values with each element kept with probability ``density`` (the
rest zero, at least one non-zero per matrix)."""


@dataclass(frozen=True)
class Protocol:
    """Settings of the measurement protocol.

    Parameters
    ----------
    rounds : int
        Interleaved rounds every candidate gets (one sample per round); the
        minimum when ``target_rse`` > 0.
    target_rse : float
        Relative standard error of a row's median
        (:func:`~costlearn.collect.sample_stats.median_rse`) below which its
        sampling stops; 0 turns adaptation off (exactly ``rounds`` rounds).
    max_rounds : int
        Cap on a candidate's rounds (>= ``rounds``).
    cap_us : float
        Cap on one candidate's total sampled time, microseconds; adaptive
        rounds stop for it once reached.
    warmup_launches : int
        Untimed launches of each candidate (with its real arguments) before
        the first round.
    min_sample_us : float
        Target duration of one timed sample, microseconds; well above the
        launch overhead (a few microseconds on CUDA, tens on PoCL).
    max_launches : int
        Cap on launches per sample.
    timeout_us : float
        A candidate whose single-launch estimate exceeds this is recorded
        with status ``timeout`` and not timed further.
    distribution : {"normal", "uniform", "sparse"}
        Input value distribution (see :data:`DISTRIBUTIONS`).
    density : float
        Fraction of non-zeros for ``distribution="sparse"``, in (0, 1].
    seed : int
        Seed of the input values and of the round shuffles.
    """

    rounds: int = 5
    target_rse: float = 0.01
    max_rounds: int = 30
    cap_us: float = 3_000_000.0
    warmup_launches: int = 2
    min_sample_us: float = 1000.0
    max_launches: int = 1000
    timeout_us: float = 2_000_000.0
    distribution: str = "normal"
    density: float = 1.0
    seed: int = 0
    version: int = PROTOCOL_VERSION

    def __post_init__(self) -> None:
        for name, lo in (("rounds", 1), ("warmup_launches", 0), ("max_launches", 1), ("seed", 0)):
            object.__setattr__(self, name, check_int(f"Protocol.{name}", getattr(self, name), lo))
        for name in ("min_sample_us", "timeout_us", "cap_us"):
            object.__setattr__(self, name, check_real(f"Protocol.{name}", getattr(self, name), 0, strict=True))
        object.__setattr__(self, "max_rounds", check_int("Protocol.max_rounds", self.max_rounds, 1))
        object.__setattr__(self, "target_rse", check_real("Protocol.target_rse", self.target_rse, 0))
        if self.target_rse >= 1:
            raise ValueError(f"Protocol.target_rse={self.target_rse!r}; must be in [0, 1) (0.01 is 1 %)")
        if self.max_rounds < self.rounds:
            raise ValueError(f"Protocol.max_rounds={self.max_rounds} is below rounds={self.rounds}; "
                             "give max_rounds >= rounds")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"Protocol.distribution={self.distribution!r}; allowed: {DISTRIBUTIONS}")
        if not 0 < self.density <= 1:
            raise ValueError(f"Protocol.density={self.density!r}; must be in (0, 1]")

    def to_dict(self) -> dict:
        """The protocol's fields, JSON-ready (recorded with every row's run)."""
        return dataclasses.asdict(self)

    def launch_us(self, time_us, rounds=None) -> np.ndarray:
        """Device time this protocol spends on one candidate: its warm-up
        launches and ``rounds`` samples, each of as many launches as reach
        ``min_sample_us`` (at most ``max_launches``;
        :func:`~costlearn.collect.measure.measure_shape`), adaptive rounds
        beyond ``rounds`` capped at ``cap_us`` in all. Compiles, verification
        and host overheads are not included.

        Parameters
        ----------
        time_us : array_like of float
            The candidates' (expected) times per launch, microseconds.
        rounds : float or array_like, optional
            Samples per candidate (default: ``rounds``, the minimum; adaptive
            sampling takes up to ``max_rounds``).

        Returns
        -------
        ndarray of float64, microseconds, the shape of ``time_us``
        """
        t = np.maximum(np.asarray(time_us, np.float64), 1e-3)
        rounds = self.rounds if rounds is None else np.asarray(rounds, np.float64)
        sample_us = t * np.clip(np.ceil(self.min_sample_us / t), 1, self.max_launches)
        sampled_us = np.maximum(self.rounds * sample_us, np.minimum(self.cap_us, rounds * sample_us))
        return self.warmup_launches * t + sampled_us
