"""Hooks that put a ``triton_mm`` cost model into Triton's autotuner.

Two entry points:

- :func:`prune_configs` builds an ``early_config_prune`` function for
  ``@triton.autotune(..., prune_configs_by={"early_config_prune": fn})``: at
  the first call of each autotune key Triton hands it the kernel's config
  list and named arguments; it reads M, N, K, the dtype and the layout from
  them, scores every config with the trained model and keeps the ``top_k``
  predicted fastest, so Triton benchmarks only those.
- :func:`top_configs` gives the model's own best Triton configs for a
  problem, as ``triton.Config`` objects to put in ``@triton.autotune(configs=...)``.

How Triton calls the hook (Triton 3.x, ``triton/runtime/autotuner.py``):
``Autotuner.run`` sets ``self.nargs = dict(zip(self.arg_names, args))`` (the
arguments passed by position) and, for a key not yet tuned,
``Autotuner.prune_configs(kwargs)`` calls
``early_config_prune(self.configs, self.nargs, **kwargs)`` (``kwargs``: the
arguments passed by keyword) and benchmarks the configs it returns (at least
one). Triton 2.x calls ``early_config_prune(configs, nargs)``; the hook
accepts both.

Triton caches the chosen config per autotune key: the key names in
``key=[...]`` plus the dtypes of the tensor arguments. Strides are not in it,
so a kernel called with several layouts at the same M, N, K should put its
stride arguments in ``key`` (e.g. ``key=["M", "N", "K", "stride_am",
"stride_bk"]``), or the hook is not asked again for the second layout.

Neither function imports Triton or PyTorch to read the arguments: tensors are
recognised by their ``dtype`` attribute and ``stride()`` method, dtypes by
``str(tensor.dtype)``.
"""
from __future__ import annotations

import numbers
import operator
import warnings
from collections.abc import Mapping

import numpy as np

from costlearn.core.device import DeviceSpec
from costlearn.core.dtypes import TORCH_DTYPES
from costlearn.serve.predictor import load_predictor
from costlearn.serve.tuning import open_tuning_db, read_entry
from costlearn.core.problem import LAYOUTS, layout_letter
from costlearn.core.checks import check_int
from costlearn.families import VENDOR_CONFIG_ID, get_family
from costlearn.interop.tool_names import from_tool

__all__ = ["prune_configs", "top_configs", "ConfigStandIn", "DEFAULT_PARAM_NAMES", "DEFAULT_GROUP_M",
           "TORCH_DTYPES", "tensor_dtype", "tensor_layout"]

FAMILY = "triton_mm"

DEFAULT_PARAM_NAMES = {
    "block_m": ("BLOCK_M", "BLOCK_SIZE_M"),
    "block_n": ("BLOCK_N", "BLOCK_SIZE_N"),
    "block_k": ("BLOCK_K", "BLOCK_SIZE_K"),
    "group_m": ("GROUP_M", "GROUP_SIZE_M"),
}
"""Names of the meta-parameters (``triton.Config.kwargs`` keys) read for each
:class:`~costlearn.families.triton_mm.TritonMMConfig` field, tried in order:
Inductor's and Triton-kernels' spelling (``BLOCK_M``), and the matmul
tutorial's (``BLOCK_SIZE_M``). :func:`top_configs` writes the first."""

DEFAULT_GROUP_M = 8
"""``group_m`` of a config that has no group meta-parameter (Inductor's
``GROUP_M`` and the tutorial's ``GROUP_SIZE_M`` are both 8)."""


_TRITON_MM_DTYPES = get_family(FAMILY).dtypes


class ConfigStandIn:
    """What :func:`top_configs` returns when Triton is not installed: a plain
    object with the attributes of a ``triton.Config`` that the autotuner and
    this module read, so code can be written and tested without Triton. It
    is not a ``triton.Config``; Triton's autotuner needs the real class.

    Parameters
    ----------
    kwargs : dict of str to int
        Meta-parameters (``BLOCK_M``, ...), as ``triton.Config.kwargs``.
    num_warps : int
        Warps per program.
    num_stages : int
        Software-pipeline stages.
    num_ctas : int
        CTAs per cluster (1: no cluster).
    maxnreg : int, optional
        Register cap per thread (None: none).
    pre_hook : callable, optional
        As ``triton.Config.pre_hook``.
    """

    __slots__ = ("kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg", "pre_hook")

    def __init__(self, kwargs, num_warps: int = 4, num_stages: int = 3, num_ctas: int = 1, maxnreg=None,
                 pre_hook=None):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook

    def all_kwargs(self) -> dict:
        """The meta-parameters and the launch options in one dict, as
        ``triton.Config.all_kwargs`` (options that are None left out)."""
        opts = dict(num_warps=self.num_warps, num_ctas=self.num_ctas, num_stages=self.num_stages,
                    maxnreg=self.maxnreg)
        return {**self.kwargs, **{k: v for k, v in opts.items() if v is not None}}

    def __repr__(self) -> str:
        kw = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"ConfigStandIn({{{kw}}}, num_warps={self.num_warps}, num_stages={self.num_stages})"


# -- argument checks ---------------------------------------------------------

def _check_device(device):
    if device is not None and not isinstance(device, (str, DeviceSpec)):
        raise TypeError(f"device={device!r} ({type(device).__name__}); must be a device folder name of the "
                        "model store (e.g. 'a100'), a DeviceSpec, or None for the only device with a triton_mm model")
    return device


def _check_optional(name: str, value, allowed, optional: bool, what: str, none_means: str):
    """``value`` if it is one of ``allowed`` (or None where ``optional``),
    else ValueError: ``name=value; what`` and, where optional, what None
    means."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}={value!r}; {what}" + (none_means if optional else ""))
    return value


def _check_dtype(dtype, optional: bool):
    return _check_optional("dtype", dtype, _TRITON_MM_DTYPES, optional,
                           f"the triton_mm family supports {list(_TRITON_MM_DTYPES)}",
                           " (or None: read it from the first tensor argument)")


def _check_layout(layout, optional: bool):
    return _check_optional("layout", layout, LAYOUTS, optional,
                           f"allowed: {list(LAYOUTS)} (A then B: N row-major, T column-major)",
                           " or None: read it from the strides of A and B")


def _names_tuple(what: str, value) -> tuple:
    if isinstance(value, str):
        value = (value,)
    try:
        names = tuple(value)
    except TypeError:
        names = None
    if not names or not all(isinstance(v, str) and v for v in names):
        raise TypeError(f"{what}={value!r}; must be a meta-parameter name (str) or a non-empty sequence of names")
    return names


def _param_names(param_names) -> dict:
    """DEFAULT_PARAM_NAMES updated with ``param_names`` (checked): field ->
    tuple of names (``group_m`` may map to ``()``: no group parameter)."""
    out = dict(DEFAULT_PARAM_NAMES)
    if param_names is None:
        return out
    if not isinstance(param_names, Mapping):
        raise TypeError(f"param_names={param_names!r} ({type(param_names).__name__}); must be a dict from "
                        f"{list(DEFAULT_PARAM_NAMES)} to a meta-parameter name or a sequence of names, or None")
    for field, value in param_names.items():
        if field not in DEFAULT_PARAM_NAMES:
            raise ValueError(f"param_names key {field!r}; allowed: {list(DEFAULT_PARAM_NAMES)}")
        if value is None and field == "group_m":
            out[field] = ()
            continue
        if value is None:
            raise ValueError(f"param_names[{field!r}]=None; every block size needs a meta-parameter name "
                             "(only 'group_m' may be None: the kernel has no group parameter)")
        out[field] = _names_tuple(f"param_names[{field!r}]", value)
    return out


def _check_shape_args(shape_args) -> tuple:
    if isinstance(shape_args, str):
        names = None
    else:
        try:
            names = tuple(shape_args)
        except TypeError:
            names = None
    if names is None or len(names) != 3 or not all(isinstance(v, str) and v for v in names):
        raise TypeError(f"shape_args={shape_args!r}; must be three argument names (M, N, K), e.g. ('M', 'N', 'K')")
    return names


def _check_tensor_args(tensor_args):
    if tensor_args is None:
        return None
    names = None if isinstance(tensor_args, str) else tuple(tensor_args) if hasattr(tensor_args, "__iter__") \
        else None
    if names is None or len(names) != 2 or not all(isinstance(v, str) and v for v in names):
        raise TypeError(f"tensor_args={tensor_args!r}; must be the names of the A and B arguments, e.g. "
                        "('a_ptr', 'b_ptr'), or None for the first two tensor arguments")
    return names


# -- reading a kernel call ---------------------------------------------------

def _describe(config) -> str:
    s = str(config)
    return s if len(s) <= 200 else s[:197] + "..."


def _is_tensor(value) -> bool:
    return hasattr(value, "dtype") and callable(getattr(value, "stride", None))


def tensor_dtype(tensor) -> str:
    """The model dtype name of a tensor's element type.

    Parameters
    ----------
    tensor : tensor-like
        Any object with a ``dtype`` attribute (``torch.Tensor``); matched on
        ``str(tensor.dtype)``, so PyTorch is not imported.

    Returns
    -------
    {"float16", "bfloat16", "float32"}
        ``float32`` tensors give ``"float32"``; TF32 is the caller's to say
        (``dtype="tfloat32"``).

    Raises
    ------
    ValueError
        If the dtype is not one of :data:`TORCH_DTYPES` (the message names it
        and the allowed ones).
    """
    s = str(getattr(tensor, "dtype", None))
    name = TORCH_DTYPES.get(s) or (s if s in TORCH_DTYPES.values() else None)
    if name is None:
        raise ValueError(f"tensor dtype {s}: no triton_mm model serves it; allowed: {list(TORCH_DTYPES)} "
                         "(a float32 kernel using TF32: pass dtype='tfloat32')")
    return name


def tensor_layout(a, b) -> str | None:
    """The layout of C = A @ B from the strides of A [.., M, K] and B [.., K, N].

    Parameters
    ----------
    a, b : tensor-like
        Objects with a ``stride()`` method (``torch.Tensor``), of at least 2
        dimensions; the last two are the matrix.

    Returns
    -------
    str or None
        Two letters, A then B: ``N`` when the matrix is row-major (last stride
        1; checked first, as Inductor's logs do, so a matrix with both strides
        1 is ``N``), ``T`` when it is column-major (the stride before it is
        1). None when either matrix is neither (a strided view).
    """
    la, lb = layout_letter(a.stride()), layout_letter(b.stride())
    return None if la is None or lb is None else la + lb


def _extent(name: str, value, shape_args) -> int:
    if isinstance(value, bool):
        raise TypeError(f"kernel argument {name}={value!r} (bool); shape_args={shape_args} must name the "
                        "integer M, N, K arguments")
    if isinstance(value, numbers.Integral):
        return int(value)
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"kernel argument {name}={value!r} ({type(value).__name__}); shape_args={shape_args} "
                        "must name the integer M, N, K arguments") from None


def _tensors(args: dict, tensor_args) -> tuple:
    """(A, B): the named arguments, or the first two tensor-like ones (None
    where there are fewer)."""
    if tensor_args is not None:
        missing = [n for n in tensor_args if n not in args]
        if missing:
            raise ValueError(f"tensor_args={tensor_args}: the kernel call has no argument {missing[0]!r}; its "
                             f"arguments are {list(args)}")
        return tuple(args[n] for n in tensor_args)
    found = [v for v in args.values() if _is_tensor(v)][:2]
    return tuple(found + [None] * (2 - len(found)))


def _to_mm_config(config, index: int, names: dict):
    kw = getattr(config, "kwargs", None)
    if not isinstance(kw, Mapping):
        raise TypeError(f"config #{index} ({_describe(config)}) has no kwargs dict; expected a triton.Config "
                        "(or an object with kwargs, num_warps and num_stages)")
    vals = {}
    for field, options in names.items():
        hit = next((n for n in options if n in kw), None)
        if hit is None:
            if field == "group_m":
                vals[field] = DEFAULT_GROUP_M
                continue
            raise ValueError(f"config #{index} ({_describe(config)}) has no {field} meta-parameter: looked for "
                             f"{list(options)} in its kwargs {sorted(map(str, kw))}; name the kernel's parameter "
                             f"with param_names={{{field!r}: 'NAME'}}")
        vals[field] = kw[hit]
    try:
        return from_tool(FAMILY, "triton", dict(vals, num_warps=getattr(config, "num_warps", None),
                                                num_stages=getattr(config, "num_stages", None)))
    except (TypeError, ValueError) as e:
        raise type(e)(f"config #{index} ({_describe(config)}) is not a triton_mm config the model can score: "
                      f"{e}") from None


# -- public API --------------------------------------------------------------

def prune_configs(top_k: int = 4, *, device, dtype: str | None = None, layout: str | None = None, models_dir=None,
                  shape_args=("M", "N", "K"), param_names=None, tensor_args=None, tuning_db=None):
    """An ``early_config_prune`` function for ``@triton.autotune`` that keeps
    the ``top_k`` configs a ``triton_mm`` model predicts fastest.

    Parameters
    ----------
    top_k : int
        Configs to keep, >= 1 (all of them when the kernel has fewer).
    device : str, DeviceSpec or None
        Model to use: a device folder of the model store (``"a100"``), a
        DeviceSpec whose slug names one, or None for the only device with a
        ``triton_mm`` model of the dtype (:func:`costlearn.serve.predictor.load_predictor`).
    dtype : {"float16", "bfloat16", "float32", "tfloat32"}, optional
        The model's dtype. Default: read at each call from the first tensor
        argument (:func:`tensor_dtype`; float32 tensors give ``"float32"``,
        so a TF32 kernel passes ``"tfloat32"`` here).
    layout : {"NN", "NT", "TN", "TT"}, optional
        Fixed layout (A then B). Default: read at each call from the strides
        of A and B (:func:`tensor_layout`); strides that are neither row- nor
        column-major give the model's first layout, and so does a layout the
        model was not trained on (with a RuntimeWarning).
    models_dir : path, optional
        Model store (default :func:`costlearn.model.store.default_store`).
    shape_args : sequence of 3 str
        Names of the kernel's M, N, K arguments.
    param_names : dict, optional
        ``{"block_m": ..., "block_n": ..., "block_k": ..., "group_m": ...}``:
        for each field the ``Config.kwargs`` name, or a sequence of names to
        try in order; missing keys keep :data:`DEFAULT_PARAM_NAMES`.
        ``"group_m": None`` means the kernel has no group parameter (group
        :data:`DEFAULT_GROUP_M` is assumed, as it is for a config without one).
    tensor_args : pair of str, optional
        Names of the A and B arguments. Default: the first two tensor
        arguments (objects with ``dtype`` and ``stride()``) in call order.
    tuning_db : path, str or tuning database, optional
        A tuning database (a file, or a ``postgresql://`` URL a fleet
        shares; :func:`costlearn.serve.tuning.open_tuning_db`): where it
        holds a measured winner for the problem on the model's device class
        and that config is among the kernel's, it is returned alone (Triton
        then launches it without timing the others). A database that cannot
        be read costs the lookup, with a warning, never the call.

    Returns
    -------
    callable
        ``fn(configs, named_args, **kwargs) -> list``: ``configs`` a list of
        C ``triton.Config``; ``named_args`` the dict of arguments passed by
        position and ``kwargs`` those passed by keyword (both are searched).
        Returns the same Config objects, ``min(top_k, C)`` of them, fastest
        predicted first (ties keep the given order). Configs differing only in
        what the model does not see (other meta-parameters, ``num_ctas``,
        ``maxnreg``, ``pre_hook``) score the same; they are returned untouched.
        Configs the model's device rules reject (shared memory, threads,
        registers) score ``inf`` and come last. Where the model is unsure
        (the problem is out of distribution, or no config is predicted faster
        than the one listed first by the artifact's calibrated margin:
        :meth:`~costlearn.serve.predictor.Predictor.choose_among`), the config listed
        first comes first (unless the device rules reject it), the rest in
        predicted order. An empty problem (an extent 0) returns the first
        ``top_k`` configs unranked; a negative extent raises ValueError.

    Raises
    ------
    TypeError
        Here, if an argument has the wrong type.
    ValueError
        Here, if ``top_k`` < 1 or the dtype, layout or a ``param_names`` key is
        unknown. At call time (from ``fn``): if a config lacks a block-size
        meta-parameter (the message names the config and the names looked
        for) or holds values no TritonMMConfig takes; a shape argument or a
        tensor is missing; the tensor dtype is not served (the message lists
        the allowed ones); an explicit ``layout`` is not one the model was
        trained on; or there is no model (as :func:`~costlearn.serve.predictor.load_predictor`).

    Notes
    -----
    The model is loaded once per (device, dtype, models_dir) through
    :func:`~costlearn.serve.predictor.load_predictor`'s process cache, at the first
    call, not when the hook is built; every later call is a cache lookup
    and one :meth:`~costlearn.serve.predictor.Predictor.score_configs`.

    Examples
    --------
    >>> @triton.autotune(configs=CONFIGS, key=["M", "N", "K"],                    # doctest: +SKIP
    ...                  prune_configs_by={"early_config_prune": prune_configs(4, device="a100")})
    ... @triton.jit
    ... def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, ...): ...
    """
    top_k = check_int("top_k", top_k, 1)
    device = _check_device(device)
    dtype = _check_dtype(dtype, optional=True)
    layout = _check_layout(layout, optional=True)
    shape_args = _check_shape_args(shape_args)
    names = _param_names(param_names)
    tensor_args = _check_tensor_args(tensor_args)

    def early_config_prune(configs, named_args, /, **kwargs):
        configs = list(configs)
        if not configs:
            return configs
        mapped = [_to_mm_config(c, i, names) for i, c in enumerate(configs)]
        args = {**named_args, **kwargs}
        extents = []
        for name in shape_args:
            if name not in args:
                raise ValueError(f"the kernel call has no argument {name!r} (shape_args={shape_args}); its "
                                 f"arguments are {list(args)}")
            extents.append(_extent(name, args[name], shape_args))
        m, n, k = extents
        if min(extents) < 0:
            raise ValueError(f"kernel arguments {dict(zip(shape_args, extents))}: an extent is negative")
        if min(extents) == 0:
            return configs[:top_k]
        a, b = (None, None) if dtype is not None and layout is not None else _tensors(args, tensor_args)
        if dtype is not None:
            dt = dtype
        elif a is None or not hasattr(a, "dtype"):
            raise ValueError(f"no tensor argument to read the dtype from (arguments: {list(args)}); pass "
                             f"dtype= to prune_configs (allowed: {list(_TRITON_MM_DTYPES)})")
        else:
            dt = tensor_dtype(a)
        pred = load_predictor(device, FAMILY, dt, models_dir)
        lay = layout
        if lay is None:
            found = tensor_layout(a, b) if _is_tensor(a) and _is_tensor(b) else None
            lay = found if found in pred.layouts else pred.layouts[0]
            if found is not None and found != lay:
                warnings.warn(f"layout {found} (from the strides of A and B): the {pred.source} was trained on "
                              f"layouts {list(pred.layouts)}; ranking as {lay}", RuntimeWarning, stacklevel=2)
        problem = pred.problem(m, n, k, lay)
        if tuning_db is not None:
            hit, _ = read_entry(open_tuning_db(tuning_db), problem, FAMILY, pred.spec.slug,
                                pred.artifact.family.template_hash, spec=pred.spec)
            ids = [c.config_id for c in mapped]
            if hit is not None and hit.chosen_by == "measured" and hit.config.config_id in ids:
                return [configs[ids.index(hit.config.config_id)]]
        times = pred.score_configs(problem, mapped)
        first, _, _ = pred.choose_among(problem, mapped, times)     # unsure: the user's first config stays
        order = [first] + [i for i in np.argsort(times, kind="stable").tolist() if i != first]
        return [configs[i] for i in order[:top_k]]

    early_config_prune.__doc__ = (f"Keep the {top_k} configs the triton_mm model of device={device!r} predicts "
                                  "fastest; see costlearn.interop.triton_autotune.prune_configs.")
    return early_config_prune


def _config_class():
    try:
        import triton
        return triton.Config
    except ImportError:
        return ConfigStandIn


def top_configs(M, N, K, *, device, dtype: str, layout: str = "NN", top_k: int = 5, models_dir=None,
                param_names=None) -> list:
    """The model's ``top_k`` predicted fastest Triton configs for one problem,
    as configs for ``@triton.autotune(configs=...)``.

    Parameters
    ----------
    M, N, K : int
        Problem extents, C[M,N] = op(A)[M,K] @ op(B)[K,N], each >= 1.
    device : str, DeviceSpec or None
        As in :func:`prune_configs`.
    dtype : {"float16", "bfloat16", "float32", "tfloat32"}
        The model's dtype.
    layout : {"NN", "NT", "TN", "TT"}
        One the model was trained on.
    top_k : int
        Configs wanted, >= 1; fewer come back when the model has fewer
        Triton candidates.
    models_dir : path, optional
        Model store (default :func:`costlearn.model.store.default_store`).
    param_names : dict, optional
        Spelling of the meta-parameters, as in :func:`prune_configs`; the
        first name of each field is written (default ``BLOCK_M``,
        ``BLOCK_N``, ``BLOCK_K``, ``GROUP_M``). ``"group_m": None`` leaves the
        group out.

    Returns
    -------
    list of triton.Config
        Fastest predicted first; the model's vendor candidate (cuBLAS) is
        skipped. ``kwargs`` holds the block sizes and group, ``num_warps`` and
        ``num_stages`` are set, the rest are Triton's defaults. Without
        Triton installed, :class:`ConfigStandIn` objects with the same
        attributes.

    Raises
    ------
    TypeError
        If an extent is not an integer or an argument has the wrong type.
    ValueError
        If an extent is < 1, ``top_k`` < 1, the dtype or layout is unknown
        or not served by the model, a ``param_names`` key is unknown, or
        there is no model (as :func:`~costlearn.serve.predictor.load_predictor`,
        which lists the models present).
    """
    top_k = check_int("top_k", top_k, 1)
    device = _check_device(device)
    dtype = _check_dtype(dtype, optional=False)
    layout = _check_layout(layout, optional=False)
    names = _param_names(param_names)
    pred = load_predictor(device, FAMILY, dtype, models_dir)
    problem = pred.problem(M, N, K, layout)
    ask = min(top_k + 1, len(pred.configs))          # one more: the vendor call may be among them
    picks = [c for c, _ in pred.predict(problem, ask).top_k if c.config_id != VENDOR_CONFIG_ID][:top_k]
    make = _config_class()
    out = []
    for c in picks:
        kw = {names["block_m"][0]: c.block_m, names["block_n"][0]: c.block_n, names["block_k"][0]: c.block_k}
        if names["group_m"]:
            kw[names["group_m"][0]] = c.group_m
        out.append(make(kw, num_warps=c.num_warps, num_stages=c.num_stages))
    return out
