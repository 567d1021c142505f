"""Ahead-of-time compilation of costlearn's Triton matmul
(:mod:`costlearn.families.triton_mm.kernel`) for an NVIDIA target, with no
GPU: registers, spills and shared memory per (config, dtype, layout), the
compiled facts the features and feasibility use.

Needs Triton (its wheel carries ``ptxas`` and ``cuobjdump``); importing
costlearn never does. Triton compiles for a ``GPUTarget("cuda", arch, 32)``
the way it would at launch on that GPU (its ``triton.compile`` entry point),
then ``cuobjdump -res-usage`` reads the cubin's registers and local memory
(spill) per thread; shared memory is Triton's dynamic allocation (its
kernel metadata ``shared``).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from costlearn.core.problem import EPILOGUES, LAYOUTS

__all__ = ["CompiledFacts", "compile_for", "triton_version"]

TRITON_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "tfloat32": "fp32"}
"""Triton's pointer element type name per costlearn dtype."""


@dataclass(frozen=True)
class CompiledFacts:
    """What compiling one config for a target says.

    Attributes
    ----------
    ok : bool
        It compiled.
    error : str
        The compiler's message when not.
    registers_per_thread : int or None
    spill_bytes_per_thread : int or None
        Local memory per thread (register spills and stack), bytes.
    smem_bytes : int or None
        Shared memory per block Triton allocates (its pipeline buffers), bytes.
    """

    ok: bool
    error: str = ""
    registers_per_thread: int | None = None
    spill_bytes_per_thread: int | None = None
    smem_bytes: int | None = None


def triton_version() -> str | None:
    """The installed Triton's version, None without Triton."""
    try:
        import triton
        return str(triton.__version__)
    except ImportError:
        return None


def _tool(name: str) -> str | None:
    """``name`` from Triton's wheel (``triton/backends/nvidia/bin``), else PATH."""
    try:
        import triton
        p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
        if p.is_file():
            return str(p)
    except ImportError:
        pass
    return shutil.which(name)


def _res_usage(cubin: bytes) -> tuple[int | None, int | None]:
    """(registers, local bytes) per thread of a cubin's one kernel, from
    ``cuobjdump -res-usage`` ("REG:n STACK:n SHARED:n LOCAL:n ...")."""
    tool = _tool("cuobjdump")
    if tool is None:
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        out = subprocess.run([tool, "-res-usage", fh.name], capture_output=True, text=True, timeout=60).stdout
    reg = re.search(r"REG:(\d+)", out)
    local = re.search(r"LOCAL:(\d+)", out)
    stack = re.search(r"STACK:(\d+)", out)
    spill = (int(local.group(1)) if local else 0) + (int(stack.group(1)) if stack else 0)
    return (int(reg.group(1)) if reg else None), (spill if reg else None)


def compile_for(config, dtype: str, layout: str = "NN", arch: int = 90, aligned: bool = True,
                epilogue: str = "none") -> CompiledFacts:
    """Compile ``config`` of the ``triton_mm`` family for ``sm_<arch>``.

    Parameters
    ----------
    config : costlearn.families.triton_mm.TritonMMConfig
    dtype : {"float16", "bfloat16", "float32", "tfloat32"}
    layout : {"NN", "NT", "TN", "TT"}
        Which strides are 1 (Triton specialises a unit stride), so each
        layout is its own binary.
    arch : int
        Compute capability times ten (90: H100/H200).
    aligned : bool
        Compile as Triton does at launch for M, N, K that are multiples of 16
        (its integer-argument specialisation): the K-edge mask is then known
        to be constant over 16 elements, loads vectorise and the K loop is
        software-pipelined into ``num_stages`` buffers. With False, as for a
        ragged K: the loads stay element-wise and are not pipelined.
    epilogue : str
        One of :data:`costlearn.core.problem.EPILOGUES`.

    Returns
    -------
    CompiledFacts
        ``ok=False`` with the compiler's message when it does not compile
        (e.g. shared memory over the target's limit).

    Raises
    ------
    ImportError
        Without Triton.
    ValueError
        On an unknown dtype, layout or epilogue.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from costlearn.families.triton_mm.kernel import INPUT_PRECISION, matmul_kernel
    if dtype not in TRITON_DTYPE:
        raise ValueError(f"dtype={dtype!r}; allowed: {sorted(TRITON_DTYPE)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; allowed: {LAYOUTS}")
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue={epilogue!r}; allowed: {list(EPILOGUES)}")
    t = TRITON_DTYPE[dtype]
    a_col, b_col = layout[0] == "T", layout[1] == "T"
    # Arguments: a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, bias.
    unit = {"stride_am": a_col, "stride_ak": not a_col, "stride_bk": b_col, "stride_bn": not b_col,
            "stride_cn": True}
    signature = {"a_ptr": f"*{t}", "b_ptr": f"*{t}", "c_ptr": f"*{t}", "M": "i32", "N": "i32", "K": "i32"}
    constexprs = {}
    for name in ("stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"):
        if unit.get(name):
            signature[name] = "constexpr"
            constexprs[name] = 1
        else:
            signature[name] = "i32"
    signature["bias_ptr"] = f"*{t}"
    meta = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
                PRECISION=INPUT_PRECISION[dtype], EPILOGUE=epilogue)
    for name, v in meta.items():
        signature[name] = "constexpr"
        constexprs[name] = v
    # Pointers 16-byte aligned and the non-unit strides (and, aligned, the
    # extents) multiples of 16, as torch's allocator and Triton's launch-time
    # specialisation give them.
    idx = list(signature)
    attrs = {(idx.index(n),): [["tt.divisibility", 16]] for n in idx
             if n.endswith("_ptr") or (n.startswith("stride") and signature[n] == "i32")
             or (aligned and n in ("M", "N", "K"))}
    src = ASTSource(fn=matmul_kernel, signature=signature, constexprs={(idx.index(k),): v for k, v in
                                                                       constexprs.items()}, attrs=attrs)
    try:
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                           options=dict(num_warps=config.num_warps, num_stages=config.num_stages))
    except Exception as e:  # a config the target cannot compile is a fact too
        return CompiledFacts(False, f"{type(e).__name__}: {e}"[:2000])
    regs, spill = _res_usage(k.asm["cubin"])
    shared = getattr(k.metadata, "shared", None)
    return CompiledFacts(True, "", regs, spill, None if shared is None else int(shared))
