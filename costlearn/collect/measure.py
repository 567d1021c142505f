"""Measurement protocol: how candidates are verified and timed on one shape.

This module is backend-independent. A backend supplies a *workspace* for a
shape (inputs on the device, a float64 reference) with two operations,
``verify(kernel)`` and ``sample(kernel, n_launches)``; :func:`measure_shape`
applies the protocol of design.md ("Measurement protocol"):

- **Correctness first.** Each candidate's first run writes into an output
  poisoned with NaN and is compared with the float64 reference; a wrong
  result is a row with status ``wrong_result``, never a time.
- **Launch overhead.** One timed sample is ``n`` back-to-back launches
  between one event pair; ``n`` is chosen from a short estimate (guarded
  against a zero estimate) so a sample lasts at least
  ``Protocol.min_sample_us``; the per-launch time is sample / n. Rows whose
  per-launch time is below the backend's measured launch overhead are
  flagged ``below_overhead``.
- **Clock drift.** After warm-up, candidates are interleaved: each round runs
  every candidate once in a freshly shuffled order; a candidate's time is
  the median over rounds, with the 20th and 80th percentiles as its spread.
- **Adaptive repetition.** After ``Protocol.rounds`` rounds, a candidate whose
  relative standard error (:func:`~costlearn.collect.sample_stats.median_rse`) is above
  ``Protocol.target_rse`` keeps being sampled, still interleaved with the
  others left, until it is below the target or its cap (``max_rounds``
  rounds, ``cap_us`` of sampling) is reached; each row says which
  (``stop_reason``). With ``until="separated"`` (filter-then-measure) the
  candidates whose interval overlaps the fastest's keep being sampled until
  the fastest is separated from all of them or the cap is reached; rows whose
  interval overlaps the fastest's are a tie (``tied_best``), not ranked.
- **Caches.** Workspaces rotate among several input buffer sets (sized from
  the device's last-level cache) so consecutive launches do not find their
  inputs in cache.
- **Failures are data.** Any error while verifying or timing one candidate
  becomes that candidate's status; the others go on.

The settings are a :class:`~costlearn.collect.protocol.Protocol`; the inputs,
buffer sets and correctness check a workspace applies are
:mod:`costlearn.collect.verify`'s, the statistics of the samples
:mod:`costlearn.collect.sample_stats`'.
"""
from __future__ import annotations

import json
import math

import numpy as np

from costlearn.collect.protocol import Protocol
from costlearn.collect.sample_stats import median_interval, median_rse
from costlearn.core.errors import CostlearnError

__all__ = ["Protocol", "DeviceLost", "measure_shape"]
# Protocol is defined in costlearn.collect.protocol; it is importable from here too, where users of
# collect(protocol=...) have always imported it.


class DeviceLost(CostlearnError, RuntimeError):
    """The device context is unusable (e.g. a CUDA illegal-address fault is
    sticky): nothing more can be measured in this process."""


_STICKY = ("IllegalAddress", "ILLEGAL_ADDRESS", "LaunchFailure", "LAUNCH_FAILED", "cudaErrorMisalignedAddress",
           "MISALIGNED_ADDRESS", "cudaErrorHardwareStackError", "IllegalInstruction", "ILLEGAL_INSTRUCTION")


def _check_sticky(e: Exception) -> None:
    text = f"{type(e).__name__}: {e}"
    if any(s in text for s in _STICKY):
        raise DeviceLost(f"device context lost ({text[:300]}); later launches in this process would fail") from e


def _quantiles(x: list[float]) -> tuple[float, float, float]:
    a = np.asarray(x, dtype=np.float64)
    return float(np.median(a)), float(np.quantile(a, 0.2)), float(np.quantile(a, 0.8))


def measure_shape(workspace, kernels: list, protocol: Protocol, overhead_us: float = 0.0,
                  rng: np.random.Generator | None = None, on_progress=None,
                  repeat_index: int | None = None, until: str = "target") -> list[dict]:
    """Verify and time ``kernels`` on one shape under ``protocol``.

    Parameters
    ----------
    workspace : object
        Backend workspace for the shape, with ``verify(kernel) -> (bool,
        float)`` (poisons the output, runs once, compares with the float64
        reference) and ``sample(kernel, n) -> float`` (device time of ``n``
        back-to-back launches, microseconds).
    kernels : list of CompiledKernel
        Candidates; those whose ``status`` is not ``"ok"`` are passed through
        as rows with their compile status.
    protocol : Protocol
    overhead_us : float
        Launch overhead of the backend, microseconds; rows faster than
        this are flagged ``below_overhead``.
    rng : numpy.random.Generator, optional
        Source of the round shuffles.
    on_progress : callable, optional
        Called with no argument after each round.
    repeat_index : int, optional
        Index of a kernel to time twice, as two independent candidates in
        the same interleaved rounds; the second timing is that row's
        ``repeat_time_us`` (the raw material of the noise floor). Ignored if
        that kernel is not timed.
    until : {"target", "separated"}
        Stopping rule after the first ``protocol.rounds`` rounds: each row
        until its relative standard error is at most ``protocol.target_rse``
        (collection); or, filter-then-measure, until the fastest candidate's
        95 % interval overlaps no other's (see the module docstring). Both
        stop at the cap.

    Raises
    ------
    DeviceLost
        When an error leaves the device context unusable (CUDA
        illegal-address and similar sticky faults); the shape's rows are not
        returned.
    ValueError
        If ``until`` is not one of the above.

    Returns
    -------
    list of dict
        One row per kernel, in the order of ``kernels``, with keys
        ``config_id, status, error, time_us, time_us_p20, time_us_p80,
        n_samples, launches_per_sample, max_abs_err, below_overhead,
        repeat_time_us, rse, stop_reason, tied_best, samples_us`` (``rse``:
        :func:`~costlearn.collect.sample_stats.median_rse`; ``stop_reason``:
        :data:`~costlearn.collect.protocol.STOP_REASONS`;
        ``tied_best``: the row's interval overlaps the fastest row's;
        ``samples_us``: the per-launch samples, a JSON list).
    """
    if until not in ("target", "separated"):
        raise ValueError(f"until={until!r}; allowed: 'target', 'separated'")
    rng = rng or np.random.default_rng(protocol.seed)
    rows = []
    for kern in kernels:
        rows.append(dict(config_id=kern.config.config_id, status=kern.status, error=kern.error or "",
                         time_us=math.nan, time_us_p20=math.nan, time_us_p80=math.nan,
                         n_samples=0, launches_per_sample=0, max_abs_err=math.nan,
                         below_overhead=False, repeat_time_us=math.nan, rse=math.nan, stop_reason="",
                         tied_best=False, samples_us=""))
    live, launches = _verify_and_size(workspace, kernels, rows, protocol)
    # Entries of the interleaved schedule: (kernel index, is_repeat).
    entries = [(i, False) for i in live]
    if repeat_index is not None and repeat_index in live:
        entries.append((repeat_index, True))
    samples, stop = _sample_rounds(workspace, kernels, rows, entries, launches, protocol, rng, until, on_progress)
    _time_rows(rows, live, launches, samples, stop, protocol, until, overhead_us)
    _mark_ties(rows)
    return rows


def _verify_and_size(workspace, kernels: list, rows: list, protocol: Protocol) -> tuple[list, dict]:
    """Verify each compiled kernel, estimate one launch (the warm-up
    launches included) and size its samples; a failure is the row's status.
    Returns the indices of the kernels to time (``live``) and the launches
    per sample of each."""
    live: list[int] = []
    launches: dict[int, int] = {}
    for i, kern in enumerate(kernels):
        if kern.status != "ok":
            continue
        row = rows[i]
        try:
            ok, err = workspace.verify(kern)
        except Exception as e:  # a launch failure is data, not a crash
            _check_sticky(e)
            row.update(status="launch_error", error=f"{type(e).__name__}: {e}"[:500])
            continue
        row["max_abs_err"] = err
        if not ok:
            row.update(status="wrong_result", error=f"max abs error {err:.3g} above tolerance")
            continue
        try:
            est = workspace.sample(kern, 1)
            if est > protocol.timeout_us:
                row.update(status="timeout",
                           error=f"one launch took {est:.0f} us > timeout {protocol.timeout_us:.0f} us")
                continue
            for _ in range(protocol.warmup_launches):
                est = min(est, workspace.sample(kern, 1))
        except Exception as e:
            _check_sticky(e)
            row.update(status="launch_error", error=f"{type(e).__name__}: {e}"[:500])
            continue
        # Guard against a zero (or below-resolution) estimate.
        est = max(est, 1e-3)
        launches[i] = int(min(protocol.max_launches, max(1, math.ceil(protocol.min_sample_us / est))))
        live.append(i)
    return live, launches


def _sample_rounds(workspace, kernels: list, rows: list, entries: list, launches: dict, protocol: Protocol, rng,
                   until: str, on_progress) -> tuple[dict, dict]:
    """The interleaved rounds: each round samples every schedule entry still
    going once, in a fresh shuffle, adaptive rounds past ``protocol.rounds``
    only those :func:`_still_going` keeps. Returns the per-launch samples of
    each entry and why each stopped early (``stop``)."""
    samples: dict = {e: [] for e in entries}
    sampled_us: dict = {e: 0.0 for e in entries}
    stop: dict = {}
    adaptive = protocol.target_rse > 0
    for r in range(protocol.max_rounds if adaptive else protocol.rounds):
        going = [e for e in entries if rows[e[0]]["status"] == "ok" and e not in stop]
        if r >= protocol.rounds:
            going = _still_going(going, samples, sampled_us, protocol, until, stop)
        if not going:
            break
        rng.shuffle(going)
        for e in going:
            i = e[0]
            if rows[i]["status"] != "ok":
                continue
            try:
                t = workspace.sample(kernels[i], launches[i])
            except Exception as ex:
                _check_sticky(ex)
                rows[i].update(status="launch_error", error=f"{type(ex).__name__}: {ex}"[:500])
                continue
            samples[e].append(t / launches[i])
            sampled_us[e] += t
        if on_progress is not None:
            on_progress()
    return samples, stop


def _time_rows(rows: list, live: list, launches: dict, samples: dict, stop: dict, protocol: Protocol, until: str,
               overhead_us: float) -> None:
    """Fill the timed rows that stayed valid from their samples: median and
    spread, relative standard error, stop reason, the repeat's time."""
    adaptive = protocol.target_rse > 0
    for i in live:
        row = rows[i]
        if row["status"] != "ok":
            continue
        x = samples[(i, False)]
        med, p20, p80 = _quantiles(x)
        rse = median_rse(x)
        reason = stop.get((i, False)) or ("fixed" if not adaptive else
                                          "target" if rse <= protocol.target_rse and until == "target" else "cap")
        row.update(time_us=med, time_us_p20=p20, time_us_p80=p80, n_samples=len(x),
                   launches_per_sample=launches[i], below_overhead=bool(med < overhead_us), rse=rse,
                   stop_reason=reason, samples_us=json.dumps([float(f"{v:.6g}") for v in x]))
        if samples.get((i, True)):
            row["repeat_time_us"] = _quantiles(samples[(i, True)])[0]


def _still_going(going: list, samples: dict, sampled_us: dict, protocol: Protocol, until: str, stop: dict) -> list:
    """The schedule entries that get another adaptive round; records in
    ``stop`` why the others stopped."""
    out = []
    if until == "separated":
        primary = [e for e in going if not e[1]]
        if len(primary) < 2:
            for e in going:
                stop[e] = "separated"
            return []
        best = min(primary, key=lambda e: float(np.median(samples[e])))
        lo_b, hi_b = median_interval(samples[best])
        rivals = [e for e in primary if e != best and median_interval(samples[e])[0] <= hi_b]
        if not rivals:
            for e in going:
                stop[e] = "separated"
            return []
        for e in going:
            if e != best and e not in rivals:
                stop[e] = "separated"
        going = [best] + rivals
    for e in going:
        if sampled_us[e] >= protocol.cap_us:
            stop[e] = "cap"
        elif until == "target" and median_rse(samples[e]) <= protocol.target_rse:
            stop[e] = "target"
        else:
            out.append(e)
    if until == "separated" and len(out) < len(going) and going[0] not in out:
        # The fastest reached its cap: nothing more can separate it.
        for e in out:
            stop[e] = "cap"
        return []
    return out


def _mark_ties(rows: list) -> None:
    """Set ``tied_best`` on the valid rows whose 95 % interval overlaps the
    fastest valid row's (the fastest included, when it has a tie)."""
    ok = [r for r in rows if r["status"] == "ok" and r["samples_us"]]
    if len(ok) < 2:
        return
    iv = {id(r): median_interval(json.loads(r["samples_us"])) for r in ok}
    best = min(ok, key=lambda r: r["time_us"])
    hi_b = iv[id(best)][1]
    tied = [r for r in ok if r is not best and iv[id(r)][0] <= hi_b]
    for r in tied:
        r["tied_best"] = True
    best["tied_best"] = bool(tied)
