"""Each control of the measurement protocol has a test that fails if the
control is removed (mocks of the workspace pin the logic down)."""
import math

import numpy as np
import pandas as pd

from costlearn.collect.backends.base import CompiledKernel, DeviceWorkspace, HostProblem
from costlearn.collect.dataset import noise_floor
from costlearn.collect.measure import measure_shape
from costlearn.collect.protocol import Protocol
from costlearn.collect.verify import rotation_sets
from costlearn.families.gemm import GemmConfig as TileConfig

A = TileConfig(64, 64, 16, 4, 4)
B = TileConfig(32, 32, 16, 2, 2)


class RecordingWorkspace(DeviceWorkspace):
    """A DeviceWorkspace whose 'device' records which buffer set each launch
    read, and whose output is whatever the kernel mock writes."""

    def __init__(self, prob, writes_rows=None):
        super().__init__(prob)
        self.sets_used = []
        self.c = np.zeros((prob.m, prob.n), np.float32)
        self.writes_rows = writes_rows

    def _launch(self, kernel, s):
        self.sets_used.append(s)
        full = self.prob.a_sets[s].astype(np.float64) @ self.prob.b_sets[s].astype(np.float64)
        rows = self.writes_rows if self.writes_rows is not None else self.prob.m
        self.c[:rows] = full[:rows]

    def _poison_output(self):
        self.c.fill(np.nan)

    def _read_output(self):
        return self.c

    def sample(self, kernel, n):
        for _ in range(n):
            self._launch_next(kernel)
        return 10.0 * n


def _prob(m=8, n=8, k=8, cache=1 << 14):
    from costlearn.core.problem import Problem
    return HostProblem.make(Problem(m, n, k), "normal", 1.0, 0, cache)


def test_launches_rotate_through_buffer_sets_sized_from_the_cache():
    prob = _prob(cache=1 << 14)
    assert len(prob.a_sets) == rotation_sets(4 * (8 * 8 + 8 * 8), 1 << 14) > 2
    ws = RecordingWorkspace(prob)
    ws.sample(CompiledKernel(A), 2 * len(prob.a_sets))
    assert sorted(set(ws.sets_used)) == list(range(len(prob.a_sets)))
    assert all(a != b for a, b in zip(ws.sets_used, ws.sets_used[1:]))
    assert not np.array_equal(prob.a_sets[0], prob.a_sets[1])


def test_poisoned_output_catches_a_kernel_that_writes_part_of_c_after_a_good_run():
    prob = _prob()
    good = RecordingWorkspace(prob)
    assert good.verify(CompiledKernel(A))[0]
    partial = RecordingWorkspace(prob, writes_rows=prob.m - 1)
    partial.c[:] = good.c            # what a previous, correct kernel left behind
    ok, err = partial.verify(CompiledKernel(B))
    assert not ok and err == math.inf


def test_warm_up_keeps_a_slow_first_launch_out_of_the_launch_count():
    class ColdStart(RecordingWorkspace):
        def sample(self, kernel, n):
            self.calls = getattr(self, "calls", 0) + 1
            return (5000.0 if self.calls <= 2 else 10.0) * n
    row = measure_shape(ColdStart(_prob()), [CompiledKernel(A)],
                        Protocol(rounds=3, warmup_launches=2, min_sample_us=1000.0))[0]
    assert row["launches_per_sample"] == 100 and row["time_us"] == 10.0


def test_repeat_candidate_gives_the_noise_floor():
    rows = measure_shape(RecordingWorkspace(_prob()), [CompiledKernel(A), CompiledKernel(B)],
                         Protocol(rounds=3), repeat_index=1)
    assert math.isnan(rows[0]["repeat_time_us"]) and rows[1]["repeat_time_us"] == 10.0
    df = pd.DataFrame(dict(m=[1, 1, 1], n=[1, 1, 1], k=[1, 1, 1], status="ok", time_us=[10.0, 20.0, 30.0],
                           repeat_time_us=[11.0, math.nan, 27.0]))
    assert noise_floor(df) == np.median([0.1, 3 / 27])
    assert math.isnan(noise_floor(df.assign(repeat_time_us=math.nan)))


def test_throttle_reasons_flag_only_real_hazards():
    from costlearn.collect.backends.nvml import throttle_fields
    assert throttle_fields(0x1) == dict(throttled=False, throttle_reasons="")          # idle
    assert throttle_fields(0x1 | 0x4) == dict(throttled=True, throttle_reasons="sw_power_cap")
    assert throttle_fields(0x40 | 0x8)["throttle_reasons"] == "hw_slowdown;hw_thermal"


def test_old_schema_parts_are_read_with_the_added_columns(tmp_path):
    from costlearn.collect.dataset import ADDED_COLUMNS, load
    from conftest import dataset_row as _row
    old = pd.DataFrame([_row()]).drop(columns=list(ADDED_COLUMNS))
    old.to_parquet(tmp_path / "part-old.parquet", index=False)
    df, rep = load(tmp_path)
    assert not rep.corrupt and len(df) == 1 and math.isnan(df["repeat_time_us"][0]) and not df["throttled"][0]
