"""Tile space: the tile configurations of the GEMM template and which of them
a device can run.

Feasibility is decided here, from a :class:`~costlearn.device.DeviceSpec`,
before any code is generated (design.md, "The kernel and its tile space").
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import numbers
from collections import Counter
from dataclasses import dataclass

from .device import DeviceSpec

__all__ = [
    "TileConfig", "Shape", "SpaceResult", "enumerate_space", "check_config",
    "check_shape", "LOOP_ORDERS", "RASTERS", "DTYPES", "TILE_VALUES",
    "smem_bytes", "registers_estimate",
]

LOOP_ORDERS = ("outer", "dot")
"""Per-thread loop nests: ``"outer"`` is the outer-product form (reduction
step outermost, a TM and a TN fragment loaded to registers, TM*TN FMAs);
``"dot"`` is the dot-product form (each accumulator's reduction innermost,
operands read straight from shared memory)."""

RASTERS = ("row", "col")
"""Order in which the linear block index walks the output's block grid:
``"row"`` (consecutive blocks along N) or ``"col"`` (along M)."""

DTYPES = {"float32": 4}
"""Supported element types and their size in bytes."""

TILE_VALUES = {
    "block_m": (1, 2, 4, 8, 16, 32, 64, 128),
    "block_n": (8, 16, 32, 64, 128, 256),
    "block_k": (4, 8, 16, 32, 64),
    "thread_m": (1, 2, 4, 8),
    "thread_n": (1, 2, 4, 8),
    "loop_order": LOOP_ORDERS,
    "smem_pad": (0, 1),
    "raster": RASTERS,
}
"""Values each tile parameter ranges over before feasibility rules."""

# Accumulators per thread above which a kernel spills on every GPU we know
# (TM*TN accumulators + TM + TN fragments must fit in 255 registers with the
# addressing registers; CUTLASS SIMT kernels stop at 8x8).
MAX_ACCUMULATORS = 64
# Registers a thread needs besides accumulators and fragments (indices,
# pointers, loop counters), a conservative figure read off `nvcc -Xptxas -v`
# for this template.
REG_OVERHEAD = 32


@dataclass(frozen=True, order=True)
class TileConfig:
    """One tile configuration of the GEMM template.

    Parameters
    ----------
    block_m, block_n : int
        Block tile [BM, BN]: the output sub-matrix one thread block
        (work-group) computes, in elements.
    block_k : int
        Reduction step KS: the A panel [BM, KS] and B panel [KS, BN] staged
        in shared (local) memory per iteration, in elements.
    thread_m, thread_n : int
        Thread tile [TM, TN]: accumulators each thread holds, in elements.
        The block has (BM/TM)*(BN/TN) threads.
    loop_order : {"outer", "dot"}
        Nesting of the per-thread loops (see :data:`LOOP_ORDERS`).
    smem_pad : int
        Elements of padding added to the inner dimension of each shared
        panel (the bank-conflict knob).
    raster : {"row", "col"}
        Block raster order (see :data:`RASTERS`).
    """

    block_m: int
    block_n: int
    block_k: int
    thread_m: int
    thread_n: int
    loop_order: str = "outer"
    smem_pad: int = 0
    raster: str = "row"

    def __post_init__(self) -> None:
        for f in ("block_m", "block_n", "block_k", "thread_m", "thread_n", "smem_pad"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"TileConfig.{f}={v!r} ({type(v).__name__}); must be an int")
            lo = 0 if f == "smem_pad" else 1
            if not lo <= int(v) <= 4096:
                raise ValueError(f"TileConfig.{f}={v!r}; must be an int in [{lo}, 4096]")
            object.__setattr__(self, f, int(v))  # numpy ints become Python ints
        if self.loop_order not in LOOP_ORDERS:
            raise ValueError(f"TileConfig.loop_order={self.loop_order!r}; allowed: {LOOP_ORDERS}")
        if self.raster not in RASTERS:
            raise ValueError(f"TileConfig.raster={self.raster!r}; allowed: {RASTERS}")
        if self.block_m % self.thread_m or self.block_n % self.thread_n:
            raise ValueError(
                f"thread tile {self.thread_m}x{self.thread_n} must divide block tile "
                f"{self.block_m}x{self.block_n}")

    @property
    def threads(self) -> int:
        """Threads per block, (BM/TM)*(BN/TN)."""
        return (self.block_m // self.thread_m) * (self.block_n // self.thread_n)

    @property
    def config_id(self) -> str:
        """Stable, readable identifier, e.g. ``"m64n64k16_t4x4_outer_p1_row"``."""
        return (f"m{self.block_m}n{self.block_n}k{self.block_k}_t{self.thread_m}x{self.thread_n}"
                f"_{self.loop_order}_p{self.smem_pad}_{self.raster}")

    @classmethod
    def from_id(cls, config_id: str) -> "TileConfig":
        """Parse a :attr:`config_id`.

        Raises
        ------
        ValueError
            If ``config_id`` is not of the form ``m<BM>n<BN>k<KS>_t<TM>x<TN>_<loop>_p<pad>_<raster>``.
        """
        import re
        num = r"([1-9][0-9]*)"
        m = re.fullmatch(rf"m{num}n{num}k{num}_t{num}x{num}_([a-z]+)_p(0|[1-9][0-9]*)_([a-z]+)",
                         str(config_id), flags=re.ASCII)
        if not m:
            raise ValueError(f"malformed config_id {config_id!r}; expected e.g. "
                             "'m64n64k16_t4x4_outer_p1_row'")
        bm, bn, bk, tm, tn, lo, pad, ra = m.groups()
        return cls(int(bm), int(bn), int(bk), int(tm), int(tn), lo, int(pad), ra)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


PARAM_NAMES = tuple(f.name for f in dataclasses.fields(TileConfig))


@dataclass(frozen=True)
class Shape:
    """A GEMM problem C[M,N] = A[M,K] @ B[K,N], row-major.

    Parameters
    ----------
    m, n, k : int
        Extents, each >= 1.
    dtype : {"float32"}
        Element type of A, B and C (accumulation is float32).
    """

    m: int
    n: int
    k: int
    dtype: str = "float32"

    def __post_init__(self) -> None:
        check_shape(self.m, self.n, self.k, self.dtype)

    @property
    def flops(self) -> int:
        """2*M*N*K floating-point operations."""
        return 2 * self.m * self.n * self.k


def _check_extent(name: str, v) -> int:
    import numbers
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name}={v!r} ({type(v).__name__}); must be an int >= 1")
    v = int(v)
    if v < 1:
        raise ValueError(f"{name}={v}; must be an int >= 1")
    if v > 2**31 - 1:
        raise ValueError(f"{name}={v}; must be < 2**31 (kernel extents are 32-bit)")
    return v


def check_shape(m, n, k, dtype="float32") -> tuple[int, int, int, str]:
    """Validate a GEMM shape and return it as Python ints.

    Raises
    ------
    TypeError
        If an extent is not an integer (bool and float included).
    ValueError
        If an extent is < 1 or >= 2**31, or ``dtype`` is not in :data:`DTYPES`.
    """
    if type(m) is int and type(n) is int and type(k) is int and 0 < m < 2**31 and 0 < n < 2**31 \
            and 0 < k < 2**31 and type(dtype) is str and dtype in DTYPES:
        return m, n, k, dtype                  # plain valid ints: the predictor's hot path
    m, n, k = _check_extent("M", m), _check_extent("N", n), _check_extent("K", k)
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}; allowed: {sorted(DTYPES)}")
    return m, n, k, dtype


def smem_bytes(config: TileConfig, dtype: str = "float32") -> int:
    """Shared (local) memory one block allocates, in bytes:
    (BM*(KS+pad) + KS*(BN+pad)) * sizeof(dtype). The A panel is stored
    [BM][KS+pad], the B panel [KS][BN+pad] (see ``costlearn.codegen``)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}; allowed: {sorted(DTYPES)}")
    c = config
    return (c.block_m * (c.block_k + c.smem_pad) + c.block_k * (c.block_n + c.smem_pad)) * DTYPES[dtype]


def registers_estimate(config: TileConfig) -> int:
    """Registers per thread before compilation: TM*TN accumulators + TM + TN
    fragment registers + a fixed overhead for addressing. Used only for
    feasibility; features use the compiled kernel's count when known."""
    return config.thread_m * config.thread_n + config.thread_m + config.thread_n + REG_OVERHEAD


def next_pow2(x):
    """Smallest power of two >= x, for ints >= 1 or int arrays (elementwise)."""
    if type(x) is int:
        return 1 << (x - 1).bit_length()
    import numpy as np
    if np.ndim(x) == 0:
        return 1 << (int(x) - 1).bit_length()
    a = np.asarray(x, np.int64)
    out = np.ones_like(a)
    while np.any(out < a):       # at most 31 doublings for 32-bit extents
        out = np.where(out < a, out * 2, out)
    return out


RULES = (
    "threads_not_whole_warps",
    "threads_above_max",
    "accumulators_above_max",
    "smem_above_max",
    "registers_above_max",
    "registers_per_block_above_mp",
    "block_tile_exceeds_problem",
)
"""Feasibility rules, in the order they are checked; the first that fails is
the reason a config is rejected."""


def check_config(config: TileConfig, spec: DeviceSpec, dtype: str = "float32",
                 shape: tuple[int, int, int] | None = None) -> str | None:
    """Return the first feasibility rule ``config`` breaks on ``spec``, or
    ``None`` if it is feasible.

    Rules (names in :data:`RULES`):

    - ``threads_not_whole_warps``: threads per block must be a positive
      multiple of ``spec.warp_size``.
    - ``threads_above_max``: threads <= ``spec.max_threads_per_block``.
    - ``accumulators_above_max``: TM*TN <= 64 (register pressure).
    - ``smem_above_max``: panel bytes + ``smem_reserved_per_block_bytes``
      must fit in the opt-in per-block limit and in the per-MP capacity
      (CUDA Programming Guide, shared memory, cc 8.0+).
    - ``registers_above_max``: estimated registers per thread <=
      ``spec.max_registers_per_thread`` (skipped where ``None``).
    - ``registers_per_block_above_mp``: warp-granular register allocation of
      one block must fit ``spec.registers_per_mp``.
    - ``block_tile_exceeds_problem`` (only when ``shape`` is given): a block
      tile dimension larger than the next power of two of the problem's
      extent computes only padding (e.g. BM=64 for M=1); see
      :func:`tile_fits_problem`.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}; allowed: {sorted(DTYPES)}")
    if not isinstance(config, TileConfig):
        raise TypeError(f"config={config!r}; must be a TileConfig")
    if not isinstance(spec, DeviceSpec):
        raise TypeError(f"spec={spec!r}; must be a DeviceSpec (costlearn.preset('h200') or a backend's .spec)")
    t = config.threads
    if t % spec.warp_size:
        return "threads_not_whole_warps"
    if t > spec.max_threads_per_block:
        return "threads_above_max"
    if config.thread_m * config.thread_n > MAX_ACCUMULATORS:
        return "accumulators_above_max"
    need = smem_bytes(config, dtype) + spec.smem_reserved_per_block_bytes
    if need > spec.smem_per_block_optin_bytes + spec.smem_reserved_per_block_bytes \
            or need > spec.smem_per_mp_bytes:
        return "smem_above_max"
    if spec.max_registers_per_thread is not None:
        regs = registers_estimate(config)
        if regs > spec.max_registers_per_thread:
            return "registers_above_max"
        if spec.registers_per_mp is not None:
            per_warp = -(-regs * spec.warp_size // spec.register_alloc_unit) * spec.register_alloc_unit
            if per_warp * (t // spec.warp_size) > spec.registers_per_mp:
                return "registers_per_block_above_mp"
    if shape is not None and not tile_fits_problem(config.block_m, config.block_n, config.block_k, *shape,
                                                   warp_size=spec.warp_size):
        return "block_tile_exceeds_problem"
    return None


def tile_fits_problem(block_m, block_n, block_k, m, n, k, warp_size: int):
    """Rule ``block_tile_exceeds_problem``, vectorised: True where

    - BM <= next_pow2(M),
    - BN <= max(next_pow2(N), smallest BN, ``warp_size``): a batch-1 block
      (BM = 1) needs BN/TN >= one warp of threads, so a narrower cap would
      leave shapes such as (1, 16, 1024) on a GPU with no feasible tile,
    - KS <= max(next_pow2(K), smallest KS).

    Every argument but ``warp_size`` may be an int or an int array of one
    length (rows of configs, of shapes, or both); the result is then a bool
    array.
    """
    import numpy as np
    floor_n = max(min(TILE_VALUES["block_n"]), int(warp_size))
    ok = (np.asarray(block_m) <= next_pow2(m)) \
        & (np.asarray(block_n) <= np.maximum(next_pow2(n), floor_n)) \
        & (np.asarray(block_k) <= np.maximum(next_pow2(k), min(TILE_VALUES["block_k"])))
    return bool(ok) if np.ndim(ok) == 0 else ok


@dataclass(frozen=True)
class SpaceResult:
    """Outcome of :func:`enumerate_space`.

    Attributes
    ----------
    configs : tuple of TileConfig
        Feasible configs, sorted by ``config_id``.
    rejected : dict of str to int
        How many configs each rule of :data:`RULES` rejected (first failing
        rule only); zero counts included.
    total : int
        Configs considered before any rule.
    """

    configs: tuple
    rejected: dict
    total: int

    def summary(self) -> str:
        lines = [f"{len(self.configs)} feasible of {self.total} configs"]
        lines += [f"  rejected by {r}: {n}" for r, n in self.rejected.items() if n]
        return "\n".join(lines)


def all_configs() -> list[TileConfig]:
    """Every combination of :data:`TILE_VALUES` whose thread tile divides
    the block tile, before device rules."""
    out = []
    keys = list(TILE_VALUES)
    for combo in itertools.product(*(TILE_VALUES[k] for k in keys)):
        d = dict(zip(keys, combo))
        if d["block_m"] % d["thread_m"] or d["block_n"] % d["thread_n"]:
            continue
        out.append(TileConfig(**d))
    return out


def enumerate_space(spec: DeviceSpec, dtype: str = "float32",
                    shape: tuple[int, int, int] | None = None) -> SpaceResult:
    """Enumerate the feasible tile configs of ``spec``.

    Parameters
    ----------
    spec : DeviceSpec
        Device whose limits decide feasibility.
    dtype : {"float32"}
        Element type.
    shape : (int, int, int), optional
        (M, N, K); when given, block tiles larger than the problem are
        rejected too (rule ``block_tile_exceeds_problem``).

    Returns
    -------
    SpaceResult
        Feasible configs and per-rule rejection counts.

    Raises
    ------
    ValueError
        If ``dtype`` is unknown or ``shape`` is invalid.
    """
    if not isinstance(spec, DeviceSpec):
        raise TypeError(f"spec={spec!r}; must be a DeviceSpec (costlearn.preset('h200') or a backend's .spec)")
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}; allowed: {sorted(DTYPES)}")
    if shape is not None:
        if len(tuple(shape)) != 3:
            raise ValueError(f"shape={shape!r}; must be (M, N, K)")
        shape = check_shape(*shape, dtype)[:3]
    rejected = Counter({r: 0 for r in RULES})
    ok = []
    cands = all_configs()
    for c in cands:
        why = check_config(c, spec, dtype, shape)
        if why is None:
            ok.append(c)
        else:
            rejected[why] += 1
    ok.sort(key=lambda c: c.config_id)
    return SpaceResult(configs=tuple(ok), rejected=dict(rejected), total=len(cands))


def space_hash() -> str:
    """Short hash of :data:`TILE_VALUES` and the rules, stored with models."""
    h = hashlib.sha256(repr((TILE_VALUES, RULES, MAX_ACCUMULATORS, REG_OVERHEAD)).encode())
    return h.hexdigest()[:12]
