"""The KernelFamily seam: one contract test run over every registered family,
so a new family is tested for free; and a stand-in family, defined here and
registered with one line, run through the same contract and through import,
training and prediction: what a newcomer's third family has to provide."""
from __future__ import annotations

import dataclasses
import itertools
import json
import re

import numpy as np
import pandas as pd
import pytest

from costlearn.collect.backends import BACKENDS
from costlearn.core.device import PRESETS, preset
from costlearn.core.dtypes import DTYPES
from costlearn.families import (DESCRIPTION_FIELDS, FAMILIES, VENDOR_CONFIG_ID, KernelFamily, TileDescription,
                                family_of, get_family)
from costlearn.features import FEATURE_SETS, get_feature_set
from costlearn.core.problem import LAYOUTS, Problem
from costlearn.collect.sampler import select_pool
from costlearn.collect.space import enumerate_space, rules_of


# -- a stand-in family: the smallest KernelFamily, the template of a new one ----

@dataclasses.dataclass(frozen=True, order=True)
class StandInConfig:
    """A block tile and a warp count; id ``"m64n32k16_w2"``."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4

    family = "stand_in_mm"

    @property
    def config_id(self) -> str:
        return f"m{self.block_m}n{self.block_n}k{self.block_k}_w{self.num_warps}"

    @classmethod
    def from_id(cls, config_id: str):
        m = re.fullmatch(r"m(\d+)n(\d+)k(\d+)_w(\d+)", str(config_id))
        if not m:
            raise ValueError(f"malformed stand_in_mm config_id {config_id!r}; expected e.g. 'm64n32k16_w2'")
        return cls(*(int(g) for g in m.groups()))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class StandInFamily(KernelFamily):
    """Measured by no backend here (its rows are imported); no vendor call."""

    name = "stand_in_mm"
    config_type = StandInConfig
    dtypes = ("float16",)
    layouts = ("NN",)
    rules = ("threads_above_max", "smem_above_max")
    values = {"block_m": (16, 32, 64, 128), "block_n": (16, 32, 64, 128), "block_k": (16, 32),
              "num_warps": (1, 2, 4)}
    param_feature_names = ("log2_block_m", "log2_block_n", "log2_block_k", "log2_num_warps")
    template_hash = "standin00001"

    def all_configs(self) -> list:
        return [StandInConfig(*v) for v in itertools.product(*self.values.values())]

    def config_from_id(self, config_id: str):
        return StandInConfig.from_id(config_id)

    def check_device(self, config, spec, dtype: str):
        if 32 * config.num_warps > spec.max_threads_per_block:
            return "threads_above_max"
        if self.describe(config, dtype).smem_bytes > spec.smem_per_block_optin_bytes:
            return "smem_above_max"
        return None

    def describe(self, config, dtype: str, registers_per_thread=None) -> TileDescription:
        threads = 32 * config.num_warps
        acc = max(1, config.block_m * config.block_n // threads)
        tm = 1 << (acc.bit_length() // 2)
        regs = registers_per_thread if registers_per_thread is not None and np.isfinite(registers_per_thread) \
            else float(acc + 32)
        eb = DTYPES[dtype].element_bytes
        return TileDescription(config.block_m, config.block_n, config.block_k, threads, tm, acc // tm, 2, eb,
                               (config.block_m + config.block_n) * config.block_k * eb, float(regs), 1, 1, 1,
                               (tm + acc // tm) / acc)

    def param_features(self, configs) -> dict:
        cs = list(configs)
        return {f"log2_{f}": np.log2([getattr(c, f) for c in cs]).astype(np.float64)
                for f in ("block_m", "block_n", "block_k", "num_warps")}

    def min_tile_caps(self, spec):
        return 16, 16, 16


@pytest.fixture(scope="module", autouse=True)
def stand_in_registered():
    """The one registry line a new family needs (here from outside the package)."""
    FAMILIES.register("stand_in_mm", StandInFamily)
    yield
    FAMILIES.unregister("stand_in_mm")


FAMILY_NAMES = (*FAMILIES.names(), "stand_in_mm")


@pytest.fixture(params=FAMILY_NAMES)
def family(request):
    return get_family(request.param)


def test_what_other_modules_ask_a_family_is_declared_and_implemented(family):
    """backends name registered backends whose hook the family implements;
    the vendor id is the shared one; what other tools call its configs is not
    the family's (costlearn.interop.tool_names)."""
    for b in family.backends:
        assert b in BACKENDS, (family.name, b)
        hook = {"cuda": "render", "opencl": "render", "triton": "torch_launcher"}[b]
        assert getattr(type(family), hook) is not getattr(KernelFamily, hook), (family.name, b, hook)
    assert family.vendor_config_id in (None, VENDOR_CONFIG_ID)
    ids = {c.config_id for c in family.all_configs()}
    assert (VENDOR_CONFIG_ID in ids) == (family.vendor_config_id is not None)
    assert not hasattr(family, "from_tool") and not hasattr(family, "to_tool")
    tool = family.registers_tool(preset("h200"))
    assert tool is None or type(family).compiled_registers is not KernelFamily.compiled_registers
    overhead = family.overhead_config()
    assert overhead.config_id in ids and overhead.config_id != VENDOR_CONFIG_ID


def test_config_ids_round_trip(family):
    configs = family.all_configs()
    assert configs and len({c.config_id for c in configs}) == len(configs)
    for c in configs[:: max(1, len(configs) // 200)]:
        assert family.config_from_id(c.config_id) == c
        assert family_of(c) is family and type(c).family == family.name
        assert isinstance(c.to_dict(), dict)
    with pytest.raises(ValueError, match="malformed"):
        family.config_from_id("not-a-config")


@pytest.mark.parametrize("device", sorted(PRESETS))
def test_feasibility_counts_add_up(family, device):
    spec = preset(device)
    for problem in (None, Problem(1, 4096, 4096, family.dtypes[0], family.layouts[0]),
                    Problem(3, 5, 7, family.dtypes[0], family.layouts[0])):
        res = enumerate_space(spec, family=family.name, dtype=family.dtypes[0], problem=problem)
        assert set(res.rejected) == set(rules_of(family))
        assert len(res.configs) + sum(res.rejected.values()) == res.total == len(family.all_configs())
        assert res.configs, (device, problem)


def test_tile_description_has_every_field_with_sane_values(family):
    spec = preset("h200")
    configs = enumerate_space(spec, family=family.name, dtype=family.dtypes[0]).configs
    for dtype in family.dtypes:
        for c in configs[:: max(1, len(configs) // 100)]:
            d = family.describe(c, dtype)
            assert isinstance(d, TileDescription) and tuple(d.__dataclass_fields__) == DESCRIPTION_FIELDS
            assert min(d.block_m, d.block_n, d.block_k, d.threads, d.thread_m, d.thread_n, d.pipeline_stages) >= 1
            assert d.thread_m * d.thread_n * d.threads == d.block_m * d.block_n
            assert d.element_bytes == DTYPES[dtype].element_bytes and d.smem_bytes > 0
            assert d.registers_per_thread > 0 and min(d.bank_conflict_a_read, d.bank_conflict_b_read) >= 1
            assert family.block_tile(c) == (d.block_m, d.block_n, d.block_k)
            assert family.describe(c, dtype, 99.0).registers_per_thread == 99.0


@pytest.mark.parametrize("feature_set", FEATURE_SETS.names())
def test_features_have_no_nan_for_every_family(family, feature_set):
    spec = preset("h200")
    configs = list(enumerate_space(spec, family=family.name, dtype=family.dtypes[0]).configs[::25])
    fs = get_feature_set(feature_set)
    for m, n, k in [(1, 1, 1), (1, 4096, 4096), (8191, 17, 65535)]:
        rows = pd.DataFrame(dict(m=m, n=n, k=k, dtype=family.dtypes[0], layout=family.layouts[0], family=family.name,
                                 config_id=[c.config_id for c in configs]))
        X = fs.transform(rows, spec)
        assert list(X.columns) == list(fs.feature_names(family)) and np.isfinite(X.to_numpy()).all()


def test_param_features_are_numbers_for_every_config(family):
    configs = family.all_configs()[:50]
    got = family.param_features(configs)
    assert tuple(got) == tuple(family.param_feature_names)
    assert all(v.shape == (len(configs),) and np.isfinite(v).all() for v in got.values())


def test_unsupported_dtypes_and_layouts_are_refused(family):
    for dtype in set(DTYPES) - set(family.dtypes):
        with pytest.raises(ValueError, match=f"supports {list(family.dtypes)}".replace("[", "\\[").replace("]", "\\]")):
            family.check_problem(Problem(4, 4, 4, dtype))
        with pytest.raises(ValueError, match=f"dtype={dtype!r}"):
            family.check_dtype(dtype)
    for layout in set(LAYOUTS) - set(family.layouts):
        with pytest.raises(ValueError, match="layout"):
            family.check_problem(Problem(4, 4, 4, family.dtypes[0], layout))
        with pytest.raises(ValueError, match=f"layout={layout!r}"):
            family.check_dtype(family.dtypes[0], layout)
    for dtype in family.dtypes:
        family.check_dtype(dtype, family.layouts[0])          # supported: no error


def test_pool_is_stratified_by_the_descriptions_block_height(family):
    space = enumerate_space(preset("h200"), family=family.name, dtype=family.dtypes[0]).configs
    pool = select_pool(space, 64, np.random.default_rng(0))
    heights = {family.block_tile(c)[0] for c in pool}
    assert len(pool) == 64 and heights == {family.block_tile(c)[0] for c in space}


def test_unknown_family_lists_the_known_ones():
    with pytest.raises(ValueError, match="gemm"):
        get_family("conv2d")
    with pytest.raises(TypeError, match="config of a kernel family"):
        family_of((64, 64, 16))


def test_device_peaks_per_dtype_come_from_the_preset():
    h200 = preset("h200")
    assert h200.peak_gflops_for("float32") == 67_000.0 and h200.peak_gflops_for("bfloat16") == 989_400.0
    assert h200.peak_gflops_for("tfloat32") == 494_700.0 and preset("a100").peak_gflops_for("float16") == 312_000.0
    import dataclasses
    cpu = dataclasses.replace(h200, peak_gflops_bf16=None)
    with pytest.raises(ValueError, match="no bfloat16 peak"):
        cpu.peak_gflops_for("bfloat16")
    with pytest.raises(ValueError, match="peak_gflops_fp16"):
        dataclasses.replace(h200, peak_gflops_fp16=-1.0)


# -- the triton_mm family ------------------------------------------------------

def test_triton_mm_rules_reject_what_the_device_cannot_run():
    from costlearn.families.triton_mm import VENDOR, TritonMMConfig
    fam, a100 = get_family("triton_mm"), preset("a100")
    # (64*64 + 64*256) * 2 bytes * (5 - 1) buffers = 160 KiB + 1 KiB reserved: fits 163 KiB; 6 stages do not
    assert fam.check_device(TritonMMConfig(64, 256, 64, 8, 5), a100, "float16") is None
    assert fam.check_device(TritonMMConfig(64, 256, 64, 8, 6), a100, "float16") == "smem_above_max"
    assert fam.check_device(TritonMMConfig(64, 256, 64, 8, 5), a100, "float32") == "smem_above_max"  # 4-byte
    # regression: Inductor ran 128x64x128 with 4 stages in float16 on the A100 (3 buffers, 144 KiB), and
    # none of its float32 runs of it (216 KiB)
    assert fam.check_device(TritonMMConfig(128, 64, 128, 8, 4), a100, "float16") is None
    assert fam.check_device(TritonMMConfig(128, 64, 128, 8, 4), a100, "float32") == "smem_above_max"
    # 16x16 with 8 warps: 256 outputs for 8 m16n8 tiles (1024); only tensor-core dtypes care
    assert fam.check_device(TritonMMConfig(16, 16, 16, 8, 1), a100, "bfloat16") == "warp_tile_below_mma"
    assert fam.check_device(TritonMMConfig(16, 16, 16, 8, 1), a100, "float32") is None
    assert fam.check_device(TritonMMConfig(256, 256, 16, 1, 1), a100, "float32") == "registers_above_max"
    small = PRESETS["a100"].__class__(**{**PRESETS["a100"].to_dict(), "max_threads_per_block": 256})
    assert fam.check_device(TritonMMConfig(64, 64, 32, 16, 2), small, "float16") == "threads_above_max"
    assert fam.check_device(VENDOR, a100, "float16") is None
    assert fam.block_tile(VENDOR) == fam.min_tile_caps(a100)          # the problem rule never removes the vendor


def test_triton_mm_config_ids_are_readable_and_refuse_bad_values():
    from costlearn.families.triton_mm import VENDOR, TritonMMConfig
    fam = get_family("triton_mm")
    c = TritonMMConfig(64, 128, 32, 4, 3)
    assert c.config_id == "m64n128k32_w4_s3_g8" and fam.config_from_id(c.config_id) == c
    assert fam.config_from_id("vendor") is VENDOR and family_of(VENDOR) is fam
    for bad, match in [(dict(block_m=48), "power of two"), (dict(block_k=8), r"\[16, 4096\]"),
                       (dict(num_warps=3), "power of two"), (dict(num_stages=0), "num_stages")]:
        with pytest.raises(ValueError, match=match):
            TritonMMConfig(**{**c.to_dict(), **bad})
    with pytest.raises(ValueError, match="malformed triton_mm config_id"):
        fam.config_from_id("m64n64k16_t4x4_outer_p1_row")
    with pytest.raises(TypeError, match="must be a TritonMMConfig or VendorCall"):
        family_of(type("Fake", (), {"family": "triton_mm"})())


def test_triton_mm_covers_inductors_configs_and_its_pipeline_stages():
    from costlearn.families.triton_mm import TritonMMConfig
    fam = get_family("triton_mm")
    space = {c.config_id for c in enumerate_space(preset("a100"), family="triton_mm", dtype="float16").configs}
    # a few of Inductor's A100 mm configs (BLOCK-M, BLOCK-N, BLOCK-K, warps, stages), from the imported logs
    for cfg in [(16, 32, 16, 2, 3), (64, 64, 32, 8, 4), (128, 128, 32, 4, 3), (32, 16, 128, 2, 2),
                (128, 64, 128, 8, 4), (16, 128, 64, 8, 5)]:
        assert TritonMMConfig(*cfg).config_id in space, cfg
    d = fam.describe(TritonMMConfig(64, 128, 32, 4, 3), "bfloat16")
    assert (d.threads, d.pipeline_stages, d.smem_bytes, d.thread_m * d.thread_n * d.threads) == \
        (128, 3, (64 * 32 + 32 * 128) * 2 * 2, 64 * 128)


def test_a_new_family_registered_with_one_line_is_imported_trained_and_answered(tmp_path):
    """The newcomer's path for a third family: the stand-in family above (one
    class, registered with one line) gets rows from another tool's files (a
    Kernel Tuner cache per shape, through a mapping), trains, and
    ``predict_best`` / ``predict_many`` answer with its configs. The times are
    a mock (a formula: 16x16 tiles and 1 warp are slow, 64x64x32 with 4 warps
    is best), enough to pin down that the pipeline never asks for anything a
    family does not declare."""
    import costlearn
    from costlearn.interop import import_file
    from costlearn.interop.kernel_tuner import cache_key
    from costlearn.model.xgb import XGBParams
    from costlearn.learn.train import train

    fam = get_family("stand_in_mm")
    space = enumerate_space(preset("a100"), family="stand_in_mm", dtype="float16").configs
    keys = ["BM", "BN", "BK", "WARPS"]
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"family": "stand_in_mm", "dtype": "float16", "layout": "NN",
                                   "params": dict(zip(keys, ("block_m", "block_n", "block_k", "num_warps"))),
                                   "problem_size": ["m", "n", "k"]}))

    def mock_ms(c, m, n, k):              # a formula standing in for a device, not a measurement
        miss = abs(np.log2(c.block_m / 64)) + abs(np.log2(c.block_n / 64)) + abs(np.log2(c.block_k / 32))
        return (2 * m * n * k / 5e12 * 1e3 + 0.005) * (1 + 0.2 * miss + 0.1 * abs(np.log2(c.num_warps / 4)))

    shapes = [(256 * i, 128 * j, 512 * (1 + (i + j) % 3)) for i in (1, 2, 4, 8) for j in (1, 3, 6)]
    for m, n, k in shapes:
        values = [(c.block_m, c.block_n, c.block_k, c.num_warps) for c in space]
        cache = {"device_name": "NVIDIA A100-SXM4-80GB", "kernel_name": "stand_in", "problem_size": [m, n, k],
                 "tune_params_keys": keys, "objective": ["time"],
                 "tune_params": {kk: sorted({v[i] for v in values}) for i, kk in enumerate(keys)},
                 "cache": {cache_key(v): dict(zip(keys, v), time=mock_ms(c, m, n, k), times=[mock_ms(c, m, n, k)] * 3,
                                              compile_time=1.0, verification_time=0, benchmark_time=1.0,
                                              timestamp="2026-01-01 12:00:00.000000+00:00")
                           for v, c in zip(values, space)}}
        path = tmp_path / f"cache_{m}_{n}_{k}.json"
        path.write_text(json.dumps(cache))
        import_file("kernel-tuner", path, device="a100", data_root=tmp_path / "data", mapping=mapping)
    train(tmp_path / "data" / "a100", tmp_path / "models", family="stand_in_mm", dtype="float16", holdout=False,
          settings=dict(params=XGBParams(n_estimators=40, learning_rate=0.3, max_depth=4, early_stopping_rounds=20)))

    pred = costlearn.predict_best(1024, 384, 1024, "float16", "a100", family="stand_in_mm",
                                  models_dir=tmp_path / "models")
    assert isinstance(pred.config, StandInConfig) and family_of(pred.config) is fam
    assert (pred.config.block_m, pred.config.block_n) == (64, 64)           # the mock's best block tile
    many = costlearn.predict_many([(1024, 384, 1024), (512, 128, 512)], "float16", "a100", family="stand_in_mm",
                                  models_dir=tmp_path / "models")
    assert many[0].config == pred.config and all(isinstance(p.config, StandInConfig) for p in many)


def test_triton_mm_shrunk_variants_follow_inductors_rule_for_small_problems():
    """Inductor shrinks each block extent to max(next_pow2(extent), 16) and its warps to one per 16x16 output
    tile (``filtered_configs``); the A100 timm log holds m128n32k32_w4_s3_g8 for N <= 32, from
    m128n128k32_w4_s3_g8, and m16n16k32_w1_s3_g8 for M, N <= 16."""
    from costlearn.families.triton_mm import TritonMMConfig
    fam = get_family("triton_mm")
    got = dict((c.config_id, caps) for c, caps in fam.shrunk_variants(TritonMMConfig(128, 128, 32, 4, 3)))
    assert got["m128n32k32_w4_s3_g8"] == (None, 32, None)
    assert got["m16n16k32_w1_s3_g8"] == (16, 16, None)
    assert got["m32n64k16_w4_s3_g8"] == (32, 64, 16)
    assert "m128n128k32_w4_s3_g8" not in got and len(got) == 4 * 4 * 2 - 1
    assert fam.shrunk_variants(TritonMMConfig(16, 16, 16, 1, 1)) == []
    assert fam.shrunk_variants(fam.config_from_id("vendor")) == []
    assert get_family("gemm").shrunk_variants(get_family("gemm").all_configs()[-1]) == []
