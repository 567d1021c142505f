"""KernelFamily seam: a kernel with free tile parameters, its config type,
value ranges, feasibility rules, supported dtypes and layouts, and the map
from a config to the common :class:`TileDescription` that features, space
enumeration, sampling, dispatch, the tuning database and the predictor use
(design.md, "Seams"). Nothing outside a family names its parameters."""
from __future__ import annotations

import abc
import hashlib
from dataclasses import dataclass

import numpy as np

from costlearn.core.checks import shown
from costlearn.core.errors import CostlearnError

__all__ = ["KernelFamily", "TileDescription", "DESCRIPTION_FIELDS", "bank_conflict_degree", "SMEM_BANKS",
           "VENDOR_CONFIG_ID", "CompilerUnavailable"]

VENDOR_CONFIG_ID = "vendor"
"""The ``config_id`` of a family's vendor-library candidate, the same in every
family, so metrics, the floor and the importers recognise its rows without
knowing the family."""


class CompilerUnavailable(CostlearnError, RuntimeError):
    """A family's device compiler (e.g. ``nvcc``) is not installed; raised by
    :meth:`KernelFamily.compiled_registers`."""

SMEM_BANKS = 32
"""Shared-memory banks of 4-byte words (CUDA C++ Programming Guide, "Shared
Memory", compute capability 5.x and later)."""


@dataclass(frozen=True)
class TileDescription:
    """What a config means for cost, in terms every family shares.

    Attributes
    ----------
    block_m, block_n : int
        Block tile [BM, BN]: the output tile of one thread block
        (work-group), elements.
    block_k : int
        Reduction step KS: the K extent of the A panel [BM, KS] and the
        B panel [KS, BN] staged per iteration, elements.
    threads : int
        Threads per block.
    thread_m, thread_n : int
        Thread tile [TM, TN]: accumulators one thread holds, elements
        (TM*TN*threads = BM*BN).
    pipeline_stages : int
        Panels in flight: 1 = load, synchronise, compute (no overlap);
        S >= 2 = S - 1 panels prefetched while one is computed on.
    element_bytes : int
        Bytes per element of A and B.
    smem_bytes : int
        Shared (local) memory one block allocates, bytes.
    registers_per_thread : float
        Compiled registers per thread where known, else the family's
        pre-compile estimate.
    bank_conflict_a_read, bank_conflict_a_store, bank_conflict_b_read : int
        Serialisation degree (1 = conflict free) of one warp's first request
        to each panel, from the family's shared-memory layout
        (:func:`bank_conflict_degree`).
    smem_loads_per_fma : float
        Shared-memory loads per fused multiply-add of the inner loop.
    """

    block_m: int
    block_n: int
    block_k: int
    threads: int
    thread_m: int
    thread_n: int
    pipeline_stages: int
    element_bytes: int
    smem_bytes: int
    registers_per_thread: float
    bank_conflict_a_read: int
    bank_conflict_a_store: int
    bank_conflict_b_read: int
    smem_loads_per_fma: float


DESCRIPTION_FIELDS = tuple(TileDescription.__dataclass_fields__)
"""Field names of :class:`TileDescription`, in order."""


def bank_conflict_degree(addresses) -> int:
    """Serialisation degree of one warp's shared-memory request.

    Parameters
    ----------
    addresses : array-like of int, shape (W,)
        Word (4-byte) addresses requested by the W <= 32 threads of a warp.

    Returns
    -------
    int
        Largest number of distinct words any bank must serve (1 = conflict
        free; identical words are a broadcast and count once). Source: CUDA
        C++ Programming Guide, "Shared Memory" (cc 5.x and later): 32 banks
        of 4-byte words; distinct words in one bank are serialised.
    """
    words = np.unique(np.asarray(addresses, np.int64))
    return int(np.bincount(words % SMEM_BANKS, minlength=SMEM_BANKS).max())


class KernelFamily(abc.ABC):
    """One kernel family. Subclasses set the class attributes and implement
    the abstract methods; a family is stateless (one instance serves all).

    Attributes
    ----------
    name : str
        Registry name (``"gemm"``).
    config_type : type or tuple of type
        Its frozen config class (or classes, e.g. ``triton_mm``'s tile config
        and its vendor call); every config has ``config_id`` (stable,
        readable), ``to_dict()`` and ``family`` (this name).
    dtypes : tuple of str
        Dtypes it supports (names in :data:`costlearn.core.dtypes.DTYPES`).
    layouts : tuple of str
        Layouts it supports (:data:`costlearn.core.problem.LAYOUTS`).
    epilogues : tuple of str
        Epilogues its kernels fuse (:data:`costlearn.core.problem.EPILOGUES`);
        ``("none",)`` by default.
    rules : tuple of str
        Its device feasibility rules, in the order checked; the problem rule
        ``block_tile_exceeds_problem`` of :mod:`costlearn.collect.space` follows them.
    values : dict of str to tuple
        The values each parameter ranges over before the rules.
    param_feature_names : tuple of str
        Columns of :meth:`param_features` (the raw parameters as numbers).
    template_hash : str
        Short hash of the kernel source costlearn generates and measures (or
        of what the kernel's behaviour depends on), recorded with every
        measurement and model.
    imported_template_hash : str
        The ``template_hash`` of rows imported from another tool's logs
        (:mod:`costlearn.interop`), whose kernel is that tool's; the same as
        ``template_hash`` unless the family says otherwise.
    vendor_config_id : str or None
        :data:`VENDOR_CONFIG_ID` when the family has a vendor-library
        candidate (a call of cuBLAS through the framework), else None. Where
        it is a candidate it is the floor of every prediction
        (:mod:`costlearn.learn.holdout`).
    backends : tuple of str
        The backends (:data:`costlearn.collect.backends.BACKENDS` names) that
        measure the family on a device, in the order ``--device auto``
        tries them; each calls the family's hook for its kind of kernel
        (:meth:`render` for ``cuda`` and ``opencl``, :meth:`torch_launcher`
        for ``triton``). Empty: the family is only imported or replayed.

    Notes
    -----
    A new family is one folder ``costlearn/families/<name>/`` holding its
    config, rules, kernel and hooks, plus one line in
    :data:`costlearn.families.FAMILIES`; no module outside ``families/``
    imports it (``tests/test_imports.py``), and ``tests/families/test_families.py``
    runs the contract every family must keep.
    """

    name: str = ""
    config_type: type = object
    dtypes: tuple = ()
    layouts: tuple = ("NN",)
    epilogues: tuple = ("none",)
    rules: tuple = ()
    values: dict = {}
    param_feature_names: tuple = ()
    template_hash: str = ""
    imported_template_hash: str = ""
    vendor_config_id: str | None = None
    backends: tuple = ()

    @property
    def template_hashes(self) -> tuple:
        """The kernel templates whose rows are current: the family's own, and
        that of imported rows where it differs."""
        return tuple(dict.fromkeys(h for h in (self.template_hash, self.imported_template_hash or self.template_hash)))

    @abc.abstractmethod
    def all_configs(self) -> list:
        """Must return every config of :attr:`values` that is well formed
        (before device rules), in a fixed order."""

    @abc.abstractmethod
    def config_from_id(self, config_id: str):
        """Must parse a ``config_id``; ValueError naming it when malformed."""

    @abc.abstractmethod
    def check_device(self, config, spec, dtype: str) -> str | None:
        """Must return the first of :attr:`rules` ``config`` breaks on the
        DeviceSpec ``spec`` for inputs of ``dtype``, or None."""

    @abc.abstractmethod
    def describe(self, config, dtype: str, registers_per_thread: float | None = None) -> TileDescription:
        """Must map ``config`` (inputs of ``dtype``) to its TileDescription;
        ``registers_per_thread`` is the compiled count where known (None or
        NaN: the family's estimate)."""

    @abc.abstractmethod
    def param_features(self, configs) -> dict:
        """Must return :attr:`param_feature_names` -> float64 array of shape
        (len(configs),): the raw parameters as numbers (log2 of sizes, 0/1 of
        choices)."""

    @abc.abstractmethod
    def min_tile_caps(self, spec) -> tuple[int, int, int]:
        """Must return the smallest block tile (BM, BN, BK) caps the problem
        rule allows on ``spec`` (see :func:`costlearn.collect.space.tile_fits_problem`)."""

    # -- hooks a backend or tool calls; a family implements those it needs --
    def render(self, config, dialect: str, dtype: str, epilogue: str = "none") -> str:
        """Kernel source of ``config`` in ``dialect`` (``"cuda"`` or
        ``"opencl"``) for inputs of ``dtype``, fusing ``epilogue`` (one of
        :attr:`epilogues`; with a bias the kernel takes it, float32, as its
        last argument), for the source-compiling backends. Must be
        implemented by a family those backends measure.

        Raises
        ------
        NotImplementedError
            Here: this family generates no CUDA or OpenCL source.
        """
        raise NotImplementedError(f"the {self.name!r} family generates no {dialect} source; it is measured by "
                                  f"{list(self.backends) or 'no backend'}")

    def blocks(self, config, m: int, n: int) -> int:
        """Thread blocks on the 1-D launch grid of an (m, n) output, for the
        source-compiling backends (with :meth:`render`).

        Raises
        ------
        NotImplementedError
            Here: this family generates no CUDA or OpenCL source.
        """
        raise NotImplementedError(f"the {self.name!r} family generates no CUDA or OpenCL source")

    def torch_launcher(self, config, dtype: str, epilogue: str = "none"):
        """A callable ``launch(a, b, c, bias)`` running ``config`` on PyTorch
        CUDA tensors ``a`` (M, K), ``b`` (K, N) (logical views, any strides)
        into ``c`` (M, N), fusing ``epilogue`` with ``bias`` (N,) (None for
        ``"none"``), for the ``triton`` backend. Must be implemented by a
        family that backend measures; may raise ImportError when its
        library is missing.

        Raises
        ------
        NotImplementedError
            Here: this family has no PyTorch launcher.
        """
        raise NotImplementedError(f"the {self.name!r} family has no PyTorch launcher; it is measured by "
                                  f"{list(self.backends) or 'no backend'}")

    def overhead_config(self):
        """The config a backend that has no empty kernel of its own times
        on a 1x1x1 problem to measure its launch overhead: by default the
        first of :meth:`all_configs` with the smallest block tile."""
        tiles = [c for c in self.all_configs() if c.config_id != VENDOR_CONFIG_ID]
        return min(tiles, key=lambda c: int(np.prod(self.block_tile(c))))

    def shrunk_variants(self, config) -> list:
        """The configs a tool derives from ``config`` for problems smaller
        than its block tile, each with the extents it is derived for, so a
        model trained on a tool's logs can answer with what that tool would
        run on a small problem (the default: none; the family's own
        collection measures every config it serves).

        Returns
        -------
        list of (config, (int or None, int or None, int or None))
            A variant and, per extent (M, N, K), the largest extent it is
            derived for (None where that extent is not shrunk).
        """
        return []

    def registers_tool(self, spec) -> str | None:
        """The compiler command :meth:`compiled_registers` runs for
        ``spec``'s device, as a user would type it (``"nvcc -arch=sm_90
        -Xptxas -v"``); None (the default) when the family has no
        register-count hook for that device."""
        return None

    def compiled_registers(self, configs, spec) -> dict:
        """Registers per thread of each config compiled for ``spec``'s
        device by :meth:`registers_tool` (config_id -> int), where a family
        has that hook (tens of seconds for a pool).

        Raises
        ------
        NotImplementedError
            Here: the family has no register-count hook.
        CompilerUnavailable
            Where implemented, when the compiler is not installed.
        """
        raise NotImplementedError(f"the {self.name!r} family has no register-count hook")

    def block_tile(self, config) -> tuple[int, int, int]:
        """(BM, BN, BK) of ``config``: the part of the description the
        problem rule, pool stratification and dispatch need."""
        d = self.describe(config, self.dtypes[0])
        return d.block_m, d.block_n, d.block_k

    def check_problem(self, problem) -> None:
        """Raise ValueError if this family cannot run ``problem``'s dtype,
        layout or epilogue (the message lists what it supports)."""
        self.check_dtype(problem.dtype, problem.layout)
        self.check_epilogue(problem.epilogue)

    def check_epilogue(self, epilogue: str) -> None:
        """Raise ValueError if this family's kernels do not fuse
        ``epilogue``; the message lists those they do."""
        if epilogue not in self.epilogues:
            raise ValueError(f"epilogue={epilogue!r}: the {self.name!r} family fuses {list(self.epilogues)}")

    def check_dtype(self, dtype: str, layout: str | None = None) -> None:
        """Raise ValueError if this family does not run ``dtype`` (or, when
        given, ``layout``); the message lists what it supports."""
        if dtype not in self.dtypes:
            raise ValueError(f"dtype={shown(dtype)}: the {self.name!r} family supports {list(self.dtypes)}")
        if layout is not None and layout not in self.layouts:
            raise ValueError(f"layout={shown(layout)}: the {self.name!r} family supports {list(self.layouts)}")

    def space_hash(self) -> str:
        """Short hash of the value ranges and rules (stored with models)."""
        return hashlib.sha256(repr((self.name, self.values, self.rules, self._space_constants())).encode()
                              ).hexdigest()[:12]

    def _space_constants(self) -> tuple:
        """Constants of the rules a subclass wants in :meth:`space_hash`."""
        return ()
