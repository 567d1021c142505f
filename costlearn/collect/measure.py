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
  relative standard error (:func:`median_rse`) is above
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
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import time
from dataclasses import dataclass

import numpy as np

from costlearn.core.dtypes import get_dtype
from costlearn.core.problem import check_epilogue
from costlearn.core.checks import check_int, check_real
from costlearn.core.errors import CostlearnError

__all__ = ["Protocol", "PROTOCOL_VERSION", "DeviceLost", "STATUSES", "measure_shape", "make_inputs", "apply_epilogue",
           "DISTRIBUTIONS", "tolerance", "check_result", "rotation_sets", "median_rse", "STOP_REASONS", "t_quantile_95"]

class DeviceLost(CostlearnError, RuntimeError):
    """The device context is unusable (e.g. a CUDA illegal-address fault is
    sticky): nothing more can be measured in this process."""


_STICKY = ("IllegalAddress", "ILLEGAL_ADDRESS", "LaunchFailure", "LAUNCH_FAILED", "cudaErrorMisalignedAddress",
           "MISALIGNED_ADDRESS", "cudaErrorHardwareStackError", "IllegalInstruction", "ILLEGAL_INSTRUCTION")


def _check_sticky(e: Exception) -> None:
    text = f"{type(e).__name__}: {e}"
    if any(s in text for s in _STICKY):
        raise DeviceLost(f"device context lost ({text[:300]}); later launches in this process would fail") from e


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

def median_rse(samples) -> float:
    """Relative standard error of the median of ``samples``.

    SE(median) ~= sqrt(pi / 2) * s / sqrt(n), the asymptotic standard error
    of the sample median of a normal sample (Kendall and Stuart, *The
    Advanced Theory of Statistics*, vol. 1, sec. 10.10), with s the sample
    standard deviation (ddof 1), divided by the median. The plain standard
    deviation, not a robust one: at the 5 samples a row starts with, the MAD
    is often near 0 and would stop sampling too early, while an outlier (a
    preempted sample) only inflates s, which costs more samples, never a
    wrong stop.

    Parameters
    ----------
    samples : sequence of float, length n >= 1
        Per-launch times, any unit.

    Returns
    -------
    float
        SE / median; ``inf`` for fewer than 3 samples (too few to judge) or a
        median <= 0.
    """
    a = np.asarray(samples, dtype=np.float64)
    if a.size < 3:
        return math.inf
    med = float(np.median(a))
    if not med > 0:
        return math.inf
    return math.sqrt(math.pi / 2) * float(np.std(a, ddof=1)) / math.sqrt(a.size) / med


@functools.lru_cache(maxsize=64)
def t_quantile_95(n: int) -> float:
    """Two-sided 95 % quantile of Student's t with n - 1 degrees of freedom
    (the width factor of a small sample's interval: 2.78 at n = 5, 2.05 at
    n = 30); ``inf`` for n < 2."""
    if n < 2:
        return math.inf
    from scipy.stats import t
    return float(t.ppf(0.975, n - 1))

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
        Relative standard error of a row's median (:func:`median_rse`) below
        which its sampling stops; 0 turns adaptation off (exactly ``rounds``
        rounds).
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
        ``min_sample_us`` (at most ``max_launches``; :func:`measure_shape`),
        adaptive rounds beyond ``rounds`` capped at ``cap_us`` in all.
        Compiles, verification and host overheads are not included.

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


def make_inputs(m: int, n: int, k: int, distribution: str = "normal", density: float = 1.0,
                rng: np.random.Generator | None = None, dtype: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    """Random inputs A [m, k] and B [k, n], C-contiguous, in the host dtype
    of ``dtype`` (:data:`costlearn.core.dtypes.DTYPES`: float32 for ``float32``
    and ``tfloat32``, float16 for ``float16``).

    Never all zeros: with ``distribution="sparse"`` at least one element of
    each matrix is non-zero.

    Raises
    ------
    ValueError
        If ``distribution`` is unknown, ``density`` outside (0, 1], or the
        dtype has no numpy host type (bfloat16: its backend makes inputs).
    """
    host = get_dtype(dtype).host_dtype
    if host is None:
        raise ValueError(f"dtype={dtype!r} has no numpy host type; its backend generates the inputs")
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution={distribution!r}; allowed: {DISTRIBUTIONS}")
    if not 0 < density <= 1:
        raise ValueError(f"density={density!r}; must be in (0, 1]")
    rng = rng or np.random.default_rng(0)
    out = []
    for shape in ((m, k), (k, n)):
        if distribution == "uniform":
            x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        else:
            x = rng.standard_normal(size=shape, dtype=np.float32)
        if distribution == "sparse" and density < 1:
            mask = rng.random(size=shape) < density
            mask.flat[rng.integers(mask.size)] = True
            x = np.where(mask, x, np.float32(0))
        if not np.any(x):  # guard the (measure-zero) all-zero draw
            x.flat[0] = np.float32(1)
        out.append(np.ascontiguousarray(x.astype(host, copy=False)))
    return out[0], out[1]


def tolerance(a, b, dtype: str = "float32", xp=np, bias=None):
    """Per-element error bound for C = A @ B accumulated in ``dtype``, and
    for an epilogue's output when ``bias`` is given.

    Bound: ``|C - C_ref| <= 16 * sqrt(K) * eps * (|A| @ |B|) + tiny``, the
    probabilistic forward error bound of a length-K dot product,
    lambda * sqrt(K) * u (N. J. Higham and T. Mary, "A new approach to
    probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5),
    2019), with lambda = 16 (u = eps/2, so a factor 32 over u). It scales with
    K and the dtype's epsilon, and is tight enough that an error of one unit
    in one element of a K = 4096 product is caught.

    With a bias the sum's magnitude ``|A| @ |B| + |bias|`` replaces
    ``|A| @ |B|``, times 1.2 (the steepest slope of the activations of
    :data:`costlearn.core.problem.EPILOGUES`: ReLU 1, the tanh GELU 1.13), plus
    the activation's own float32 rounding, 2**-20 (8 ulp) of that
    magnitude plus 2**-20 absolute.

    Parameters
    ----------
    a, b : array, shapes (M, K) and (K, N)
    dtype : str
        Name in :data:`costlearn.core.dtypes.DTYPES`; its epsilon (of the
        multiply: 2**-10 for TF32) scales the bound.
    xp : module
        ``numpy``, or ``cupy`` to compute on the GPU.
    bias : array, shape (N,), optional
        The epilogue's bias; None without an epilogue.

    Returns
    -------
    array of float64, shape (M, N), of the module ``xp``
    """
    eps = get_dtype(dtype).eps
    k = a.shape[1]
    scale = xp.abs(a).astype(xp.float64) @ xp.abs(b).astype(xp.float64)
    if bias is None:
        return 16.0 * math.sqrt(k) * eps * scale + 1e-30
    scale += xp.abs(bias).astype(xp.float64)
    return 1.2 * 16.0 * math.sqrt(k) * eps * scale + 2.0 ** -20 * (scale + 1.0)


def apply_epilogue(v, bias, epilogue: str, xp=np):
    """The float64 reference of an epilogue: ``v + bias`` (broadcast over
    rows), then the activation of ``epilogue``
    (:data:`costlearn.core.problem.EPILOGUES`; the tanh GELU of Hendrycks and
    Gimpel, 2016); ``v`` itself for ``"none"``.

    Parameters
    ----------
    v : array of float64, shape (M, N)
        A @ B.
    bias : array, shape (N,), or None for ``"none"``
    epilogue : str
    xp : module
        ``numpy`` or ``cupy``.

    Returns
    -------
    array of float64, shape (M, N)

    Raises
    ------
    ValueError
        If ``epilogue`` is unknown, or needs a bias and none is given.
    """
    check_epilogue(epilogue)
    if epilogue == "none":
        return v
    if bias is None:
        raise ValueError(f"epilogue={epilogue!r} needs a bias (a length-N vector)")
    v = v + xp.asarray(bias).astype(xp.float64)
    if epilogue == "bias_relu":
        return xp.maximum(v, 0.0)
    if epilogue == "bias_gelu":
        return 0.5 * v * (1.0 + xp.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    return v


def check_result(c, ref, tol, xp=np) -> tuple[bool, float]:
    """Compare a kernel's output with the reference.

    Parameters
    ----------
    c : array, shape (M, N)
        The kernel's output (any float dtype).
    ref, tol : array of float64, shape (M, N)
        Reference and per-element tolerance (:func:`tolerance`).
    xp : module
        ``numpy``, or ``cupy`` for arrays on the GPU.

    Returns
    -------
    ok : bool
        True when every element is finite and within ``tol``. A NaN left
        from the poisoned output (an element never written) fails.
    max_abs_err : float
        Largest absolute error (``inf`` where an element is not finite).
    """
    c = xp.asarray(c, dtype=xp.float64).reshape(ref.shape)
    if not bool(xp.all(xp.isfinite(c))):
        return False, math.inf
    err = xp.abs(c - ref)
    return bool(xp.all(err <= tol)), float(err.max()) if err.size else 0.0


def rotation_sets(bytes_per_set: int, cache_bytes: int, max_total_bytes: int = 1 << 30) -> int:
    """Number of input buffer sets to rotate among so that a launch does not
    find its inputs in the last-level cache: enough sets to cover twice the
    cache, at least 1, at most :data:`MAX_ROTATION_SETS` and at most
    ``max_total_bytes`` in all. Below about 2 x cache / 256 bytes per set
    (200 KB on a 50 MB L2: shapes up to about 128^3) the cap leaves part of
    the inputs warm; such kernels are short and mostly launch-bound."""
    want = math.ceil(2 * cache_bytes / max(bytes_per_set, 1)) + 1
    cap = max(1, max_total_bytes // max(bytes_per_set, 1))
    return int(max(1, min(want, MAX_ROTATION_SETS, cap)))


MAX_ROTATION_SETS = 256


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
        :func:`median_rse`; ``stop_reason``: :data:`STOP_REASONS`;
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
    # Entries of the interleaved schedule: (kernel index, is_repeat).
    entries = [(i, False) for i in live]
    if repeat_index is not None and repeat_index in live:
        entries.append((repeat_index, True))
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
    _mark_ties(rows)
    return rows


def _interval(x: list) -> tuple[float, float]:
    """95 % interval of the median of samples ``x``: median ± t · SE, with t
    Student's quantile for n - 1 degrees of freedom (:func:`t_quantile_95`)."""
    med = float(np.median(x))
    half = t_quantile_95(len(x)) * median_rse(x) * med
    return med - half, med + half


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
        lo_b, hi_b = _interval(samples[best])
        rivals = [e for e in primary if e != best and _interval(samples[e])[0] <= hi_b]
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
    iv = {id(r): _interval(json.loads(r["samples_us"])) for r in ok}
    best = min(ok, key=lambda r: r["time_us"])
    hi_b = iv[id(best)][1]
    tied = [r for r in ok if r is not best and iv[id(r)][0] <= hi_b]
    for r in tied:
        r["tied_best"] = True
    best["tied_best"] = bool(tied)


class Stopwatch:
    """Accumulates wall time per phase (compile, measure, write), seconds."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str):
        """Context manager adding the wall seconds of its block to
        ``seconds[name]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
