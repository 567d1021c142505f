"""The CUDA backend on a real NVIDIA GPU; skipped where there is none."""
import pytest

from conftest import needs_cuda

pytestmark = needs_cuda

SHAPES = [(1, 1, 1), (1, 1024, 1024), (10, 500, 64), (130, 293, 237), (257, 31, 1000), (64, 64, 1)]


def test_spec_is_queried_from_the_gpu():
    from costlearn.collect.backends import get_backend
    s = get_backend("cuda").spec
    assert s.api == "cuda" and s.warp_size == 32 and s.registers_per_mp and s.source.startswith("queried")


@pytest.mark.parametrize("ids", [["m64n64k16_t4x4_outer_p1_row", "m1n128k32_t1x4_dot_p0_col",
                                  "m128n128k32_t8x8_outer_p1_col", "m128n256k64_t8x8_outer_p0_row"]])
def test_kernels_match_reference_on_cuda_including_smem_opt_in(ids):
    from costlearn.collect.backends import get_backend
    from costlearn.families.gemm import GemmConfig as TileConfig
    from costlearn.families.gemm import GemmFamily
    smem_bytes = GemmFamily.smem_bytes
    be = get_backend("cuda")
    for cid in ids:
        c = TileConfig.from_id(cid)
        kern = be.compile(c)
        assert kern.status == "ok", kern.error
        assert kern.registers_per_thread and kern.registers_per_thread <= 255
        if smem_bytes(c) > be.spec.smem_per_block_bytes:
            assert kern.handle[1] == smem_bytes(c)   # opted in above 48 KiB
        for shape in SHAPES:
            with be.workspace(*shape) as ws:
                ok, err = ws.verify(kern)
                assert ok, (cid, shape, err)


def test_collect_on_cuda(tmp_path):
    from costlearn.collect.backends import get_backend
    from costlearn.collect.loop import collect
    from costlearn.collect.dataset import load
    from costlearn.families.gemm import GemmConfig as TileConfig
    be = get_backend("cuda")
    pool = [TileConfig.from_id("m64n64k16_t4x4_outer_p1_row"), TileConfig.from_id("m1n128k32_t1x4_dot_p0_col")]
    res = collect(be, tmp_path, shapes=[(1, 4096, 4096), (512, 512, 512)], pool=pool, progress=False)
    df, _ = load(tmp_path)
    assert res.rows_valid == len(df) == 3
    assert (df["api"] == "cuda").all() and df["library_version"].str.startswith("cupy").all()
