"""The measurement protocol's logic, pinned with small mocks."""
import math

import numpy as np
import pytest

from costlearn.collect.backends.base import CompiledKernel
from costlearn.collect.measure import measure_shape
from costlearn.collect.protocol import Protocol
from costlearn.collect.verify import check_result, make_inputs, rotation_sets, tolerance
from costlearn.families.gemm import GemmConfig as TileConfig
import pandas as pd
from costlearn.collect.measure import DeviceLost

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
    p = Protocol(rounds=9, warmup_launches=0, min_sample_us=100.0, target_rse=0)    # fixed rounds
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


class NoisyWorkspace:
    """Each config has a true time and multiplicative noise of its own
    relative size (a seeded lognormal), so stopping rules are pinned without
    a real device."""

    def __init__(self, true_us: dict, noise: dict, seed=0):
        self.true_us, self.noise = true_us, noise
        self.rng = np.random.default_rng(seed)
        self.calls: dict = {}

    def verify(self, kern):
        return True, 0.0

    def sample(self, kern, n):
        cid = kern.config.config_id
        self.calls[cid] = self.calls.get(cid, 0) + 1
        return n * self.true_us[cid] * float(np.exp(self.rng.normal(0, self.noise[cid])))


def test_median_rse_is_the_robust_standard_error_of_the_median():
    from costlearn.collect.sample_stats import median_rse
    rng = np.random.default_rng(1)
    x = 100 * (1 + 0.05 * rng.standard_normal(400))
    # sqrt(pi/2) * sigma / sqrt(n) / median, sigma = 5 %
    assert median_rse(x) == pytest.approx(math.sqrt(math.pi / 2) * 0.05 / 20, rel=0.15)
    assert median_rse([1.0, 1.0]) == math.inf                   # too few samples to judge
    # Five samples of 5 % noise whose middle three agree: a MAD-based error
    # would call this 0.1 % and stop; the standard deviation does not.
    assert median_rse([95.0, 99.9, 100.0, 100.1, 105.0]) > 0.01


def test_sampling_stops_at_the_target_or_at_the_cap_and_says_which():
    quiet, loud = A.config_id, B.config_id
    ws = NoisyWorkspace({quiet: 100.0, loud: 100.0}, {quiet: 0.001, loud: 0.30})
    p = Protocol(rounds=5, target_rse=0.01, max_rounds=25, warmup_launches=0, min_sample_us=100.0)
    rq, rl = measure_shape(ws, _kernels(A, B), p)
    assert rq["stop_reason"] == "target" and rq["n_samples"] == 5 and rq["rse"] <= 0.01
    assert rl["stop_reason"] == "cap" and rl["n_samples"] == 25 and rl["rse"] > 0.01
    assert len(__import__("json").loads(rl["samples_us"])) == 25
    ws = NoisyWorkspace({quiet: 100.0, loud: 100.0}, {quiet: 0.001, loud: 0.30})
    capped = measure_shape(ws, _kernels(B), Protocol(rounds=5, max_rounds=25, cap_us=800.0, min_sample_us=100.0,
                                                      warmup_launches=0))[0]
    assert capped["stop_reason"] == "cap" and capped["n_samples"] == 8           # 8 samples of 100 us: the time cap
    fixed = measure_shape(NoisyWorkspace({loud: 100.0}, {loud: 0.3}), _kernels(B),
                          Protocol(rounds=7, target_rse=0, warmup_launches=0))[0]
    assert fixed["stop_reason"] == "fixed" and fixed["n_samples"] == 7


def test_candidates_whose_intervals_overlap_are_a_tie_not_a_ranking():
    C = TileConfig(16, 16, 8, 2, 2)
    ws = NoisyWorkspace({A.config_id: 100.0, B.config_id: 101.0, C.config_id: 200.0},
                        {A.config_id: 0.05, B.config_id: 0.05, C.config_id: 0.01})
    ra, rb, rc = measure_shape(ws, _kernels(A, B, C), Protocol(rounds=5, max_rounds=10, warmup_launches=0))
    assert ra["tied_best"] and rb["tied_best"] and not rc["tied_best"]


def test_filter_then_measure_keeps_timing_until_the_winner_is_separated():
    C = TileConfig(16, 16, 8, 2, 2)
    true = {A.config_id: 100.0, B.config_id: 102.0, C.config_id: 300.0}
    noise = {A.config_id: 0.03, B.config_id: 0.03, C.config_id: 0.03}
    p = Protocol(rounds=5, max_rounds=200, warmup_launches=0)
    ws = NoisyWorkspace(true, noise, seed=1)
    ra, rb, rc = measure_shape(ws, _kernels(A, B, C), p, until="separated")
    assert ra["stop_reason"] == rb["stop_reason"] == "separated" and not ra["tied_best"]
    assert rc["n_samples"] < rb["n_samples"]                     # the far one stopped early
    assert ws.calls[A.config_id] == ra["n_samples"] + 1             # + the one-launch estimate
    # 100 vs 100.5 us at 3 % noise cannot be separated in 12 rounds: a tie at the cap.
    true[B.config_id] = 100.5
    ra, rb, _ = measure_shape(NoisyWorkspace(true, noise, seed=3), _kernels(A, B, C),
                              Protocol(rounds=5, max_rounds=12, warmup_launches=0), until="separated")
    assert ra["stop_reason"] == "cap" and ra["tied_best"] and rb["tied_best"]


def test_protocol_refuses_caps_below_its_minimum():
    with pytest.raises(ValueError, match="max_rounds=3 is below rounds=5"):
        Protocol(rounds=5, max_rounds=3)
    with pytest.raises(ValueError, match="target_rse"):
        Protocol(target_rse=1.5)
    with pytest.raises(ValueError, match="until="):
        measure_shape(NoisyWorkspace({}, {}), [], Protocol(), until="forever")




def test_sticky_device_fault_stops_the_shape_with_device_lost():
    class Faulting:
        def verify(self, kern):
            raise RuntimeError("CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access")

        def sample(self, kern, n):
            return 1.0
    with pytest.raises(DeviceLost, match="IllegalAddress"):
        measure_shape(Faulting(), [CompiledKernel(A)], Protocol(rounds=1))


def test_protocol_accepts_numpy_ints_and_refuses_a_negative_timeout():
    assert Protocol(rounds=np.int64(3)).rounds == 3
    with pytest.raises(ValueError, match="timeout_us"):
        Protocol(timeout_us=-1)


def test_replay_reproduces_a_recorded_timeout():
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.core.device import preset
    from conftest import dataset_row as _row
    from costlearn.core.problem import Problem
    rows = pd.DataFrame([_row(config_id=A.config_id, status="timeout", time_us=math.nan, device_slug="h200")])
    be = ReplayBackend(rows, spec=preset("h200"))
    with be.workspace(Problem(4, 5, 6)) as ws:
        row = measure_shape(ws, [be.compile(A)], Protocol(rounds=1))[0]
    assert row["status"] == "timeout"


def test_epilogue_reference_adds_the_bias_then_the_activation():
    from costlearn.collect.verify import apply_epilogue
    v = np.array([[-2.0, 0.5], [1.0, -0.25]])
    bias = np.array([1.0, -1.0], np.float32)
    assert apply_epilogue(v, None, "none") is v
    np.testing.assert_array_equal(apply_epilogue(v, bias, "bias"), [[-1.0, -0.5], [2.0, -1.25]])
    np.testing.assert_array_equal(apply_epilogue(v, bias, "bias_relu"), [[0.0, 0.0], [2.0, 0.0]])
    x = np.array([[-1.0, -0.5], [2.0, -1.25]])
    gelu = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(apply_epilogue(v, bias, "bias_gelu"), gelu, rtol=1e-15)
    assert abs(apply_epilogue(np.array([[3.0]]), np.zeros(1), "bias_gelu")[0, 0] - 2.9963625) < 1e-6   # torch's value
    with pytest.raises(ValueError, match="needs a bias"):
        apply_epilogue(v, None, "bias")
    with pytest.raises(ValueError, match="epilogue='gelu'"):
        apply_epilogue(v, bias, "gelu")


def test_epilogue_tolerance_covers_the_bias_and_catches_a_missing_bias():
    """With a bias the bound grows with |bias|, and stays far below leaving
    the bias out (an error of |bias|)."""
    rng = np.random.default_rng(3)
    a, b = make_inputs(64, 48, 300, rng=rng)
    bias = rng.standard_normal(48).astype(np.float32)
    plain, with_bias = tolerance(a, b), tolerance(a, b, bias=bias)
    assert (with_bias > plain).all()
    assert (with_bias < 0.2 * np.abs(bias)[None, :] + 1e-3).mean() > 0.9


class AlternatingWorkspace(DriftingWorkspace):
    """Samples alternately 40 % slow and 40 % fast (a mean of the true time):
    adaptive sampling never reaches its target error and runs into its caps."""

    samples = 0

    def sample(self, kern, n):
        if n == 1:                                      # warm-up and the single-launch estimate
            return super().sample(kern, n)
        self.samples += 1
        return super().sample(kern, n) * (1.4 if self.samples % 2 else 0.6)


def test_launch_us_is_the_device_time_measure_shape_spends():
    """The active strategy's cost per second predicts a candidate's
    device time with Protocol.launch_us; it must count the launches
    measure_shape makes (warm-up, launches per sample, rounds, the cap)."""
    cases = ((100.0, Protocol(rounds=3, target_rse=0, min_sample_us=1000.0), None),    # 10 launches a sample
             (5000.0, Protocol(rounds=4, target_rse=0), None),                          # one a sample
             (0.5, Protocol(rounds=2, target_rse=0, max_launches=50), None),            # launches capped
             (100.0, Protocol(rounds=3, max_rounds=30, cap_us=6000.0), 30))             # adaptive rounds, time cap
    for true_us, p, rounds in cases:
        ws = (AlternatingWorkspace if rounds else DriftingWorkspace)(ramp=1, true_us=true_us)
        measure_shape(ws, _kernels(A), p)
        expected = float(p.launch_us(true_us, rounds)) / true_us
        assert 0 <= ws.launches - expected <= 2, (true_us, p, ws.launches, expected)    # verify, estimate
