import numpy as np
import pandas as pd
import pytest

from costlearn.core.device import preset
from costlearn.families import FAMILIES, bank_conflict_degree, get_family
from costlearn.families.gemm import GemmConfig as TileConfig
from costlearn.features import FEATURE_SETS, SHAPE_FEATURES, feature_version, get_feature_set
from costlearn.features.analytic import analytic_arrays, occupancy, shape_arrays
from costlearn.features.base import EPILOGUE_FEATURES
from costlearn.collect.space import enumerate_space


def _rows(shape, configs, regs=np.nan):
    m, n, k = shape
    return pd.DataFrame([dict(m=m, n=n, k=k, dtype="float32", layout="NN", family="gemm", config_id=c.config_id,
                              registers_per_thread=regs) for c in configs])


def test_golden_h200_square_gemm():
    """4096^3 with a 128x128x16 block tile, 8x8 thread tile, 128 registers, on H200:
    - threads = 16*16 = 256; smem = (128*16 + 16*128)*4 = 16384 B
    - blocks/SM: threads 2048/256 = 8; smem 233472/(16384+1024) = 13;
      registers: ceil(128*32/256)*256 = 4096 per warp * 8 warps = 32768 -> 65536/32768 = 2;
      slots 32  => 2, limited by registers; occupancy = 2*256/2048 = 0.25
    - blocks = 32*32 = 1024; waves = 1024/(2*132) = 3.8788; the last (4th) wave is 0.8788 full;
      average slot use over the 4 waves = 3.8788/4 = 0.9697
    - AI(block tile) = 2*128*128*16 / (4*(128*16+16*128)) = 32 flop/B
    - k_steps = 256; padding waste 0
    """
    f = analytic_arrays(_rows((4096, 4096, 4096), [TileConfig(128, 128, 16, 8, 8)], regs=128.0), preset("h200"))
    assert f["smem_bytes"][0] == 16384
    assert f["blocks_per_mp"][0] == 2 and f["limiter_registers"][0] == 1
    assert f["occupancy_frac"][0] == pytest.approx(0.25)
    assert f["waves"][0] == pytest.approx(1024 / 264)
    assert f["last_wave_fill"][0] == pytest.approx(1024 / 264 - 3)
    assert f["device_util_frac"][0] == pytest.approx(1024 / 264 / 4)
    assert f["ai_block_tile_flop_per_byte"][0] == pytest.approx(32.0)
    assert f["k_steps"][0] == 256 and f["padding_waste_frac"][0] == 0.0
    # compute: 2*4096^3 / 67e12 flop/s = 2051.4 us; compulsory bytes 3*4096^2*4 / 4.8e12 = 41.9 us
    assert 2 ** f["log2_compute_time_us"][0] == pytest.approx(2 * 4096**3 / 67e6, rel=1e-9)
    assert 2 ** f["log2_memory_time_us"][0] == pytest.approx(3 * 4096**2 * 4 / 4.8e6, rel=1e-9)
    assert f["roofline_compute_bound"][0] == 1


def test_golden_batch1_overhang_and_tail():
    """M=1, N=1000, K=100 with BM=1, BN=64, KS=32, TM=1, TN=2 on A100:
    - grid 1 x ceil(1000/64)=16 blocks; threads 32; KS steps ceil(100/32)=4
    - padded volume 1*1024*128 vs useful 1*1000*100 -> waste = 1 - 100000/131072
    - blocks/SM: threads 2048/32 = 64; smem (1*32 + 32*64)*4 = 8320 B + 1024 reserved
      -> 167936 // 9344 = 17; registers (estimate 1*2+1+2+32 = 37 -> ceil(37*32/256)*256
      = 1280 per warp) -> 65536 // 1280 = 51; slots 32
      => 17, limited by shared memory; waves = 16/(17*108)
    """
    f = analytic_arrays(_rows((1, 1000, 100), [TileConfig(1, 64, 32, 1, 2)]), preset("a100"))
    assert f["log2_blocks"][0] == 4.0
    assert f["padding_waste_frac"][0] == pytest.approx(1 - 100000 / 131072)
    assert f["blocks_per_mp"][0] == 17 and f["limiter_smem"][0] == 1
    assert f["waves"][0] == pytest.approx(16 / (17 * 108))
    assert f["k_steps"][0] == 4 and f["pipeline_fill_share"][0] == pytest.approx(0.25)


def test_bank_conflict_degree_and_padding():
    # 32 threads reading a column of a [.][32] array: all in bank 0 -> 32-way
    assert bank_conflict_degree(np.arange(32) * 32) == 32
    assert bank_conflict_degree(np.arange(32) * 33) == 1       # padded by one word
    assert bank_conflict_degree(np.zeros(32, int)) == 1         # broadcast
    # thread tile rows 4 apart, KS=16 -> stride 64 words between thread rows
    no_pad = analytic_arrays(_rows((64, 64, 64), [TileConfig(64, 64, 16, 4, 4, smem_pad=0)]), preset("h200"))
    pad = analytic_arrays(_rows((64, 64, 64), [TileConfig(64, 64, 16, 4, 4, smem_pad=1)]), preset("h200"))
    assert no_pad["bank_conflict_a_read"][0] == 2 and pad["bank_conflict_a_read"][0] == 1


def test_occupancy_limiter_threads():
    bpm, lim = occupancy(np.array([1024]), np.array([1024]), np.array([32.0]), preset("h200"))
    assert bpm[0] == 2 and lim[0] == 0


@pytest.mark.parametrize("family", FAMILIES.names())
@pytest.mark.parametrize("name", FEATURE_SETS.names())
def test_every_config_gets_the_same_columns_without_nan(name, family):
    spec = preset("h200")
    configs = list(enumerate_space(spec, family=family).configs[::40])
    fs = get_feature_set(name)
    for shape in [(1, 1, 1), (1, 4096, 4096), (8192, 8192, 8192), (129, 31, 7), (2**31 - 1, 3, 2**30)]:
        rows = _rows(shape, configs).assign(family=family)
        X = fs.transform(rows, spec)
        assert list(X.columns) == list(fs.feature_names(get_family(family)))
        assert X.dtypes.eq(np.float64).all()
        assert np.isfinite(X.to_numpy()).all()


def test_unknown_feature_set_lists_known():
    with pytest.raises(ValueError, match="analytic"):
        get_feature_set("fancy")
    gemm = get_family("gemm")
    assert feature_version("analytic", gemm) != feature_version("raw", gemm)


def test_gemm_analytic_columns_are_the_ones_the_committed_model_was_trained_on():
    """The restructure kept the gemm feature list (and so the committed booster) unchanged."""
    names = get_feature_set("analytic").feature_names(get_family("gemm"))
    assert names[:12] == ("log2_m", "log2_n", "log2_k", "log2_flops", "log2_block_m", "log2_block_n", "log2_block_k",
                          "log2_thread_m", "log2_thread_n", "loop_outer", "raster_row", "smem_pad")
    assert len(names) == 45 and set(SHAPE_FEATURES) <= set(names) and names[-5:] == EPILOGUE_FEATURES
    assert feature_version("analytic", get_family("gemm")) == "2-dc811999"   # the committed model's (epilogues added)


def test_shape_features_come_in_the_order_the_c_code_writes_them():
    table_cfg = dict(block=np.array([[4], [8], [16]]), element_bytes=4.0, slots=np.array([32]),
                     tile_occ=np.array([1.0]), fill_loads=np.array([1.0]))
    assert tuple(shape_arrays(np.int64(5), np.int64(6), np.int64(7), table_cfg, preset("h200"))) == SHAPE_FEATURES


def test_rows_of_two_families_are_refused():
    rows = _rows((8, 8, 8), [TileConfig(8, 8, 8, 1, 1)] * 2)
    rows.loc[1, "family"] = "other"
    with pytest.raises(ValueError, match="several kernel families"):
        get_feature_set("analytic").transform(rows, preset("h200"))


def test_h200_feature_table_uses_nvcc_registers(tmp_path):
    import shutil
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    from costlearn.families.gemm.registers import nvcc_registers
    cfgs = [TileConfig(64, 64, 16, 4, 4), TileConfig(128, 128, 16, 8, 8)]
    regs = nvcc_registers(cfgs, "sm_90")
    assert set(regs) == {c.config_id for c in cfgs}
    assert 0 < regs[cfgs[0].config_id] < regs[cfgs[1].config_id] <= 255   # 16 vs 64 accumulators
    rows = _rows((4096, 4096, 4096), cfgs).assign(registers_per_thread=[float(regs[c.config_id]) for c in cfgs])
    f = analytic_arrays(rows, preset("h200"))
    assert list(f["registers_per_thread"]) == [regs[c.config_id] for c in cfgs]


def test_features_command_without_nvcc(tmp_path, capsys):
    from costlearn.cli import main
    out = tmp_path / "f.csv"
    assert main(["features", "--preset", "h200", "--shape", "1,4096,4096", "--pool", "8", "--no-nvcc",
                 "--csv", str(out)]) == 0
    table = pd.read_csv(out)
    assert len(table) == 8 and "occupancy_frac" in table.columns and table.notna().all().all()


def test_features_command_prints_a_readable_table_and_says_it_compiles(capsys, monkeypatch):
    """Regression (found by a new user): `features --preset h200 --shape 4096x4096x4096` printed lines of ~900
    characters and spent 39 s in nvcc without a word."""
    from costlearn.cli import main
    import costlearn.families.gemm as gemm          # the family calls nvcc through the name it imported
    monkeypatch.setattr(gemm, "nvcc_registers", lambda pool, arch: {c.config_id: 64 for c in pool})
    assert main(["features", "--preset", "h200", "--shape", "4096x4096x4096", "--pool", "8", "--rows", "6"]) == 0
    cap = capsys.readouterr()
    assert "compiling the 8 candidate kernels with nvcc -arch=sm_90 -Xptxas -v" in cap.err
    lines = cap.out.splitlines()
    assert max(map(len, lines)) <= 160 and any(line.startswith("occupancy_frac") for line in lines)
    assert "(the first 6 of 8 configs" in cap.out


def test_layout_columns_exist_only_for_families_of_several_layouts_and_follow_the_letters():
    import pandas as pd
    from costlearn.core.device import preset
    from costlearn.families import get_family
    from costlearn.features import get_feature_set
    from costlearn.features.base import LAYOUT_FEATURES
    for fs in ("analytic", "raw", "derived"):
        assert not set(LAYOUT_FEATURES) & set(get_feature_set(fs).feature_names(get_family("gemm")))
        assert set(LAYOUT_FEATURES) <= set(get_feature_set(fs).feature_names(get_family("triton_mm")))
    rows = pd.DataFrame(dict(m=512, n=256, k=128, dtype="float16", family="triton_mm",
                             config_id=["m64n64k32_w4_s3_g8"] * 4 + ["vendor"], layout=["NN", "NT", "TN", "TT", "TN"]))
    X = get_feature_set("analytic").transform(rows, preset("a100"))
    assert X["a_column_major"].tolist() == [0, 0, 1, 1, 1] and X["b_column_major"].tolist() == [0, 1, 0, 1, 0]
    other = X.drop(columns=list(LAYOUT_FEATURES))
    assert (other.iloc[:4].nunique() == 1).all()                  # nothing else depends on the layout


def test_golden_epilogue_features_and_none_adds_nothing():
    """M=100, N=1000, K=30 with a 16x64x8 block tile, float32 (s = 4), on A100:
    - bias_gelu: f = 10 flops per element; per tile 16*64*10 = 10240 flops,
      the bias slice 64*4 = 256 bytes; flop share 10/(2*30 + 10) = 1/7
    - blocks = ceil(100/16)=7 x ceil(1000/64)=16 = 112 -> bias reads 112*64*4 = 28672 B;
      tiled traffic 4*(100*30*16 + 30*1000*7 + 100*1000) = 1432000 B -> share 28672/1460672
    - none: every epilogue column 0, every other column unchanged."""
    cfg = TileConfig(16, 64, 8, 2, 4)
    rows = pd.concat([_rows((100, 1000, 30), [cfg])] * 3, ignore_index=True)
    rows["epilogue"] = ["bias_gelu", "none", "bias"]
    f = analytic_arrays(rows, preset("a100"))
    assert f["epilogue_flops_per_element"].tolist() == [10, 0, 1]
    assert f["epilogue_flops_per_tile"].tolist() == [10240, 0, 1024]
    assert f["epilogue_bytes_per_tile"].tolist() == [256, 0, 256]
    assert f["epilogue_flop_share"][0] == pytest.approx(1 / 7) and f["epilogue_flop_share"][1] == 0
    assert f["epilogue_byte_share"][0] == pytest.approx(28672 / 1460672) and f["epilogue_byte_share"][1] == 0
    plain = analytic_arrays(_rows((100, 1000, 30), [cfg]), preset("a100"))      # no epilogue column: none
    for name, v in plain.items():
        assert f[name][1] == v[0], name
        if name not in EPILOGUE_FEATURES:
            assert f[name][0] == v[0], name


def test_every_feature_set_tells_the_epilogues_apart_for_families_that_fuse_them():
    for fs in ("analytic", "raw", "derived"):
        assert "epilogue_flops_per_element" in get_feature_set(fs).feature_names(get_family("gemm"))
    rows = _rows((64, 64, 64), [TileConfig(16, 16, 8, 2, 2)] * 2).assign(epilogue=["none", "bias_relu"])
    X = get_feature_set("raw").transform(rows, preset("a100"))
    assert X["epilogue_flops_per_element"].tolist() == [0.0, 2.0]
    with pytest.raises(ValueError, match="epilogue='silu'"):
        get_feature_set("raw").transform(rows.assign(epilogue="silu"), preset("a100"))
