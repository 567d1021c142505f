"""Predictor: rank a model's candidate configs for a shape, in microseconds,
and say when the answer is a guess (design.md, "Predictor")."""
from __future__ import annotations

import numbers
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import __version__
from .codegen import TEMPLATE_HASH
from .device import DeviceSpec
from .envelope import envelope_points, shape_reasons
from .model import artifact as _artifact
from .space import TileConfig, check_shape, tile_fits_problem

__all__ = ["Prediction", "Predictor", "predict_best", "clear_cache"]


@dataclass(frozen=True)
class Prediction:
    """Answer of :func:`predict_best`.

    Attributes
    ----------
    config : TileConfig
        The chosen config (lowest predicted time).
    time_us : float
        Its predicted time, microseconds.
    top_k : tuple of (TileConfig, float)
        The k best configs with predicted times in microseconds, best first.
    ood : bool
        True when the shape or the device is outside what the model was
        trained on; ``ood_reasons`` says why.
    ood_reasons : tuple of str
    m, n, k : int
    dtype : str
    device : str
        Device the model was trained on (its folder name).
    """

    config: TileConfig
    time_us: float
    top_k: tuple
    ood: bool
    ood_reasons: tuple
    m: int
    n: int
    k: int
    dtype: str
    device: str


class Predictor:
    """Ranks the candidate configs of one model artifact.

    Parameters
    ----------
    folder : path
        ``models/<device>/<dtype>/``.

    Raises
    ------
    costlearn.model.artifact.ArtifactError
        If the artifact is missing or does not match this code.
    """

    def __init__(self, folder):
        self.artifact = _artifact.load(folder)
        self.spec: DeviceSpec = self.artifact.spec
        self.dtype = self.artifact.dtype
        self.device = Path(folder).resolve().parent.name
        cands = self.artifact.candidates.copy()
        cands["dtype"] = self.dtype
        self._cands = cands.reset_index(drop=True)
        self._configs = self.artifact.candidate_configs()
        bm, bn, bk = (cands[c].to_numpy(np.int64) for c in ("block_m", "block_n", "block_k"))
        self._bm, self._bn, self._bk = bm, bn, bk
        side = self.artifact.sidecar
        self._env_points = envelope_points(side["envelope"])
        self._identity_reasons = []
        if side.get("template_hash") != TEMPLATE_HASH:
            self._identity_reasons.append(
                f"kernel template {side.get('template_hash')} at training, {TEMPLATE_HASH} now")
        if side.get("costlearn_version") != __version__:
            self._identity_reasons.append(
                f"trained with costlearn {side.get('costlearn_version')}, running {__version__}")

    def _feasible(self, m: int, n: int, k: int) -> np.ndarray:
        """Candidates whose block tile does not exceed the problem (the
        ``block_tile_exceeds_problem`` rule of ``costlearn.space``)."""
        return tile_fits_problem(self._bm, self._bn, self._bk, m, n, k, warp_size=self.spec.warp_size)

    def rank(self, m: int, n: int, k: int, mask: np.ndarray | None = None) -> tuple[list[TileConfig], np.ndarray]:
        """Rank candidates for (m, n, k).

        Parameters
        ----------
        m, n, k : int
        mask : ndarray of bool, shape (C,), optional
            Candidates to rank; :meth:`_feasible` by default. Where no
            candidate's block tile fits the problem, all C are ranked (and
            :meth:`predict_best` flags the answer OOD).

        Returns
        -------
        configs : list of TileConfig
            Fastest predicted first.
        time_us : ndarray of float64, shape (len(configs),)
            Predicted times, microseconds.
        """
        mask = self._feasible(m, n, k) if mask is None else mask
        if not mask.any():
            mask = np.ones(len(self._cands), bool)
        rows = self._cands[mask].assign(m=m, n=n, k=k)
        t = self.artifact.model.predict(rows)
        order = np.argsort(t, kind="stable")
        idx = np.flatnonzero(mask)[order]
        return [self._configs[i] for i in idx], t[order]

    def predict_best(self, m, n, k, *, top_k: int = 5, running_on: DeviceSpec | None = None) -> Prediction:
        """See :func:`costlearn.predict_best`."""
        m, n, k, _ = check_shape(m, n, k, self.dtype)
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral):
            raise TypeError(f"top_k={top_k!r} ({type(top_k).__name__}); must be an int >= 1")
        if top_k < 1:
            raise ValueError(f"top_k={top_k!r}; must be an int >= 1")
        if running_on is not None and not isinstance(running_on, DeviceSpec):
            raise TypeError(f"running_on={running_on!r}; must be a DeviceSpec (e.g. costlearn.preset('h200')) "
                            "or None")
        mask = self._feasible(m, n, k)
        configs, times = self.rank(m, n, k, mask)
        reasons = shape_reasons(self.artifact.sidecar["envelope"], m, n, k, self._env_points) \
            + list(self._identity_reasons)
        if not mask.any():
            reasons.append(f"no candidate's block tile fits {m}x{n}x{k}; ranked all "
                           f"{len(self._configs)} candidates anyway")
        if running_on is not None and running_on.name != self.spec.name:
            reasons.append(f"trained on {self.spec.name}, running on {running_on.name}")
        top = tuple((c, float(t)) for c, t in zip(configs[:top_k], times[:top_k]))
        return Prediction(config=configs[0], time_us=float(times[0]), top_k=top, ood=bool(reasons),
                          ood_reasons=tuple(reasons), m=m, n=n, k=k, dtype=self.dtype, device=self.device)


_CACHE: dict = {}
_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget loaded predictors (after retraining in the same process)."""
    with _LOCK:
        _CACHE.clear()


def _resolve(device, dtype: str, models_dir) -> Path:
    if models_dir is not None and not isinstance(models_dir, (str, Path)):
        raise TypeError(f"models_dir={models_dir!r}; must be a path (str or pathlib.Path) or None")
    root = Path(models_dir) if models_dir is not None else _artifact.default_models_dir()
    have = _artifact.list_models(root)
    if isinstance(device, DeviceSpec):
        device = device.slug
    if device is None:
        devs = sorted({d for d, t in have if t == dtype})
        if len(devs) == 1:
            device = devs[0]
        else:
            raise ValueError(f"device=None is ambiguous: models for dtype {dtype!r} exist for {devs} "
                             f"in {str(root)!r}; pass device=<one of them>" if devs else
                             f"no model for dtype {dtype!r} in {str(root)!r}; train one with "
                             "`costlearn train` (models present: "
                             f"{[f'{d}/{t}' for d, t in have] or 'none'})")
    if not isinstance(device, str):
        raise TypeError(f"device={device!r} ({type(device).__name__}); must be a str or DeviceSpec")
    if (device, dtype) not in have:
        raise ValueError(f"no model for device={device!r}, dtype={dtype!r} in {str(root)!r}; "
                         f"models present: {[f'{d}/{t}' for d, t in have] or 'none'}")
    return root / device / dtype


def predict_best(M, N, K, dtype: str = "float32", device=None, *, top_k: int = 5,
                 models_dir=None, running_on: DeviceSpec | None = None) -> Prediction:
    """Predict the fastest tile config for C[M,N] = A[M,K] @ B[K,N].

    Parameters
    ----------
    M, N, K : int
        Problem extents, each >= 1 (Python or numpy integers; not bool or
        float).
    dtype : {"float32"}
        Element type.
    device : str or DeviceSpec, optional
        Model to use: a device folder name under the models directory (e.g.
        ``"h200"``), or a DeviceSpec whose slug names it. Default: the only
        model present for ``dtype``.
    top_k : int
        Length of :attr:`Prediction.top_k`.
    models_dir : path, optional
        Model store; ``$COSTLEARN_MODELS`` or the source tree's ``models/``
        by default.
    running_on : DeviceSpec, optional
        The device the kernel will run on; a different device name than the
        model's is an OOD reason.

    Returns
    -------
    Prediction

    Raises
    ------
    TypeError
        If an extent is not an integer (bool and float included).
    ValueError
        If an extent is < 1, ``dtype`` is unknown, or there is no model for
        ``device`` (the message lists the models present).
    costlearn.model.artifact.ArtifactError
        If the model does not match this code.

    Examples
    --------
    >>> import costlearn
    >>> p = costlearn.predict_best(1, 4096, 4096, device="h200")  # doctest: +SKIP
    >>> p.config.config_id, p.time_us, p.ood                      # doctest: +SKIP
    """
    m, n, k, dtype = check_shape(M, N, K, dtype)
    # The cache is keyed by the arguments, so a repeated call touches no disk.
    key = (device.slug if isinstance(device, DeviceSpec) else device, dtype,
           None if models_dir is None else str(models_dir))
    with _LOCK:
        pred = _CACHE.get(key) if isinstance(key[0], (str, type(None))) else None
    if pred is None:
        folder = _resolve(device, dtype, models_dir)
        with _LOCK:
            pred = _CACHE.get(key)
            if pred is None:
                pred = _CACHE[key] = Predictor(folder)
    return pred.predict_best(m, n, k, top_k=top_k, running_on=running_on)


