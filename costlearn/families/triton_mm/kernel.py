"""costlearn's own Triton matmul kernel for the ``triton_mm`` family and its
launch (needs Triton; imported only through
:meth:`~costlearn.families.triton_mm.TritonMMFamily.torch_launcher`, which the
triton backend calls, and by :func:`costlearn.families.triton_mm.compile.compile_for`).

``C[M, N] = op(A) @ op(B)``, float32 accumulation, C stored in the input
dtype (float32 for ``float32`` and ``tfloat32``); with an epilogue
(:data:`costlearn.core.problem.EPILOGUES`, the ``EPILOGUE`` constexpr) the
length-N ``bias`` (input dtype) is added to every row in float32 before the
store, then ReLU or GELU (tanh form, tanh(x) = 2 sigmoid(2x) - 1). Layouts are strides: A
is read at ``a + m * stride_am + k * stride_ak`` and B at ``b + k * stride_bk
+ n * stride_bn``, so ``NN``, ``NT``, ``TN`` and ``TT`` are one kernel with
other strides (Triton specialises a stride of 1 at compile time). Every
load and the store are masked, so any M, N, K >= 1 is correct; offsets are
64-bit.

Launch order: output tiles are numbered in groups of ``GROUP_M`` tile rows,
walked column by column inside a group, so the ``GROUP_M`` A panels of a
group are reused from L2 across ``tiles_n`` programs (the grouped ordering
of "Triton matrix multiplication", Tillet et al., MAPL 2019; the parameter
of Inductor's mm template). The pipeline depth is the launch's
``num_stages`` (Triton's software pipeliner on the K loop).

:data:`SOURCE_HASH` (sha256 of this file) is the rows' ``template_hash``:
any change to the kernel re-keys its measurements.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import triton
import triton.language as tl

from costlearn.core.problem import EPILOGUES

__all__ = ["matmul_kernel", "launch", "SOURCE_HASH", "INPUT_PRECISION"]

SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]

INPUT_PRECISION = {"float16": "ieee", "bfloat16": "ieee", "float32": "ieee", "tfloat32": "tf32"}
"""``tl.dot``'s ``input_precision`` per dtype: float16 and bfloat16 feed the
tensor cores as they are; float32 inputs are multiplied exactly ("ieee") or
rounded to TF32 ("tf32")."""


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, bias_ptr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  PRECISION: tl.constexpr, EPILOGUE: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * tiles_n
    row0 = (pid // in_group) * GROUP_M
    rows = tl.minimum(tiles_m - row0, GROUP_M)
    local = pid % in_group
    tile_m = row0 + local % rows
    tile_n = local // rows

    rm = (tile_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    rk = tl.arange(0, BLOCK_K).to(tl.int64)
    in_m = rm < M
    in_n = rn < N
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_left = K - k0
        a = tl.load(a_tile, mask=in_m[:, None] & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_tile, mask=(rk[:, None] < k_left) & in_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    if EPILOGUE != "none":
        acc += tl.load(bias_ptr + rn, mask=in_n, other=0.0).to(tl.float32)[None, :]
        if EPILOGUE == "bias_relu":
            acc = tl.maximum(acc, 0.0)
        if EPILOGUE == "bias_gelu":
            inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
            acc = 0.5 * acc * (2.0 * tl.sigmoid(2.0 * inner))       # 1 + tanh(x) = 2 sigmoid(2x)
    c_tile = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=in_m[:, None] & in_n[None, :])


def launch(config, a, b, c, dtype: str, bias=None, epilogue: str = "none") -> None:
    """Launch :func:`matmul_kernel` with ``config`` on PyTorch tensors.

    Parameters
    ----------
    config : costlearn.families.triton_mm.TritonMMConfig
    a, b : torch.Tensor, shapes (M, K) and (K, N)
        The operands as logical views of any strides (a transposed operand
        is a transposed view), on one CUDA device, in the torch dtype of
        ``dtype``.
    c : torch.Tensor, shape (M, N)
        The output, written in place.
    dtype : str
        costlearn dtype name; selects ``tl.dot``'s input precision
        (:data:`INPUT_PRECISION`).
    bias : torch.Tensor, shape (N,), optional
        The epilogue's bias (input dtype); required unless ``epilogue`` is
        ``"none"``.
    epilogue : str
        One of :data:`costlearn.core.problem.EPILOGUES`.

    Raises
    ------
    ValueError
        If ``epilogue`` is unknown, or needs a bias and none is given.

    Notes
    -----
    One program per output tile: ceil(M / BLOCK_M) * ceil(N / BLOCK_N)
    programs, numbered in the grouped order of the module docstring.
    """
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue={epilogue!r}; allowed: {list(EPILOGUES)}")
    if epilogue != "none" and bias is None:
        raise ValueError(f"epilogue={epilogue!r} needs a bias (a length-N tensor)")
    m, k = a.shape
    n = b.shape[1]
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), c if bias is None else bias, BLOCK_M=config.block_m,
                        BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
                        PRECISION=INPUT_PRECISION[dtype], EPILOGUE=epilogue, num_warps=config.num_warps,
                        num_stages=config.num_stages)
