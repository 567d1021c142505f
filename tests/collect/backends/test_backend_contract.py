"""The Backend seam's contract (costlearn/collect/backends/base.py), run over
every registered backend (:data:`costlearn.collect.backends.BACKENDS`), so a
new backend is tested for free.

Each backend is tested where it can run on this machine and skipped with the
reason where it cannot (``cuda`` and ``triton`` need an NVIDIA GPU and their
libraries, ``opencl`` PyOpenCL with a device such as PoCL's). ``replay`` runs
on a small recording cut from the committed dataset's real rows (one problem,
every config measured there): its times are recorded measurements, never
invented ones."""
from __future__ import annotations

import math

import numpy as np
import pytest

from costlearn.collect.backends import BACKENDS, BackendUnavailable, available, get_backend
from costlearn.collect.backends.base import Backend, CompiledKernel, Workspace
from costlearn.collect.dataset import COLUMNS
from costlearn.collect.measure import measure_shape
from costlearn.collect.protocol import Protocol
from costlearn.collect.space import check_config, enumerate_space
from costlearn.core.device import DeviceSpec
from costlearn.core.problem import Problem
from costlearn.families import FAMILIES, get_family

PROVENANCE_KEYS = ("device_name", "device_slug", "api", "compute_capability", "multiprocessors", "driver_version",
                   "runtime_version", "library_version")
"""What :meth:`Backend.provenance` must give every row (its docstring: device
name, compute capability or OpenCL version, multiprocessor count, driver and
runtime versions, library version; and the device's slug and API, the
dataset's key and provenance columns)."""

HARD_LIMITS = ("smem_above_max", "threads_above_max")
"""Feasibility rules a device enforces itself (no kernel runs past them), so a
config breaking one must fail on every backend."""

QUICK = Protocol(rounds=3, target_rse=0.0, warmup_launches=1, min_sample_us=200.0)
"""A short protocol: the contract needs a time, not a precise one."""


def _replay(request):
    """A replay backend on the committed dataset's rows of its smallest
    problem without an epilogue (real measurements), and that problem."""
    rows, spec = request.getfixturevalue("dataset_rows"), request.getfixturevalue("dataset_spec")
    from costlearn.collect.backends.replay import ReplayBackend
    rows = rows[(rows["status"] == "ok") & (rows["epilogue"] == "none")]
    flops = rows["m"].astype(np.int64) * rows["n"] * rows["k"]
    first = rows.loc[flops.idxmin()]
    key = ["family", "dtype", "layout", "m", "n", "k"]
    small = rows[(rows[key] == first[key]).all(axis=1)].reset_index(drop=True)
    return ReplayBackend(small, spec=spec)


def _backend(name, request) -> Backend:
    """The backend ``name`` on this machine; pytest.skip with why not."""
    if name == "replay":
        return _replay(request)
    try:
        BACKENDS.get(name)                       # a missing library: BackendUnavailable with its install hint
        if available(name):
            return get_backend(name)
        get_backend(name)                        # not available: its own BackendUnavailable says why, where it has one
    except BackendUnavailable as e:
        pytest.skip(str(e))
    except Exception as e:                       # noqa: BLE001 (a library present without its device fails its own way)
        pytest.skip(f"backend {name!r}: no device for it here ({type(e).__name__}: {e}); {BACKENDS.hint(name)}")
    pytest.skip(f"backend {name!r}: not available on this machine; {BACKENDS.hint(name)}")


def _problem_and_config(be: Backend):
    """A small problem of a family ``be`` measures and a feasible config of it."""
    if be.name == "replay":
        r = be.rows.iloc[0]
        return (Problem(int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"], r["layout"]),
                get_family(r["family"]).config_from_id(r["config_id"]))
    fam = get_family(be.families[0])
    problem = Problem(64, 64, 64, fam.dtypes[0], fam.layouts[0])
    cfg = fam.overhead_config()
    if check_config(cfg, be.spec, problem=problem) is not None:
        cfg = enumerate_space(be.spec, family=fam.name, problem=problem).configs[0]
    return problem, cfg


def _infeasible(be: Backend, fam, dtype):
    """A config of ``fam`` that breaks a hard device limit on ``be``'s device, or None."""
    for rule in HARD_LIMITS:
        for c in fam.all_configs():
            if fam.check_device(c, be.spec, dtype) == rule:
                return c
    return None


@pytest.mark.parametrize("name", BACKENDS.names())
def test_every_backend_keeps_the_contract(name, request):
    be = _backend(name, request)
    assert isinstance(be, Backend) and be.name == name

    # It describes its device, and says where every row it measures came from.
    spec = be.spec
    assert isinstance(spec, DeviceSpec)
    prov = be.provenance()
    assert isinstance(prov, dict)
    missing = [k for k in PROVENANCE_KEYS if k not in prov]
    assert not missing, f"provenance lacks {missing}"
    assert set(prov) <= set(COLUMNS), f"provenance keys that are no dataset column: {set(prov) - set(COLUMNS)}"
    assert isinstance(prov["device_name"], str) and prov["device_name"].strip()
    assert prov["device_slug"] == spec.slug
    assert isinstance(prov["api"], str) and prov["api"]

    # Its launch overhead is a time.
    overhead = be.launch_overhead_us()
    assert isinstance(overhead, float) and math.isfinite(overhead) and overhead >= 0

    # It measures some family, and the family names it (replay: the families its recording holds).
    assert be.families, f"backend {name!r} measures no family"
    for fam_name in be.families:
        assert fam_name in FAMILIES
        if name != "replay":
            assert name in get_family(fam_name).backends

    # A feasible config compiles, verifies against the reference and is timed: a finite positive time.
    problem, cfg = _problem_and_config(be)
    assert cfg.family in be.families
    kern = be.compile(cfg, problem.dtype)
    assert isinstance(kern, CompiledKernel) and kern.config == cfg and kern.epilogue == "none"
    assert kern.status == "ok", kern.error
    assert math.isfinite(kern.compile_s) and kern.compile_s >= 0
    with be.workspace(problem) as ws:
        assert isinstance(ws, Workspace)
        ok, err = ws.verify(kern)
        assert bool(ok), f"{cfg.config_id} on {problem}: max abs error {err}"
        t = ws.sample(kern, 2)
        assert math.isfinite(t) and t > 0, t
        row = measure_shape(ws, [kern], QUICK, overhead)[0]
    assert row["status"] == "ok", row["error"]
    assert math.isfinite(row["time_us"]) and row["time_us"] > 0, row["time_us"]

    # What is not a config is refused (TypeError), a config of a family it does not run too (ValueError):
    # Backend.family_for.
    with pytest.raises(TypeError):
        be.compile(object(), problem.dtype)
    others = [f for f in FAMILIES.names() if f not in be.families]
    for other in others:
        fam = get_family(other)
        with pytest.raises(ValueError):
            be.compile(fam.overhead_config(), fam.dtypes[0])

    # A config past a hard device limit fails as a status, never by raising: compile_error at compile, or a
    # failed row (launch_error, ...) when measured.
    fam = get_family(cfg.family)
    bad = _infeasible(be, fam, problem.dtype)
    if bad is not None:
        bk = be.compile(bad, problem.dtype)
        assert isinstance(bk, CompiledKernel) and bk.config == bad
        if bk.status != "ok":
            assert bk.status == "compile_error" and bk.error
        with be.workspace(problem) as ws:
            bad_row = measure_shape(ws, [bk], QUICK, overhead)[0]
        assert bad_row["status"] != "ok" and bad_row["error"], bad_row
