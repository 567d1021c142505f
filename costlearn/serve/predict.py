"""The prediction API: :func:`predict_best` and :func:`predict_many`, the
functions behind ``costlearn.predict_best`` (design.md, "Predictor").

It sits above both the :class:`~costlearn.serve.predictor.Predictor`
(ranking, the OOD verdict, the vendor policy) and filter-then-measure
(:mod:`costlearn.serve.tuning`, which loads the collection loop and the
backends, imported only where a call measures or reads a tuning database):
a compiler that only asks loads neither, nor pandas. The names of the predictor and the
model store are re-exported here for existing callers.
"""
from __future__ import annotations

import time

import numpy as np

from costlearn.core.device import DeviceSpec
from costlearn.core.problem import MAX_EXTENT, Problem
from costlearn.core.checks import check_instance, check_int
from costlearn.families import get_family
from costlearn.model.store import default_store, resolve_model, store_key
from costlearn.serve.prediction import Prediction
from costlearn.serve.predictor import PREDICTORS, Predictor, clear_cache, load_predictor

__all__ = ["Prediction", "Predictor", "predict_best", "predict_many", "clear_cache", "default_store",
           "resolve_model", "load_predictor"]


_monotonic = time.monotonic

_UNKEYED = object()
"""The store key of a ``models_dir`` that has none (a str subclass, a wrong type): such a call is not plain."""


def _store(models_dir):
    """``models_dir``'s store key (:func:`costlearn.model.store.store_key`:
    a relative path's names the working folder) where it is None, a str (not
    a subclass, whose ``__eq__`` is its own) or a path; else :data:`_UNKEYED`
    (the long way then says what is wrong, in the order its checks run)."""
    if isinstance(models_dir, str) and type(models_dir) is not str:
        return _UNKEYED
    try:
        return store_key(models_dir)
    except Exception:                           # (a path's own __fspath__ may raise anything)
        return _UNKEYED


def _loaded(device, family: str, dtype: str, models_dir):
    """The Predictor this process loaded for these arguments, or None (then
    :func:`load_predictor` finds it): looked up by the store's key
    (:func:`_store`) where ``device`` is None or a str."""
    if device is not None and type(device) is not str:
        return None
    store = _store(models_dir)
    return None if store is _UNKEYED else PREDICTORS.get(((device, family, dtype), store))


def _plain_shapes(problems) -> list | None:
    """``problems`` as (m, n, k, layout, epilogue) tuples where each is a
    tuple or list of 3 to 5 items, int extents in [1, 2**31 - 1] and str
    layout and epilogue (defaults ``"NN"``, ``"none"``); None where any is
    not (:func:`predict_many` then checks each, naming its position)."""
    out = []
    for t in problems:
        if type(t) is not tuple and type(t) is not list:
            return None
        size = len(t)
        if size == 3:
            s = (t[0], t[1], t[2], "NN", "none")
        elif size == 4:
            s = (t[0], t[1], t[2], t[3], "none")
        elif size == 5:
            s = tuple(t)
        else:
            return None
        m, n, k, layout, epilogue = s
        if not (type(m) is int and type(n) is int and type(k) is int and 0 < m <= MAX_EXTENT and 0 < n <= MAX_EXTENT
                and 0 < k <= MAX_EXTENT and type(layout) is str and type(epilogue) is str):
            return None
        out.append(s)
    return out


def _family_runs(fam, dtype: str, kinds) -> bool:
    """Whether family ``fam`` runs ``dtype`` with each (layout, epilogue)
    of ``kinds`` (:meth:`~costlearn.families.base.KernelFamily.check_problem`'s
    checks, without raising)."""
    try:
        for layout, epilogue in kinds:
            fam.check_dtype(dtype, layout)
            fam.check_epilogue(epilogue)
    except ValueError:
        return False
    return True


def predict_best(M, N, K, dtype: str = "float32", device=None, *, family: str = "gemm", layout: str = "NN",
                 top_k: int = 5, models_dir=None, running_on: DeviceSpec | None = None, measure_top_k: int = 0,
                 backend=None, tuning_db=None, epilogue: str = "none") -> Prediction:
    """Predict the fastest config for C[M,N] = op(A)[M,K] @ op(B)[K,N].

    A problem seen before in the process is answered from its predictor's
    answer cache; an unseen one is one ranking, a deep model's through its shortlist table
    (:mod:`costlearn.model.shortlist`); ``python -m benchmarks.predict`` measures
    both. A model a retrain replaced is served within a second or so
    (:meth:`costlearn.model.store.LoadedModels.watch`). :func:`predict_many` answers
    many problems in one call.

    Parameters
    ----------
    M, N, K : int
        Problem extents, each >= 1 (Python or numpy integers; not bool or
        float).
    dtype : str
        Element type (:data:`costlearn.core.dtypes.DTYPES`), one the model exists for.
    device : str or DeviceSpec, optional
        Model to use: a device folder name under the models directory (e.g.
        ``"h200"``), or a DeviceSpec whose slug names it. Default: the only
        device with a model of this family and dtype.
    family : str
        Kernel family (:data:`costlearn.families.FAMILIES`).
    layout : str
        ``NN``, ``NT``, ``TN`` or ``TT`` (A then B: N row-major, T
        column-major); one the model was trained on.
    epilogue : str
        What the fused kernel computes after A @ B: ``none``, ``bias`` (a
        length-N vector added to every row), ``bias_relu`` or ``bias_gelu``
        (tanh form) (:data:`costlearn.core.problem.EPILOGUES`); one the model was
        trained on.
    top_k : int
        Length of :attr:`Prediction.top_k`.
    models_dir : path, optional
        Model store; default :func:`default_store` (``$COSTLEARN_MODELS``,
        read at the first call, or the source tree's ``models/``). A
        relative path is the working folder's at each call (a ``getcwd``);
        a path object's ``__fspath__`` may be read more than once and must
        give the same path each time.
    running_on : DeviceSpec, optional
        The device the kernel will run on; a different device name than the
        model's is an OOD reason.
    measure_top_k : int
        0 (default): predict only. k >= 1: *filter, then measure* the model's
        top k on ``backend`` (the local device by default) and return the
        fastest, recorded in the tuning database (:mod:`costlearn.serve.tuning`):
        the top k tile configs, and the vendor library beside them where the
        family has one.
    backend : costlearn.collect.backends.Backend, optional
        Where to measure; ``get_backend("auto")`` by default. Its device is
        ``running_on`` when that is None.
    tuning_db : path or costlearn.serve.tuning_db.TuningDB, optional
        Tuning database to consult first and write to (with
        ``measure_top_k`` the default database is used when None).

    Returns
    -------
    Prediction

    Raises
    ------
    TypeError
        If an extent is not an integer (bool and float included), or an
        argument has the wrong type.
    ValueError
        If an extent is < 1 or >= 2**31, the dtype, layout, epilogue or family
        is unknown or not served, ``top_k`` < 1, ``measure_top_k`` < 0, or there
        is no model for ``device`` (the message lists the models present).
    RuntimeError
        If ``measure_top_k`` is set and none of the configs measured correctly.
    costlearn.model.artifact_layout.ArtifactError
        If the model does not match this code.

    Examples
    --------
    >>> import costlearn
    >>> p = costlearn.predict_best(1, 4096, 4096, device="h200")  # doctest: +SKIP
    >>> p.config.config_id, p.time_us, p.ood                      # doctest: +SKIP
    """
    if _monotonic() >= PREDICTORS.next_watch_s:  # the staleness rule: a model a retrain replaced is dropped
        PREDICTORS.watch()
    # Hot path: plain ints and strs, no options: the loaded predictor by the names as given (the store by its key),
    # then its answer cache (a problem this process has answered is one more lookup)
    store = models_dir if models_dir is None else _store(models_dir)
    pred = None
    if type(M) is int and type(N) is int and type(K) is int and type(top_k) is int \
            and type(measure_top_k) is int and not measure_top_k and running_on is None and backend is None \
            and tuning_db is None and type(layout) is str and type(epilogue) is str and type(dtype) is str \
            and type(family) is str and (device is None or type(device) is str) and store is not _UNKEYED:
        # (an unseen problem of a loaded predictor needs no store lookup either: path parsing is slow)
        pred = PREDICTORS.get(((device, family, dtype), store))
        if pred is not None and 0 < M <= MAX_EXTENT and 0 < N <= MAX_EXTENT and 0 < K <= MAX_EXTENT \
                and top_k >= 1 and dtype == pred.dtype and layout in pred.layouts and epilogue in pred.epilogues:
            return pred.cached((M, N, K, layout, top_k, epilogue)) or pred.fresh(M, N, K, layout, epilogue, top_k)
    problem = Problem(M, N, K, dtype, layout, epilogue)
    top_k = check_int("top_k", top_k, 1)
    measure_top_k = check_int("measure_top_k", measure_top_k, 0)
    if running_on is not None:
        check_instance("running_on", running_on, DeviceSpec, "a DeviceSpec (e.g. costlearn.preset('h200')) or None")
    if backend is not None and not hasattr(backend, "spec"):
        raise TypeError(f"backend={backend!r}; must be a costlearn Backend "
                        "(costlearn.collect.backends.get_backend) or None")
    get_family(family).check_problem(problem)
    if pred is None:
        pred = load_predictor(device, family, dtype, models_dir)
    if measure_top_k or tuning_db is not None:
        from costlearn.serve.tuning import tune     # the collection loop and backends: loaded to measure only
        return tune(pred, problem, top_k=top_k, measure_top_k=measure_top_k, running_on=running_on,
                    backend=backend, tuning_db=tuning_db)
    return pred.predict(problem, top_k, running_on)


def predict_many(problems, dtype: str = "float32", device=None, *, family: str = "gemm", top_k: int = 5,
                 models_dir=None, running_on: DeviceSpec | None = None) -> list:
    """:func:`predict_best` for many problems in one call, for a compiler
    that knows all its shapes at once (a graph's fused groups).

    The problems not answered before in the process are ranked together:
    one C call per layout among them (:meth:`Predictor.predict_many`);
    ``python -m benchmarks.predict`` measures a batch.

    Parameters
    ----------
    problems : sequence of tuple, or ndarray of int, shape (n, 3)
        ``(M, N, K)``, ``(M, N, K, layout)`` or ``(M, N, K, layout,
        epilogue)`` per problem (the layout is ``"NN"`` and the epilogue
        ``"none"`` where not given), or :class:`~costlearn.core.problem.Problem`
        objects of ``dtype``.
    dtype, device, family, top_k, models_dir, running_on
        As :func:`predict_best`, for every problem.

    Returns
    -------
    list of Prediction
        In the order of ``problems``.

    Raises
    ------
    TypeError
        If ``problems`` is not a sequence of tuples (a string, a mapping, a
        generator) or an integer array of shape (n, 3), or an extent is not
        an integer (the message names the problem's position).
    ValueError
        As :func:`predict_best`, naming the problem's position.

    Examples
    --------
    >>> import costlearn
    >>> preds = costlearn.predict_many([(8, 4096, 4096), (8, 4096, 11008, "NT")], device="h200")  # doctest: +SKIP
    >>> [p.config.config_id for p in preds]                                                        # doctest: +SKIP
    """
    if isinstance(problems, np.ndarray):
        if problems.ndim != 2 or problems.shape[1] not in (3, 4) or not np.issubdtype(problems.dtype, np.integer):
            raise TypeError(f"problems: an array of shape {problems.shape} dtype {problems.dtype}; an array must be "
                            "integers of shape (n, 3): M, N, K per row")
        problems = problems.tolist()
    if isinstance(problems, (str, bytes, dict)) or not hasattr(problems, "__len__") \
            or not hasattr(problems, "__getitem__"):
        raise TypeError(f"problems={problems!r}; must be a list of (M, N, K), (M, N, K, layout) or (M, N, K, layout, "
                        "epilogue) tuples "
                        "(or an integer array of shape (n, 3))")
    PREDICTORS.watch_due()
    fam = get_family(family)
    shapes = _plain_shapes(problems)
    if shapes is not None:                      # plain tuples of ints in range: no Problem where none is needed
        kinds = {s[3:] for s in shapes}
        if type(dtype) is str and type(top_k) is int and top_k >= 1 and running_on is None \
                and _family_runs(fam, dtype, kinds):
            pred = _loaded(device, family, dtype, models_dir) or load_predictor(device, family, dtype, models_dir)
            if dtype == pred.dtype and all(lay in pred.layouts and epi in pred.epilogues for lay, epi in kinds):
                return pred.predict_shapes(shapes, top_k)
    built = []
    for i, t in enumerate(problems):
        if isinstance(t, Problem):
            if t.dtype != dtype:
                raise ValueError(f"problems[{i}] {t}: dtype {t.dtype!r}, the call's is {dtype!r}")
            q = t
        elif not isinstance(t, (tuple, list)) or len(t) not in (3, 4, 5):
            raise TypeError(f"problems[{i}]={t!r}; must be an (M, N, K), (M, N, K, layout) or (M, N, K, layout, "
                            "epilogue) tuple")
        else:
            q = None
        try:
            if q is None:
                q = Problem(t[0], t[1], t[2], dtype, t[3] if len(t) >= 4 else "NN", t[4] if len(t) == 5 else "none")
            fam.check_problem(q)
        except (TypeError, ValueError) as e:
            raise type(e)(f"problems[{i}]: {e}") from None
        built.append(q)
    pred = _loaded(device, family, dtype, models_dir) or load_predictor(device, family, dtype, models_dir)
    return pred.predict_many(built, top_k, running_on)

