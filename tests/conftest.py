"""Shared fixtures and skip markers: each optional dependency is probed once;
GPU tests skip cleanly where there is no GPU."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

# The tests never write the user's cache (the local device record, the tuning database, the compiled
# ranker): a test process's PoCL settings are not a user's, and a record it left made `costlearn run`
# call the model it had just trained another device's. Subprocesses inherit this, and a process that imports
# this file again under a test session (a spawned worker) keeps the session's folder; the process that made it
# deletes it at exit (every run used to leave one in the temporary folder, and a spawned worker one more).
# Each pytest-xdist worker (-n) has a folder of its own inside it, as two users' machines would: a test that
# reads what the cache recorded is never answered by the other worker's test.
if not os.environ.get("COSTLEARN_TESTS_CACHE"):
    os.environ["COSTLEARN_TESTS_CACHE"] = tempfile.mkdtemp(prefix="costlearn-tests-cache-")
    atexit.register(shutil.rmtree, os.environ["COSTLEARN_TESTS_CACHE"], ignore_errors=True)
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
os.environ["COSTLEARN_CACHE"] = os.path.join(os.environ["COSTLEARN_TESTS_CACHE"], _WORKER) if _WORKER.isidentifier() \
    else os.environ["COSTLEARN_TESTS_CACHE"]

ROOT = Path(__file__).resolve().parents[1]

A100_LOGS = Path(os.environ.get("COSTLEARN_A100_LOGS") or ROOT.parent / "shared" / "data"
                 / "inductor-autoheuristic-a100" / "a100_mm.zip")
"""Inductor's public A100 AutoHeuristic logs: ``$COSTLEARN_A100_LOGS`` (one log, a folder of them or a zip
holding ``a100/``), else the zip beside the checkout where this project keeps it."""
DATA = ROOT / "data"
MODELS = ROOT / "models"


def _has_opencl() -> bool:
    try:
        from costlearn.collect.backends import available
        return available("opencl")
    except Exception:
        return False


def _has_cuda() -> bool:
    try:
        from costlearn.collect.backends import available
        return available("cuda")
    except Exception:
        return False


def import_script(name: str):
    """The module of a source-tree tool, benchmark or study by its dotted name (``"scripts.throwaway_postgres"``,
    ``"studies.sampling"``): the source tree is on the path (pyproject.toml's pytest ``pythonpath``)."""
    import importlib
    return importlib.import_module(name)


HAS_OPENCL = _has_opencl()
HAS_CUDA = _has_cuda()
HAS_NVCC = shutil.which("nvcc") is not None

needs_opencl = pytest.mark.skipif(not HAS_OPENCL, reason="no OpenCL device (pip install 'pyopencl[pocl]')")
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU with CuPy")
needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")


def committed_dataset() -> Path:
    """The committed PoCL dataset folder (the only data/<device> with parts)."""
    folders = sorted(p.parent for p in DATA.glob("*/device.json"))
    if not folders:
        pytest.skip("no committed dataset under data/")
    return folders[0]


def committed_model() -> Path:
    folders = sorted(p.parent for p in MODELS.glob("*/*/*/model.json"))
    if not folders:
        pytest.skip("no committed model under models/")
    return folders[0]


@pytest.fixture
def python_ctrl_c():
    """Python's own Ctrl-C handler (SIGINT raises KeyboardInterrupt) for the test, put back after. A suite started
    in the background (``cmd &``, nohup) inherits SIGINT ignored, and Python then installs no handler, as a
    shell's background job should: a test that sends SIGINT would see nothing happen."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def default_ctrl_c() -> None:
    """``preexec_fn`` of a child process a test sends SIGINT to: the default disposition (the suite's may be
    ignored, see :func:`python_ctrl_c`), so that the child's Python installs its handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="session")
def dataset_dir() -> Path:
    return committed_dataset()


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return committed_model()


@pytest.fixture(scope="session")
def dataset_rows(dataset_dir):
    from costlearn.collect.dataset import load, valid_rows
    df, _ = load(dataset_dir)
    return valid_rows(df).reset_index(drop=True)


@pytest.fixture(scope="session")
def device_name(model_dir) -> str:
    """The committed model's device folder name."""
    return model_dir.parents[1].name


@pytest.fixture(scope="session")
def dataset_spec(dataset_dir):
    from costlearn.core.device import DeviceSpec
    return DeviceSpec.from_dict(json.loads((dataset_dir / "device.json").read_text()))


def dataset_row(**kw) -> dict:
    """One dataset row (every column of :data:`costlearn.collect.dataset.COLUMNS`)
    with placeholder values, for tests of the dataset's own logic (keys,
    parts, validity), overridden by ``kw``: not a measurement."""
    from costlearn.collect.dataset import COLUMNS
    r = {c: (0 if t == "int64" else 0.0 if t == "float64" else False if t == "bool" else "x")
         for c, t in COLUMNS.items()}
    r.update(m=4, n=5, k=6, dtype="float32", layout="NN", epilogue="none", family="gemm",
             config_id="m4n8k4_t1x1_outer_p0_row", status="ok",
             time_us=10.0, time_us_p20=9.0, time_us_p80=11.0, device_slug="dev", template_hash="abc",
             protocol_version=1)
    r.update(kw)
    return r


# -- the quick inner loop ---------------------------------------------------------------------------

SLOW_MODULES = {"test_scripts", "test_sampling_study", "test_fleet"}
"""Modules whose every test runs a study or a benchmark script end to end, or a Ray cluster (collect's fleet)."""
SLOW_WORDS = ("subprocess", "SIGKILL", "os.kill", "pg_server", "pg_url", "Popen")
"""What a test's source holding marks it slow: it starts processes (kill -9, another host) or a server."""


def pytest_sessionstart(session):
    """Stop at once where the C code was built from another source than the tree's (a .c file edited since
    ``pip install -e .``): costlearn refuses such a build and falls back to numpy, so the C tests would skip
    and the rest test the fallback instead."""
    import warnings
    from costlearn.ranker import native_library
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        native_library.library()
    why = native_library.library_unavailable()
    if "another source" in why:
        pytest.exit(f"the built C code is older than its sources: run pip install -e . ({why})", returncode=2)


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` the tests that run a study or a benchmark, start a process or a server: ``pytest -m "not slow"``
    is a developer's quick loop, the whole suite (the README's command, CI) runs them all. Decided from each test's
    own source, so a new test of that kind is marked without anyone remembering to."""
    import inspect
    for item in items:
        fn = getattr(item, "function", None)
        try:
            src = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            src = ""
        names = getattr(item, "fixturenames", ())
        if item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES or any(w in src for w in SLOW_WORDS) \
                or "pg_server" in names or "pg_url" in names:
            item.add_marker(pytest.mark.slow)


# -- a throwaway PostgreSQL server ------------------------------------------------------------------

@pytest.fixture(scope="session")
def pg_server():
    """A throwaway PostgreSQL server for the session's server tests (scripts/throwaway_postgres.py); skipped,
    saying why, only where no PostgreSQL server programs or no psycopg can be had (.ci/run installs both)."""
    try:
        import psycopg  # noqa: F401
    except ImportError as e:
        pytest.skip(f"no psycopg 3 ({e}): pip install 'costlearn[server]'")
    throwaway = import_script("scripts.throwaway_postgres")
    try:
        server = throwaway.PostgresServer.make()
    except throwaway.Unavailable as e:
        pytest.skip(str(e))
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def pg_url(pg_server):
    """The URL of a fresh, empty database on the session's server (which is running)."""
    pg_server.ensure_running()                     # a test before may have stopped it
    return pg_server.url(pg_server.new_database())
