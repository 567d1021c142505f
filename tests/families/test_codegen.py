import re
import subprocess

import numpy as np
import pytest

from conftest import needs_nvcc, needs_opencl
from costlearn.core.device import preset
from costlearn.families.gemm import TEMPLATE_HASH, render
from costlearn.families.gemm import GemmConfig as TileConfig
from costlearn.collect.verify import apply_epilogue
from costlearn.core.problem import Problem
from costlearn.collect.space import enumerate_space
import hashlib

SHAPES = [(1, 1, 1), (1, 1024, 1024), (10, 500, 64), (130, 293, 237), (257, 31, 1000), (64, 64, 1)]

# A spread: both loop orders, both rasters, padding on and off, batch-1
# tiles, thread tiles that are not square, tiles larger than some shapes.
CONFIGS = [
    TileConfig(64, 64, 16, 4, 4, "outer", 1, "row"),
    TileConfig(1, 128, 32, 1, 4, "dot", 0, "col"),
    TileConfig(32, 32, 8, 2, 2, "dot", 1, "row"),
    TileConfig(16, 64, 8, 4, 1, "outer", 0, "col"),
    TileConfig(128, 32, 4, 8, 2, "outer", 0, "row"),
    TileConfig(2, 256, 64, 2, 8, "dot", 1, "col"),
]


def test_render_is_deterministic_and_names_the_template():
    c = CONFIGS[0]
    assert render(c, "cuda") == render(c, "cuda")
    assert TEMPLATE_HASH in render(c, "opencl")
    with pytest.raises(ValueError, match="metal"):
        render(c, "metal")


@needs_opencl
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.config_id)
def test_kernel_matches_float64_reference_on_pocl(config):
    from costlearn.collect.backends import get_backend
    be = get_backend("opencl")
    kern = be.compile(config)
    assert kern.status == "ok", kern.error
    for m, n, k in SHAPES:
        with be.workspace(Problem(m, n, k), seed=m + n + k) as ws:
            ok, err = ws.verify(kern)
            assert ok, f"{config.config_id} wrong at {(m, n, k)}: max abs err {err}"


@needs_opencl
def test_verification_fails_a_kernel_that_skips_part_of_c():
    """A kernel that never writes the last row leaves NaN from the poisoned
    output and must fail, whatever an earlier run left in C."""
    from costlearn.collect.backends import get_backend
    from costlearn.families.gemm import kernel_name
    be = get_backend("opencl")
    good = be.compile(CONFIGS[2])
    import pyopencl as cl
    src = render(CONFIGS[2], "opencl").replace("if (gm < M && gn < N)", "if (gm < M - 1 && gn < N)")
    prg = cl.Program(be.ctx, src).build()
    bad = type(good)(CONFIGS[2], "ok", "", None, 0.0, getattr(prg, kernel_name(CONFIGS[2])))
    with be.workspace(Problem(40, 40, 40)) as ws:
        assert ws.verify(good)[0]
        ok, err = ws.verify(bad)
        assert not ok and err == float("inf")


def _nvcc_registers(src: str, path) -> int:
    path.write_text(src)
    out = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(path.with_suffix(".cubin")),
                          str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return int(re.search(r"Used (\d+) registers", out.stderr).group(1))


@needs_nvcc
def test_cuda_rendering_compiles_for_sm90(tmp_path):
    from concurrent.futures import ThreadPoolExecutor
    space = enumerate_space(preset("h200")).configs
    rng = np.random.default_rng(0)
    sample = [space[i] for i in rng.choice(len(space), size=6, replace=False)] + [CONFIGS[1]]
    with ThreadPoolExecutor(4) as ex:
        regs = list(ex.map(lambda ic: _nvcc_registers(render(ic[1], "cuda"), tmp_path / f"k{ic[0]}.cu"),
                           enumerate(sample)))
    assert all(0 < r <= 255 for r in regs), regs


A = TileConfig(64, 64, 16, 4, 4)


def test_kernel_source_is_pinned_so_a_change_cannot_reuse_old_timings():
    """If this fails, the kernel source changed: make the change alter
    codegen.TEMPLATE_HASH (it keys every measurement) and re-measure."""
    from costlearn.families.gemm import TEMPLATE_HASH, render
    src = "".join(render(c, d) for c in (A, TileConfig(1, 64, 8, 1, 2, "dot", 1, "col")) for d in ("cuda", "opencl"))
    assert TEMPLATE_HASH == "080acee35a12"
    assert hashlib.sha256(src.encode()).hexdigest()[:12] == "bb205c4775d5"


# -- epilogues: bias, then ReLU or GELU (tanh form), in the store -------------------------------------------------

EPILOGUE_CONFIGS = [CONFIGS[0], CONFIGS[1], CONFIGS[4], CONFIGS[5]]       # both loop orders and rasters, BM = 1
EPILOGUE_SHAPES = [(1, 1, 1), (10, 500, 64), (130, 293, 237), (257, 31, 1000)]


def _reference(a, b, bias, epilogue):
    return apply_epilogue(a.astype(np.float64) @ b.astype(np.float64), bias, epilogue)


@needs_opencl
@pytest.mark.parametrize("epilogue", ["bias", "bias_relu", "bias_gelu"])
def test_epilogue_kernels_match_float64_on_pocl_for_ragged_shapes(epilogue):
    """Each epilogue rendered for OpenCL, on PoCL, against a float64
    reference of A @ B + bias then the activation; C is poisoned with NaN
    first, so an element never stored fails."""
    import pyopencl as cl

    from costlearn.collect.backends import get_backend
    from costlearn.families import get_family
    from costlearn.families.gemm import kernel_name
    be, fam = get_backend("opencl"), get_family("gemm")
    rng = np.random.default_rng(0)
    mf = cl.mem_flags
    for config in EPILOGUE_CONFIGS:
        knl = getattr(cl.Program(be.ctx, render(config, "opencl", epilogue=epilogue)).build(), kernel_name(config))
        for m, n, k in EPILOGUE_SHAPES:
            a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
            bias = rng.standard_normal(n).astype(np.float32)
            c = np.full((m, n), np.nan, np.float32)
            bufs = [cl.Buffer(be.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x) for x in (a, b)]
            cbuf = cl.Buffer(be.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
            biasbuf = cl.Buffer(be.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=bias)
            knl.set_args(*bufs, cbuf, np.int32(m), np.int32(n), np.int32(k), biasbuf)
            cl.enqueue_nd_range_kernel(be.queue, knl, (fam.blocks(config, m, n) * config.threads,),
                                       (config.threads,)).wait()
            cl.enqueue_copy(be.queue, c, cbuf).wait()
            ref = _reference(a, b, bias, epilogue)
            tol = 1.2 * (16 * np.sqrt(k) * 2.0 ** -23 * (np.abs(a).astype(np.float64) @ np.abs(b) + np.abs(bias))) \
                + 1e-6 * (1 + np.abs(ref))
            assert np.isfinite(c).all(), f"{config.config_id} {epilogue} {(m, n, k)}: an element never stored"
            err = np.abs(c - ref)
            assert (err <= tol).all(), f"{config.config_id} {epilogue} {(m, n, k)}: max abs err {err.max()}"


def test_epilogue_none_is_the_epilogue_free_kernel_and_each_epilogue_has_its_own_hash():
    from costlearn.families.gemm.template import epilogue_hash
    for d in ("cuda", "opencl"):
        assert render(A, d, epilogue="none") == render(A, d)
        src = render(A, d, epilogue="bias_relu")
        assert src.count("bias[gn]") == 1 and "GLOBAL const float* RESTRICT bias)" in src
        assert src.startswith(f"// costlearn GEMM template {epilogue_hash('bias_relu')}: ")
    hashes = [epilogue_hash(e) for e in ("none", "bias", "bias_relu", "bias_gelu")]
    assert hashes[0] == TEMPLATE_HASH and len(set(hashes)) == 4
    with pytest.raises(ValueError, match=r"epilogue='silu'; allowed: \['none', 'bias', 'bias_relu', 'bias_gelu'\]"):
        render(A, "opencl", epilogue="silu")


@needs_nvcc
def test_epilogue_kernels_compile_for_sm90(tmp_path):
    regs = {e: _nvcc_registers(render(CONFIGS[0], "cuda", epilogue=e), tmp_path / f"{e}.cu")
            for e in ("none", "bias", "bias_relu", "bias_gelu")}
    assert all(0 < r <= 255 for r in regs.values()), regs
