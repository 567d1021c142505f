import re

import pytest

from costlearn.core.device import PRESETS, DeviceSpec, device_slug, preset
from costlearn.families import get_family
from costlearn.families.gemm import GemmConfig as TileConfig
from costlearn.core.problem import Problem
from costlearn.collect.space import check_config, enumerate_space, rules_of
import numpy as np
import pandas as pd

GEMM = get_family("gemm")
smem_bytes = GEMM.smem_bytes


def test_config_id_round_trips_for_every_config():
    for c in GEMM.all_configs()[::97]:
        assert TileConfig.from_id(c.config_id) == c


@pytest.mark.parametrize("bad, exc, says", [
    (dict(block_m=0), ValueError, "block_m=0"), (dict(block_m=True), TypeError, "block_m=True"),
    (dict(block_k=8.0), TypeError, "block_k=8.0"), (dict(block_m=2**40), ValueError, "4096"),
    (dict(loop_order="zigzag"), ValueError, "zigzag"), (dict(raster="hilbert"), ValueError, "hilbert"),
    (dict(smem_pad=-1), ValueError, "smem_pad=-1"), (dict(thread_m=3), ValueError, "3x4 must divide")])
def test_bad_tile_config_is_a_clear_error(bad, exc, says):
    kw = dict(block_m=64, block_n=64, block_k=16, thread_m=4, thread_n=4)
    kw.update(bad)
    with pytest.raises(exc, match=says):
        TileConfig(**kw)


def test_numpy_ints_make_the_same_tile_config():
    import numpy as np
    assert TileConfig(np.int64(64), np.int32(64), 16, 4, 4) == TileConfig(64, 64, 16, 4, 4)
    assert type(TileConfig(np.int64(64), 64, 16, 4, 4).block_m) is int


@pytest.mark.parametrize("cid", ["m064n64k16_t4x4_outer_p1_row", "m\uff11n64k16_t1x4_outer_p1_row",
                                 "m64n64k16_t4x4_outer_p01_row"])
def test_config_ids_with_leading_zeros_or_non_ascii_digits_are_refused(cid):
    with pytest.raises(ValueError, match="malformed"):
        TileConfig.from_id(cid.encode().decode("unicode_escape"))


def test_every_shape_has_a_feasible_tile_on_h200():
    """Regression: (1, 16, 1024) once had no feasible tile (BN cap 16 < one warp of threads)."""
    for shape in [(1, 16, 1024), (1, 1, 1), (2, 2, 2), (3, 1, 9)]:
        assert enumerate_space(preset("h200"), problem=Problem(*shape)).configs, shape


def test_wrong_argument_types_are_type_errors():
    with pytest.raises(TypeError, match="DeviceSpec"):
        enumerate_space("h200")
    with pytest.raises(ValueError, match="fp16"):
        smem_bytes(TileConfig(8, 8, 8, 1, 1), "fp16")
    with pytest.raises(TypeError, match="Problem"):
        enumerate_space(preset("h200"), problem=(1, 2, 3))


@pytest.mark.parametrize("field, value", [("register_alloc_unit", 0), ("name", None), ("peak_gflops", "fast"),
                                          ("memory_bandwidth_gbps", float("inf")), ("registers_per_mp", 0),
                                          ("smem_per_block_optin_bytes", -1)])
def test_bad_device_spec_fields_are_refused(field, value):
    with pytest.raises((TypeError, ValueError), match=field):
        DeviceSpec(**{**preset("h200").to_dict(), field: value})


def test_device_spec_from_incomplete_dict_names_the_missing_fields():
    with pytest.raises(ValueError, match="lacks fields.*name"):
        DeviceSpec.from_dict({"api": "cuda"})


def test_malformed_config_id_names_the_value():
    with pytest.raises(ValueError, match="not-an-id"):
        TileConfig.from_id("not-an-id")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_space_counts_every_rejection(name):
    spec = preset(name)
    res = enumerate_space(spec)
    assert set(res.rejected) == set(rules_of(GEMM))
    assert len(res.configs) + sum(res.rejected.values()) == res.total
    assert len(res.configs) > 500
    for c in res.configs[::50]:
        assert c.threads % spec.warp_size == 0 and c.threads <= spec.max_threads_per_block
        assert smem_bytes(c) + spec.smem_reserved_per_block_bytes <= spec.smem_per_mp_bytes


def test_space_holds_batch1_tiles_for_h200():
    res = enumerate_space(preset("h200"), problem=Problem(1, 4096, 4096))
    assert res.configs, res.summary()
    assert all(c.block_m == 1 for c in res.configs)
    assert res.rejected["block_tile_exceeds_problem"] > 0


def test_smem_rule_uses_the_device_limit_not_a_constant():
    big = TileConfig(128, 256, 64, 8, 8)      # (128*64 + 64*256)*4 = 96 KiB
    assert smem_bytes(big) == 98304
    assert check_config(big, preset("h200")) is None          # 227 KiB opt-in
    small = DeviceSpec(**{**preset("h200").to_dict(), "smem_per_block_optin_bytes": 64 * 1024,
                          "smem_per_mp_bytes": 64 * 1024})
    assert check_config(big, small) == "smem_above_max"


def test_register_rule_skipped_without_a_register_file():
    spec = DeviceSpec(**{**preset("h200").to_dict(), "registers_per_mp": None,
                         "max_registers_per_thread": None, "api": "opencl"})
    c = TileConfig(128, 128, 8, 8, 8)
    assert check_config(c, spec) is None


@pytest.mark.parametrize("args, exc", [((0, 1, 1), ValueError), ((-3, 1, 1), ValueError),
                                       ((1.5, 1, 1), TypeError), ((True, 1, 1), TypeError),
                                       (("8", 1, 1), TypeError), ((2**31, 1, 1), ValueError)])
def test_problem_rejects_bad_extents(args, exc):
    with pytest.raises(exc, match="M="):
        Problem(*args)


def test_an_extent_too_long_to_print_is_refused_in_words_not_by_its_own_message():
    with pytest.raises(ValueError, match=r"M=an int too long to print; must be < 2\*\*31"):
        Problem(10**5000, 1, 1)
    with pytest.raises(ValueError, match=r"N=1{57}\.\.\.; must be < 2\*\*31"):
        Problem(1, int("1" * 400), 1)


def test_problem_rejects_unknown_dtype_and_layout_and_the_family_its_unsupported_ones():
    with pytest.raises(ValueError, match="fp8.*float32"):
        Problem(1, 1, 1, "fp8")
    with pytest.raises(ValueError, match="layout='XN'"):
        Problem(1, 1, 1, "float32", "XN")
    with pytest.raises(ValueError, match="gemm.*supports \\['float32'\\]"):
        GEMM.check_problem(Problem(1, 1, 1, "float16"))
    with pytest.raises(ValueError, match="supports \\['NN'\\]"):
        GEMM.check_problem(Problem(1, 1, 1, "float32", "NT"))


@pytest.mark.parametrize("bad", ["gelu", "BIAS", None, ["bias"], 3])
def test_problem_rejects_an_unknown_epilogue_naming_it_and_the_allowed(bad):
    """Regression: an unhashable epilogue (a list) raised a bare TypeError."""
    with pytest.raises(ValueError, match=f"epilogue={re.escape(repr(bad))}; allowed: \\['none', 'bias'"):
        Problem(1, 1, 1, epilogue=bad)


def test_a_family_that_fuses_no_epilogue_refuses_one_and_problems_print_theirs():
    from costlearn.families.base import KernelFamily
    assert GEMM.epilogues == ("none", "bias", "bias_relu", "bias_gelu") and KernelFamily.epilogues == ("none",)
    p = Problem(3, 4, 5, epilogue="bias_relu")
    assert str(p) == "3x4x5 float32 NN +bias_relu" and p.epilogue_flops == 3 * 4 * 2
    assert str(Problem(3, 4, 5)) == "3x4x5 float32 NN" and p != Problem(3, 4, 5)
    with pytest.raises(ValueError, match="epilogue='bias': the 'stand_in' family fuses \\['none'\\]"):
        type("StandIn", (GEMM.__class__,), {"name": "stand_in", "epilogues": ("none",)})().check_problem(
            Problem(1, 1, 1, epilogue="bias"))


def test_problem_turns_numpy_ints_into_python_ints():
    import numpy as np
    p = Problem(np.int64(4), np.uint16(5), np.int32(6))
    assert (p.m, p.n, p.k) == (4, 5, 6) and all(type(v) is int for v in p.shape) and p.flops == 240


def test_device_slug_maps_nvidia_names_to_presets():
    assert device_slug("NVIDIA H200") == "h200"
    assert device_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert device_slug("pthread-AMD EPYC", "opencl") == "ocl-pthread-amd-epyc"


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="h200"):
        preset("v100")


def test_device_spec_round_trips_through_dict():
    s = preset("a100")
    assert DeviceSpec.from_dict(s.to_dict()) == s


A = TileConfig(64, 64, 16, 4, 4)


def test_small_input_errors_are_clear():
    from costlearn.core.device import preset
    from costlearn.features.analytic import analytic_arrays
    from costlearn.learn.metrics import topk_regret
    with pytest.raises(TypeError, match="must be a costlearn.Problem"):
        enumerate_space(preset("h200"), problem=(1, 2))
    with pytest.raises(ValueError, match="non-empty"):
        topk_regret(np.array([]), np.array([]), 1)
    rows = pd.DataFrame([dict(m=8, n=8, k=8, dtype="bf16", layout="NN", family="gemm", config_id=A.config_id)])
    with pytest.raises(ValueError, match="bf16"):
        analytic_arrays(rows, preset("h200"))
