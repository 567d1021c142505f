"""Real measurements on the local OpenCL device (PoCL's CPU device on CI)."""

from conftest import needs_opencl

pytestmark = needs_opencl


def test_collect_on_pocl_writes_valid_rows_with_provenance_and_resumes(tmp_path):
    from costlearn.collect.backends import get_backend
    from costlearn.collect.loop import collect
    from costlearn.collect.dataset import load
    from costlearn.collect.protocol import Protocol
    from costlearn.families.gemm import GemmConfig as TileConfig
    be = get_backend("opencl")
    pool = [TileConfig(16, 16, 8, 2, 2), TileConfig(1, 64, 16, 1, 2, "dot"), TileConfig(32, 64, 8, 4, 4)]
    shapes = [(1, 200, 64), (48, 40, 33)]
    res = collect(be, tmp_path, shapes=shapes, pool=pool, configs_per_shape=3,
                  protocol=Protocol(rounds=3, min_sample_us=200.0), progress=False)
    df, rep = load(tmp_path)
    assert res.problems_done == 2 and len(df) == res.rows_written >= 3 and not rep.corrupt
    ok = df[df["status"] == "ok"]
    assert len(ok) == len(df), df[["config_id", "status", "error"]]
    assert (ok["time_us"] > 0).all() and (ok["time_us_p20"] <= ok["time_us"]).all()
    for col in ("device_name", "driver_version", "library_version", "template_hash", "costlearn_version"):
        assert df[col].str.len().gt(0).all(), col
    assert (df["api"] == "opencl").all() and (tmp_path / "device.json").is_file()
    again = collect(be, tmp_path, shapes=shapes, pool=pool, configs_per_shape=3, progress=False)
    assert again.rows_written == 0 and again.skipped == res.rows_written


def test_spec_is_queried_not_hard_coded():
    from costlearn.collect.backends import get_backend
    s = get_backend("opencl").spec
    assert s.api == "opencl" and s.multiprocessors >= 1 and s.memory_bandwidth_gbps > 0
    assert s.source.startswith("queried")


def test_same_config_timed_twice_at_16_cubed_agrees_within_the_measured_noise():
    from costlearn.collect.backends import get_backend
    from costlearn.collect.measure import measure_shape
    from costlearn.collect.protocol import Protocol
    from costlearn.families.gemm import GemmConfig as TileConfig
    be = get_backend("opencl")
    kern = be.compile(TileConfig(16, 16, 8, 2, 2))
    from costlearn.core.problem import Problem
    with be.workspace(Problem(16, 16, 16)) as ws:
        row = measure_shape(ws, [kern], Protocol(rounds=9), be.launch_overhead_us(), repeat_index=0)[0]
    assert row["launches_per_sample"] > 1          # the sample is many launches, not one
    t, rep = row["time_us"], row["repeat_time_us"]
    assert abs(t - rep) <= (row["time_us_p80"] - row["time_us_p20"]) + 0.1 * t, row


def test_input_distribution_is_recorded_per_row(tmp_path):
    from costlearn.collect.backends import get_backend
    from costlearn.collect.loop import collect
    from costlearn.collect.dataset import load
    from costlearn.collect.protocol import Protocol
    from costlearn.families.gemm import GemmConfig as TileConfig
    be = get_backend("opencl")
    collect(be, tmp_path, shapes=[(24, 24, 200)], pool=[TileConfig(8, 8, 8, 1, 1)],
            protocol=Protocol(rounds=2, distribution="sparse", density=0.05), progress=False)
    df, _ = load(tmp_path)
    assert (df["distribution"] == "sparse").all() and (df["density"] == 0.05).all()
    assert (df["status"] == "ok").all() and (df["rotation_sets"] > 1).all()


# -- epilogues --------------------------------------------------------------------------------------------------


def test_collect_measures_each_given_shape_with_every_epilogue_verified_and_resumes(tmp_path):
    """Given shapes are measured once per epilogue asked, each row verified
    against the float64 reference of A @ B + bias then the activation (a
    wrong kernel would be ``wrong_result``); a second call skips them all,
    and asking for one more epilogue measures only that one."""
    from costlearn.collect.backends import get_backend
    from costlearn.collect.loop import collect
    from costlearn.collect.dataset import load
    from costlearn.families.gemm import GemmConfig as TileConfig
    from costlearn.collect.protocol import Protocol
    be = get_backend("opencl")
    pool = [TileConfig(16, 16, 8, 2, 2), TileConfig(1, 64, 16, 1, 2, "dot")]
    shapes = [(1, 200, 64), (37, 45, 29)]
    proto = Protocol(rounds=3, max_rounds=3, min_sample_us=100.0)
    res = collect(be, tmp_path, shapes=shapes, pool=pool, protocol=proto, progress=False,
                  epilogues=("none", "bias_gelu"))
    df, _ = load(tmp_path)
    assert res.problems_done == 4 and (df["status"] == "ok").all(), df[["config_id", "epilogue", "status", "error"]]
    assert df.groupby(["m", "n", "k", "epilogue"]).ngroups == 4
    assert set(df["epilogue"]) == {"none", "bias_gelu"}
    again = collect(be, tmp_path, shapes=shapes, pool=pool, protocol=proto, progress=False,
                    epilogues=("none", "bias_gelu", "bias_relu"))
    assert again.skipped == res.rows_written and again.problems_done == 2
    df, _ = load(tmp_path)
    assert df.groupby("epilogue").size().to_dict() == {"bias_gelu": 3, "bias_relu": 3, "none": 3}


def test_a_kernel_compiled_for_another_epilogue_is_refused_not_measured():
    import pytest

    from costlearn.collect.backends import get_backend
    from costlearn.families.gemm import GemmConfig as TileConfig
    from costlearn.core.problem import Problem
    be = get_backend("opencl")
    kern = be.compile(TileConfig(16, 16, 8, 2, 2), "float32", "bias")
    assert kern.status == "ok" and kern.epilogue == "bias"
    with be.workspace(Problem(20, 30, 40, epilogue="bias_relu")) as ws:
        with pytest.raises(ValueError, match="compiled for epilogue='bias'.*epilogue is 'bias_relu'"):
            ws.verify(kern)
    with be.workspace(Problem(20, 30, 40, epilogue="bias")) as ws:
        ok, err = ws.verify(kern)
        assert ok and err < 1e-3
    with pytest.raises(ValueError, match="epilogue='silu'"):
        be.compile(TileConfig(16, 16, 8, 2, 2), "float32", "silu")


def test_a_kernel_that_drops_the_activation_is_a_wrong_result():
    """The reference includes the activation: the bias-only kernel run on a
    bias_relu problem's inputs disagrees where A @ B + bias < 0."""
    import numpy as np

    from costlearn.collect.backends import get_backend
    from costlearn.families.gemm import GemmConfig as TileConfig
    from costlearn.core.problem import Problem
    be = get_backend("opencl")
    kern = be.compile(TileConfig(16, 16, 8, 2, 2), "float32", "bias")
    with be.workspace(Problem(20, 30, 40, epilogue="bias_relu")) as ws:
        kern.epilogue = "bias_relu"               # a mislabelled kernel: the check above cannot see it
        ok, err = ws.verify(kern)
    assert not ok and np.isfinite(err) and err > 0.1
