"""The measurement protocol's logic, pinned with small mocks."""
import math

import numpy as np
import pytest

from costlearn.backends.base import CompiledKernel
from costlearn.measure import Protocol, check_result, make_inputs, measure_shape, rotation_sets, tolerance
from costlearn.families.gemm import GemmConfig as TileConfig

A = TileConfig(64, 64, 16, 4, 4)
B = TileConfig(32, 32, 16, 2, 2)


class DriftingWorkspace:
    """Every kernel truly takes 100 us, but the device speeds up by 20 %
    over the first ``ramp`` launches (a clock ramping up)."""

    def __init__(self, ramp=200, true_us=100.0, wrong=(), broken=()):
        self.launches = 0
        self.ramp, self.true_us = ramp, true_us
        self.wrong, self.broken = set(wrong), set(broken)

    def _one(self):
        slow = 1.2 - 0.2 * min(self.launches / self.ramp, 1.0)
        self.launches += 1
        return self.true_us * slow

    def verify(self, kern):
        if kern.config.config_id in self.broken:
            raise RuntimeError("CL_OUT_OF_RESOURCES")
        self._one()
        return kern.config.config_id not in self.wrong, (1.0 if kern.config.config_id in self.wrong else 0.0)

    def sample(self, kern, n):
        return sum(self._one() for _ in range(n))


def _kernels(*cfgs):
    return [CompiledKernel(c) for c in cfgs]


def test_interleaved_rounds_cancel_clock_drift():
    ws = DriftingWorkspace(ramp=20)
    rows = measure_shape(ws, _kernels(A, B), Protocol(rounds=9, warmup_launches=0, min_sample_us=100.0))
    ta, tb = rows[0]["time_us"], rows[1]["time_us"]
    assert abs(ta / tb - 1) < 0.02, (ta, tb)


def test_sequential_schedule_is_biased_by_drift():
    """The control above matters: timing A fully before B misreads them."""
    ws = DriftingWorkspace(ramp=20)
    p = Protocol(rounds=9, warmup_launches=0, min_sample_us=100.0)
    ta = measure_shape(ws, _kernels(A), p)[0]["time_us"]
    tb = measure_shape(ws, _kernels(B), p)[0]["time_us"]
    assert abs(ta / tb - 1) > 0.05


def test_launches_per_sample_cover_the_target_duration():
    ws = DriftingWorkspace(ramp=1)
    row = measure_shape(ws, _kernels(A), Protocol(rounds=3, min_sample_us=1000.0))[0]
    assert row["launches_per_sample"] == 10
    assert row["n_samples"] == 3
    assert row["time_us_p20"] <= row["time_us"] <= row["time_us_p80"]


def test_zero_estimate_is_guarded():
    class Instant(DriftingWorkspace):
        def sample(self, kern, n):
            return 0.0
    row = measure_shape(Instant(), _kernels(A), Protocol(rounds=2, max_launches=50))[0]
    assert row["launches_per_sample"] == 50
    assert row["status"] == "ok"


def test_wrong_result_is_a_status_not_a_time():
    ws = DriftingWorkspace(wrong={B.config_id})
    rows = measure_shape(ws, _kernels(A, B), Protocol(rounds=2))
    assert rows[0]["status"] == "ok"
    assert rows[1]["status"] == "wrong_result" and math.isnan(rows[1]["time_us"])


def test_launch_failure_of_one_config_does_not_stop_the_others():
    ws = DriftingWorkspace(broken={A.config_id})
    rows = measure_shape(ws, _kernels(A, B), Protocol(rounds=2))
    assert rows[0]["status"] == "launch_error" and "CL_OUT_OF_RESOURCES" in rows[0]["error"]
    assert rows[1]["status"] == "ok"


def test_compile_error_passes_through_as_a_row():
    k = CompiledKernel(A, "compile_error", "ptxas: too many resources")
    row = measure_shape(DriftingWorkspace(), [k], Protocol(rounds=2))[0]
    assert row["status"] == "compile_error" and "ptxas" in row["error"]


def test_slow_config_times_out():
    ws = DriftingWorkspace(true_us=5e6, ramp=1)
    row = measure_shape(ws, _kernels(A), Protocol(rounds=2, timeout_us=1e6))[0]
    assert row["status"] == "timeout"


def test_rows_below_launch_overhead_are_flagged():
    row = measure_shape(DriftingWorkspace(ramp=1), _kernels(A), Protocol(rounds=2), overhead_us=500.0)[0]
    assert row["below_overhead"]


@pytest.mark.parametrize("dist", ["normal", "uniform", "sparse"])
def test_inputs_are_never_all_zero(dist):
    a, b = make_inputs(3, 2, 1, dist, density=1e-9, rng=np.random.default_rng(0))
    assert a.dtype == np.float32 and a.shape == (3, 1) and b.shape == (1, 2)
    assert np.any(a) and np.any(b)


def test_unknown_distribution_is_a_clear_error():
    with pytest.raises(ValueError, match="laplace"):
        make_inputs(2, 2, 2, "laplace")
    with pytest.raises(ValueError, match="distribution"):
        Protocol(distribution="laplace")


def test_tolerance_scales_with_k_and_catches_real_errors():
    rng = np.random.default_rng(0)
    a, b = make_inputs(8, 8, 4096, rng=rng)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    tol = tolerance(a, b)
    assert check_result((a @ b).astype(np.float32), ref, tol)[0]
    bad = (a @ b).astype(np.float32)
    bad[3, 4] += 1.0
    assert not check_result(bad, ref, tol)[0]
    nan = (a @ b).astype(np.float32)
    nan[0, 0] = np.nan
    assert check_result(nan, ref, tol) == (False, math.inf)


def test_rotation_covers_twice_the_cache():
    assert rotation_sets(1 << 10, 50 << 20) == 256     # capped
    assert rotation_sets(1 << 20, 50 << 20) == 101
    assert rotation_sets(10 << 20, 50 << 20) == 11
    assert rotation_sets(1 << 30, 50 << 20) == 1
