"""The ``gemm`` family's code generation: one tiled GEMM template rendered for
CUDA and OpenCL.

C[M,N] = A[M,K] @ B[K,N], row-major, float32 in and out, float32 accumulate.
M, N and K are runtime arguments, so one compiled kernel serves every shape;
every load and store is bounds-checked, so any M, N, K >= 1 is correct.
Global offsets are computed in 64-bit integers.

The template is written once in a C subset both languages accept; a dialect
prelude defines the few macros that differ (qualifiers, thread indices,
barrier, shared-memory declaration). Tile parameters are ``#define``\\ s.

Layout of the block's work (for a config with BM, BN, KS, TM, TN):

- The block's threads form a (BM/TM) x (BN/TN) grid; thread (tr, tc) owns
  output rows ``tr*TM + i`` and columns ``tc + j*(BN/TN)`` of the block tile
  (rows blocked, columns strided so that consecutive threads store
  consecutive addresses).
- Each reduction step stages ``As[BM][KS+pad]`` and ``Bs[KS][BN+pad]`` in
  shared memory; consecutive threads load consecutive global addresses.
"""
from __future__ import annotations

import hashlib

from costlearn.core.problem import EPILOGUES
from costlearn.families.gemm.config import GemmConfig

__all__ = ["render", "kernel_name", "TEMPLATE_HASH", "DIALECTS", "epilogue_hash"]

DIALECTS = ("cuda", "opencl")

_PRELUDE = {
    "cuda": r"""
#define KERNEL extern "C" __global__ void __launch_bounds__(THREADS)
#define GLOBAL
#define RESTRICT __restrict__
#define SYNC() __syncthreads()
#define LOCAL_ID ((int)threadIdx.x)
#define GROUP_ID ((long long)blockIdx.x)
typedef long long index_t;
#define DECLARE_PANELS \
    extern __shared__ float smem_dyn[]; \
    float* As = smem_dyn; \
    float* Bs = smem_dyn + BM * (BK + PAD);
#define UNROLL _Pragma("unroll")
#define UNROLL_K _Pragma("unroll")
""",
    "opencl": r"""
#define KERNEL __kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
#define GLOBAL __global
#define RESTRICT restrict
#define SYNC() barrier(CLK_LOCAL_MEM_FENCE)
#define LOCAL_ID ((int)get_local_id(0))
#define GROUP_ID ((long)get_group_id(0))
typedef long index_t;
#define DECLARE_PANELS \
    __local float As[BM * (BK + PAD)]; \
    __local float Bs[BK * (BN + PAD)];
#define UNROLL _Pragma("unroll")
#define UNROLL_K
""",
}

_LOOP = {
    # Outer-product form: reduction step outermost, TM + TN fragments in
    # registers, TM*TN FMAs per step.
    "outer": r"""
        UNROLL_K
        for (int kk = 0; kk < BK; ++kk) {
            float a_frag[TM];
            float b_frag[TN];
            UNROLL
            for (int i = 0; i < TM; ++i) a_frag[i] = As[(tr * TM + i) * (BK + PAD) + kk];
            UNROLL
            for (int j = 0; j < TN; ++j) b_frag[j] = Bs[kk * (BN + PAD) + tc + j * TCOLS];
            UNROLL
            for (int i = 0; i < TM; ++i) {
                UNROLL
                for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
            }
        }
""",
    # Dot-product form: each accumulator's reduction innermost, operands read
    # from shared memory on every use.
    "dot": r"""
        UNROLL
        for (int i = 0; i < TM; ++i) {
            UNROLL
            for (int j = 0; j < TN; ++j) {
                float s = 0.0f;
                UNROLL_K
                for (int kk = 0; kk < BK; ++kk)
                    s += As[(tr * TM + i) * (BK + PAD) + kk] * Bs[kk * (BN + PAD) + tc + j * TCOLS];
                acc[i][j] += s;
            }
        }
""",
}

_RASTER = {
    "row": "const index_t bm = bid / grid_n; const index_t bn = bid % grid_n;",
    "col": "const index_t bn = bid / grid_m; const index_t bm = bid % grid_m;",
}

_BODY = r"""
KERNEL KNAME(GLOBAL const float* RESTRICT A, GLOBAL const float* RESTRICT B,
             GLOBAL float* RESTRICT C, const int M, const int N, const int K)
{
    DECLARE_PANELS
    const int tid = LOCAL_ID;
    const index_t bid = GROUP_ID;
    const index_t grid_m = ((index_t)M + BM - 1) / BM;
    const index_t grid_n = ((index_t)N + BN - 1) / BN;
    RASTER_DECODE
    const index_t row0 = bm * BM;
    const index_t col0 = bn * BN;
    const int tr = tid / TCOLS;
    const int tc = tid % TCOLS;

    float acc[TM][TN];
    UNROLL
    for (int i = 0; i < TM; ++i) {
        UNROLL
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    }

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = tid; e < BM * BK; e += THREADS) {
            const int i = e / BK, kk = e % BK;
            const index_t gm = row0 + i;
            const int gk = k0 + kk;
            As[i * (BK + PAD) + kk] = (gm < M && gk < K) ? A[gm * K + gk] : 0.0f;
        }
        for (int e = tid; e < BK * BN; e += THREADS) {
            const int kk = e / BN, j = e % BN;
            const int gk = k0 + kk;
            const index_t gn = col0 + j;
            Bs[kk * (BN + PAD) + j] = (gk < K && gn < N) ? B[(index_t)gk * N + gn] : 0.0f;
        }
        SYNC();
LOOP_BODY
        SYNC();
    }

    UNROLL
    for (int i = 0; i < TM; ++i) {
        const index_t gm = row0 + tr * TM + i;
        UNROLL
        for (int j = 0; j < TN; ++j) {
            const index_t gn = col0 + tc + j * TCOLS;
            if (gm < M && gn < N) C[gm * N + gn] = acc[i][j];
        }
    }
}
"""

TEMPLATE_HASH = hashlib.sha256(
    ("".join(_PRELUDE[d] for d in DIALECTS) + "".join(_LOOP.values())
     + "".join(_RASTER.values()) + _BODY).encode()).hexdigest()[:12]
"""Short hash of the template text; recorded with every measurement and model
so that a changed kernel never silently reuses old timings."""


_SIGNATURE = "const int M, const int N, const int K)"
_STORE = "if (gm < M && gn < N) C[gm * N + gn] = acc[i][j];"

_EPILOGUE_MATH = {
    "cuda": "#define TANH tanhf\n#define FMAX fmaxf\n",
    "opencl": "#define TANH tanh\n#define FMAX fmax\n",
}

_EPILOGUE = {
    "bias": "#define EPI(v) (v)\n",
    "bias_relu": "#define EPI(v) FMAX((v), 0.0f)\n",
    "bias_gelu": "#define EPI(v) (0.5f * (v) * (1.0f + TANH(0.7978845608028654f * ((v) + 0.044715f * (v) * (v) * (v)"
                 "))))\n",
}
"""``EPI(v)`` of each epilogue with a bias (costlearn.core.problem.EPILOGUES); the
store computes ``v = acc + bias[n]`` once, then ``C = EPI(v)``."""

_EPILOGUE_SIGNATURE = "const int M, const int N, const int K,\n             GLOBAL const float* RESTRICT bias)"
_EPILOGUE_STORE = "if (gm < M && gn < N) { const float v = acc[i][j] + bias[gn]; C[gm * N + gn] = EPI(v); }"


def epilogue_hash(epilogue: str = "none") -> str:
    """The ``template_hash`` of kernels rendered with ``epilogue``:
    :data:`TEMPLATE_HASH` for ``"none"`` (the source is unchanged), else a
    hash of it and the epilogue's code.

    Raises
    ------
    ValueError
        If ``epilogue`` is not one of :data:`costlearn.core.problem.EPILOGUES`.
    """
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue={epilogue!r}; allowed: {list(EPILOGUES)}")
    if epilogue == "none":
        return TEMPLATE_HASH
    text = TEMPLATE_HASH + _EPILOGUE[epilogue] + "".join(_EPILOGUE_MATH.values()) + _EPILOGUE_SIGNATURE \
        + _EPILOGUE_STORE
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def kernel_name(config: GemmConfig) -> str:
    """C identifier of the kernel for ``config``: ``gemm_`` + its config_id."""
    return "gemm_" + config.config_id


def render(config: GemmConfig, dialect: str, dtype: str = "float32",
           name: str | None = None, epilogue: str = "none") -> str:
    """Render the GEMM kernel source for ``config``.

    Parameters
    ----------
    config : GemmConfig
        Tile parameters.
    dialect : {"cuda", "opencl"}
        Target language. On CUDA the panels live in dynamic shared memory, so
        the launch must pass the config's ``smem_bytes`` (its tile
        description) and opt in above 48 KiB; on OpenCL they are static
        ``__local`` arrays.
    dtype : {"float32"}
        Element type.
    name : str, optional
        Kernel name; :func:`kernel_name` by default.
    epilogue : str
        One of :data:`costlearn.core.problem.EPILOGUES`: ``"none"`` (the source is
        byte for byte the epilogue-free kernel's), or a bias (float32,
        length N) added to every row before the store, then the
        activation.

    Returns
    -------
    str
        Complete source of one kernel with signature
        ``(const float* A, const float* B, float* C, int M, int N, int K)``,
        and ``const float* bias`` last for an epilogue with a bias, to be
        launched with ``config.threads`` threads per block and
        ceil(M/BM)*ceil(N/BN) blocks on a 1-D grid. Its first line names
        the template hash (:func:`epilogue_hash`).

    Raises
    ------
    ValueError
        If ``dialect``, ``dtype`` or ``epilogue`` is not supported.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"dialect={dialect!r}; allowed: {DIALECTS}")
    if dtype != "float32":
        raise ValueError(f"dtype={dtype!r}; the gemm template is float32 only")
    c = config
    defines = (
        f"#define BM {c.block_m}\n#define BN {c.block_n}\n#define BK {c.block_k}\n"
        f"#define TM {c.thread_m}\n#define TN {c.thread_n}\n#define PAD {c.smem_pad}\n"
        f"#define TCOLS {c.block_n // c.thread_n}\n#define THREADS {c.threads}\n"
        f"#define KNAME {name or kernel_name(c)}\n"
    )
    template_hash = epilogue_hash(epilogue)
    body = _BODY.replace("LOOP_BODY", _LOOP[c.loop_order]).replace("RASTER_DECODE", _RASTER[c.raster])
    if epilogue != "none":
        body = body.replace(_SIGNATURE, _EPILOGUE_SIGNATURE).replace(_STORE, _EPILOGUE_STORE)
        defines += _EPILOGUE_MATH[dialect] + _EPILOGUE[epilogue]
    head = f"// costlearn GEMM template {template_hash}: {c.config_id}" + ("" if epilogue == "none" else
                                                                          f" + {epilogue}")
    return head + "\n" + defines + _PRELUDE[dialect] + body
