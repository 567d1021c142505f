"""Replay backend: answers from a recorded dataset (real measurements), so
every collection, training and evaluation path can be tested without
hardware on real numbers. Rows it produces say ``api="replay"`` in their
provenance; they are never presented as new measurements."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.dataset import load
from costlearn.core.device import DeviceSpec
from costlearn.core.problem import Problem
from costlearn.collect.backends.base import Backend, CompiledKernel, Workspace, check_epilogue_match

__all__ = ["ReplayBackend"]


class ReplayBackend(Backend):
    """Replays recorded measurements: a (problem, config) recorded with status
    ``ok`` answers its median recorded time (a config timed in several
    sessions counts once), one never ``ok`` its last recorded status, and one
    not recorded is not measured (:meth:`recorded` lists what is).

    Parameters
    ----------
    rows : DataFrame or path
        Recorded rows, or a dataset folder (with its ``device.json``).
    spec : DeviceSpec, optional
        Device of the recording; read from ``device.json`` when ``rows`` is
        a folder.

    Raises
    ------
    ValueError
        If there is no DeviceSpec or the rows come from several devices.
    """

    name = "replay"

    @staticmethod
    def is_available() -> bool:
        return True

    def __init__(self, rows, spec: DeviceSpec | None = None):
        if not isinstance(rows, pd.DataFrame):
            folder = Path(rows)
            rows, _ = load(folder)
            if spec is None and (folder / "device.json").exists():
                spec = DeviceSpec.from_file(folder / "device.json")
        if spec is None:
            raise ValueError("ReplayBackend needs the recording's DeviceSpec (spec=... or device.json)")
        devs = rows["device_slug"].unique()
        if len(devs) > 1:
            raise ValueError(f"recording mixes devices {sorted(devs)}; replay one device at a time")
        self._spec = spec
        self.rows = rows
        self._families = tuple(sorted(rows["family"].unique())) or ("gemm",)
        if "epilogue" not in rows:
            rows = rows.assign(epilogue="none")
        key = ["family", "dtype", "layout", "m", "n", "k", "config_id", "epilogue"]
        # A config recorded several times (sessions) replays as its median ok time (the study's rule: a config
        # measured in several sessions counts once, with its median), else as its last status.
        ok = rows["status"].eq("ok").to_numpy() & np.isfinite(rows["time_us"].to_numpy(np.float64))
        med = rows[ok].groupby(key, observed=True, sort=False)["time_us"].median()
        last = rows[~ok].groupby(key, observed=True, sort=False)["status"].last()
        self._index = {(f, d, lay, int(m), int(n), int(k), c, e): (st, math.nan)
                       for (f, d, lay, m, n, k, c, e), st in last.items()}
        self._index.update({(f, d, lay, int(m), int(n), int(k), c, e): ("ok", float(t))
                            for (f, d, lay, m, n, k, c, e), t in med.items()})
        self._configs = set(zip(rows["family"], rows["dtype"], rows["config_id"]))
        oh = rows["overhead_us"].to_numpy(np.float64)
        self._overhead = float(np.nanmedian(oh)) if np.isfinite(oh).any() else 0.0

    @property
    def spec(self) -> DeviceSpec:
        return self._spec

    @property
    def families(self) -> tuple:
        """The families the recording holds."""
        return self._families

    def recording(self, family: str, dtype: str, layout: str, m: int, n: int, k: int, config_id: str,
                  epilogue: str = "none"):
        """The recorded (status, time_us) of a config on a problem (with
        ``epilogue``).

        Raises
        ------
        KeyError
            If it was not recorded (the message names the config and problem).
        """
        got = self._index.get((family, dtype, layout, m, n, k, config_id, epilogue))
        if got is None:
            tail = "" if epilogue == "none" else f" +{epilogue}"
            raise KeyError(f"no recording of {config_id} at {m}x{n}x{k} {dtype} {layout}{tail}")
        return got

    def recorded(self, family: str, dtype: str, layout: str) -> dict:
        """The problems of the recording and the configs recorded on each
        (any status): ``{(m, n, k, epilogue): frozenset of config ids}`` of
        ``family``, ``dtype`` and ``layout`` (empty when it holds none). A
        collection on this backend chooses among these only; a problem or
        config outside them is answered as unmeasured, never invented."""
        out: dict = {}
        for (fam, dt, lay, m, n, k, cid, epi) in self._index:
            if fam == family and dt == dtype and lay == layout:
                out.setdefault((m, n, k, epi), set()).add(cid)
        return {key: frozenset(ids) for key, ids in out.items()}

    def provenance(self) -> dict:
        """The replay's provenance columns (``api="replay"``), with the
        recording's kernel template (``template_hash``) where it holds one:
        a replayed row is a recorded kernel's time, not this code's kernel's."""
        s = self._spec
        out = dict(device_name=s.name, device_slug=s.slug, api="replay",
                   compute_capability=s.compute_capability, device_version="",
                   multiprocessors=s.multiprocessors, driver_version=s.driver_version,
                   runtime_version="", library_version="replay of recorded measurements",
                   host="replay")
        if "template_hash" in self.rows and self.rows["template_hash"].nunique() == 1:
            out["template_hash"] = str(self.rows["template_hash"].iloc[0])
        return out

    def launch_overhead_us(self) -> float:
        return self._overhead

    def workspace(self, problem: Problem, distribution="normal", density=1.0, seed=0):
        """A workspace answering from the recording (no inputs are made)."""
        return _ReplayWorkspace(self, problem)

    def compile(self, config, dtype: str = "float32", epilogue: str = "none") -> CompiledKernel:
        fam = self.family_for(config)
        if (fam.name, dtype, config.config_id) not in self._configs:
            return CompiledKernel(config, "compile_error", "config not in the recording", epilogue=epilogue)
        return CompiledKernel(config, "ok", "", None, 0.0, config.config_id, epilogue)



class _ReplayWorkspace(Workspace):
    def __init__(self, be: ReplayBackend, problem: Problem):
        self.be, self.problem = be, problem

    def _get(self, kernel):
        p = self.problem
        check_epilogue_match(kernel, p.epilogue)
        return self.be.recording(kernel.config.family, p.dtype, p.layout, p.m, p.n, p.k, kernel.config.config_id,
                                 p.epilogue)

    def verify(self, kernel):
        status, _ = self._get(kernel)
        return (status != "wrong_result"), (0.0 if status != "wrong_result" else math.inf)

    def sample(self, kernel, n_launches):
        status, t = self._get(kernel)
        if status == "timeout":
            return math.inf        # above any timeout: the protocol records a timeout again
        if status != "ok" or not math.isfinite(t):
            raise RuntimeError(f"recorded status {status}")
        return t * n_launches
