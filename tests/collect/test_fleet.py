"""Collection across a fleet (costlearn.collect.fleet) on a local Ray cluster of PoCL
workers: one plan measured once, as a local collection measures it; a
worker killed mid-problem loses only that problem; workers of another
device class are refused."""
from __future__ import annotations

import dataclasses
import functools
import os
import signal
import subprocess
import sys

import pytest

from conftest import needs_opencl

SHAPES = [(32, 32, 32), (1, 64, 32), (48, 40, 33), (16, 16, 64), (64, 32, 16), (8, 8, 8)]


def _pool():
    from costlearn.families.gemm import GemmConfig
    return [GemmConfig(16, 16, 8, 2, 2), GemmConfig(1, 64, 16, 1, 2, "dot"), GemmConfig(32, 32, 8, 4, 4),
            GemmConfig(8, 8, 8, 1, 1)]


def _protocol():
    from costlearn.collect.protocol import Protocol
    return Protocol(rounds=3, max_rounds=3, min_sample_us=100)


SETTINGS = dict(shapes=SHAPES, configs_per_shape=4, seed=3, progress=False)


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of two CPUs for this module's tests."""
    ray = pytest.importorskip("ray")
    # The worker backends below are this module's functions: send them by
    # value, so the workers need not import the test module.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


def killing_backend(index, shape, marker=None):
    """An OpenCL backend (run in a fleet worker) whose process kills itself
    with SIGKILL when it starts measuring ``shape``: every time, or (with
    ``marker``, a file path) only the first time any worker reaches it."""
    from costlearn.collect.backends.opencl import OpenCLBackend

    class KillsItself(OpenCLBackend):
        def workspace(self, problem, *args, **kwargs):
            if problem.shape == shape and (marker is None or not os.path.exists(marker)):
                if marker is not None:
                    open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return super().workspace(problem, *args, **kwargs)

    return KillsItself()


def two_devices(index):
    """Worker 0 measures PoCL's device; the others claim another device."""
    from costlearn.collect.backends.opencl import OpenCLBackend

    class Elsewhere(OpenCLBackend):
        @property
        def spec(self):
            return dataclasses.replace(super().spec, name="Other OpenCL CPU")

    return OpenCLBackend() if index == 0 else Elsewhere()


def _keys(df):
    from costlearn.collect.dataset import KEY_COLUMNS
    return list(map(tuple, df[list(KEY_COLUMNS) + ["status"]].astype(object).itertuples(index=False, name=None)))


def test_fleet_module_needs_no_ray_until_a_fleet_is_started():
    code = ("import sys; sys.modules['ray'] = None\n"
            "import costlearn, costlearn.collect.fleet, costlearn.cli\n"
            "from costlearn.collect.fleet import start_fleet, FleetUnavailable\n"
            "try:\n    start_fleet('opencl', workers=1)\nexcept FleetUnavailable as e:\n    print('HINT', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HINT" in out.stdout and "pip install 'costlearn[ray]'" in out.stdout


def test_workers_of_two_device_classes_are_refused_naming_both():
    from costlearn.core.device import preset
    from costlearn.collect.fleet import check_same_device
    with pytest.raises(ValueError, match=r"worker 1 measures 'NVIDIA A100-SXM4-80GB' \(a100\) but worker 0 "
                                         r"measures 'NVIDIA H200' \(h200\)"):
        check_same_device(("worker 0", preset("h200")), ("worker 1", preset("a100")))
    other_driver = dataclasses.replace(preset("h200"), driver_version="999.1")
    with pytest.raises(ValueError, match="driver_version"):
        check_same_device(("worker 0", preset("h200")), ("worker 1", other_driver))
    check_same_device(("worker 0", preset("h200")), ("worker 1", preset("h200")))


@needs_opencl
def test_two_workers_measure_one_plan_once_as_a_local_collection_does(ray_cluster, tmp_path):
    from costlearn.collect.backends import get_backend
    from costlearn.collect.loop import collect
    from costlearn.collect.dataset import load
    from costlearn.collect.fleet import collect_fleet, start_fleet
    collect(get_backend("opencl"), tmp_path / "local", pool=_pool(), protocol=_protocol(), **SETTINGS)
    local = load(tmp_path / "local")[0]
    with start_fleet("opencl", workers=2) as fleet:
        assert len(fleet.members) == 2
        # A first run stopped after two problems (as a killed driver would be),
        # then the same run again: it resumes and measures nothing twice.
        first = collect_fleet(fleet, tmp_path / "fleet", pool=_pool(), protocol=_protocol(), max_problems=2,
                              **SETTINGS)
        again = collect_fleet(fleet, tmp_path / "fleet", pool=_pool(), protocol=_protocol(), **SETTINGS)
    assert first.problems_done == 2 and again.skipped == first.rows_written
    assert first.problems_done + again.problems_done == len(SHAPES) and not again.lost
    df, rep = load(tmp_path / "fleet")
    assert not rep.corrupt and (tmp_path / "fleet" / "device.json").is_file()
    assert (tmp_path / "fleet" / "pools.json").is_file()
    assert sorted(_keys(df)) == sorted(_keys(local)), "the fleet measured other keys or statuses than collect()"
    assert len(set(_keys(df))) == len(df), "a measurement was taken twice"
    # The same config of each problem is timed twice (the noise check).
    rep_cfg = {(r.m, r.n, r.k): r.config_id for r in df[df["repeat_time_us"].notna()].itertuples()}
    assert rep_cfg == {(r.m, r.n, r.k): r.config_id for r in local[local["repeat_time_us"].notna()].itertuples()}
    assert df["session_id"].nunique() == 2 and df["run_id"].nunique() == 2


@needs_opencl
def test_a_fleet_collection_measures_the_epilogues_asked_for(ray_cluster, tmp_path):
    """A fleet built its problems without an epilogue, so `collect --ray --epilogues bias` was refused;
    now the fleet runs the local loop's plan: each given shape with every epilogue, its rows recording it as a
    local collection's do, and a second run resumes it."""
    from costlearn.collect.backends import get_backend
    from costlearn.collect.dataset import load
    from costlearn.collect.fleet import collect_fleet, start_fleet
    from costlearn.collect.loop import collect
    settings = dict(SETTINGS, shapes=SHAPES[:3], epilogues=("none", "bias"))
    collect(get_backend("opencl"), tmp_path / "local", pool=_pool(), protocol=_protocol(), **settings)
    local = load(tmp_path / "local")[0]
    with start_fleet("opencl", workers=2) as fleet:
        res = collect_fleet(fleet, tmp_path / "fleet", pool=_pool(), protocol=_protocol(), **settings)
        again = collect_fleet(fleet, tmp_path / "fleet", pool=_pool(), protocol=_protocol(), **settings)
    df = load(tmp_path / "fleet")[0]
    assert res.problems_done == res.problems_planned == 6 and not res.lost and res.epilogues_left_out == []
    assert df.groupby("epilogue").size().to_dict() == {"bias": res.rows_written // 2, "none": res.rows_written // 2}
    assert (df["status"] == "ok").all(), df[["config_id", "epilogue", "status", "error"]]
    assert sorted(_keys(df)) == sorted(_keys(local)), "the fleet measured other keys or statuses than collect()"
    assert again.problems_done == 0 and again.skipped == res.rows_written


@needs_opencl
def test_a_worker_killed_mid_problem_loses_only_that_problem(ray_cluster, tmp_path):
    from costlearn.collect.dataset import load
    from costlearn.collect.fleet import collect_fleet, start_fleet
    backend = functools.partial(killing_backend, shape=SHAPES[2], marker=str(tmp_path / "killed-once"))
    with start_fleet(backend, workers=2) as fleet:
        res = collect_fleet(fleet, tmp_path / "fleet", pool=_pool(), protocol=_protocol(), **SETTINGS)
    assert (tmp_path / "killed-once").exists()
    assert len(res.lost) == 1 and str(SHAPES[2]) in res.lost[0] and res.replacements == 1 and not res.failed
    assert "handed out again" in res.lost[0] and res.problems_planned == len(SHAPES)         # a new user's report
    assert res.rows_planned == res.rows_written
    df = load(tmp_path / "fleet")[0]
    assert sorted(set(map(tuple, df[["m", "n", "k"]].to_numpy().tolist()))) == sorted(SHAPES)
    assert len(set(_keys(df))) == len(df) and (df["status"] == "ok").all()


@needs_opencl
def test_a_problem_lost_twice_is_recorded_as_failed_rows_naming_the_workers(ray_cluster, tmp_path):
    from costlearn.collect.dataset import load
    from costlearn.collect.fleet import collect_fleet, start_fleet
    backend = functools.partial(killing_backend, shape=SHAPES[0])
    with start_fleet(backend, workers=2) as fleet:
        res = collect_fleet(fleet, tmp_path / "fleet", pool=_pool(), protocol=_protocol(), **SETTINGS)
    assert res.failed == [SHAPES[0]] and len(res.lost) == 2 and res.replacements == 2
    assert "handed out again" in res.lost[0] and "lost twice: recorded as launch_error rows" in res.lost[1]
    df = load(tmp_path / "fleet")[0]
    lost = df[(df["m"] == 32) & (df["n"] == 32) & (df["k"] == 32)]
    assert len(lost) and (lost["status"] == "launch_error").all()
    assert lost["error"].str.contains(r"lost twice, with worker \d \(pid \d+ on .*\) and then worker \d").all()
    assert (df.drop(lost.index)["status"] == "ok").all() and len(set(_keys(df))) == len(df)
    assert set(map(tuple, df[["m", "n", "k"]].to_numpy().tolist())) == set(SHAPES)


DRIVER = """
import sys, time
import ray
ray.init(address=sys.argv[1], logging_level="WARNING")
from costlearn.collect.fleet import collect_fleet, start_fleet
from costlearn.families.gemm import GemmConfig as C
from costlearn.collect.protocol import Protocol

def slow_on_the_last_shape(index):
    from costlearn.collect.backends.opencl import OpenCLBackend
    class Slow(OpenCLBackend):
        def workspace(self, problem, *args, **kwargs):
            if problem.shape == (8, 8, 8):
                time.sleep(60)
            return super().workspace(problem, *args, **kwargs)
    return Slow()

pool = [C(16, 16, 8, 2, 2), C(1, 64, 16, 1, 2, "dot"), C(32, 32, 8, 4, 4), C(8, 8, 8, 1, 1)]
with start_fleet(slow_on_the_last_shape, workers=1) as fleet:
    collect_fleet(fleet, sys.argv[2], shapes=%r, pool=pool, configs_per_shape=4, seed=3, progress=False,
                  protocol=Protocol(rounds=3, max_rounds=3, min_sample_us=100))
"""


@needs_opencl
def test_a_driver_killed_mid_run_leaves_a_dataset_a_rerun_completes_measuring_nothing_twice(ray_cluster, tmp_path):
    import time

    from costlearn.collect.dataset import load
    from costlearn.collect.fleet import collect_fleet, start_fleet
    folder = tmp_path / "fleet"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER % (SHAPES,), ray_cluster.get_runtime_context().gcs_address,
                               str(folder)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(folder.glob("part-*.parquet"))) < len(SHAPES) - 1 and driver.poll() is None:
            assert time.monotonic() < deadline, "the driver wrote no parts"
            time.sleep(0.2)
        assert driver.poll() is None, driver.communicate()[0][-2000:]
        os.kill(driver.pid, signal.SIGKILL)        # mid-run: the last problem is in flight
    finally:
        driver.kill()
        driver.wait()
    before, rep = load(folder)
    assert not rep.corrupt and set(map(tuple, before[["m", "n", "k"]].to_numpy().tolist())) == set(SHAPES[:-1])
    with start_fleet("opencl", workers=2) as fleet:
        res = collect_fleet(fleet, folder, pool=_pool(), protocol=_protocol(), **SETTINGS)
    assert res.problems_done == 1 and res.skipped == len(before)
    df = load(folder)[0]
    assert len(set(_keys(df))) == len(df) and set(map(tuple, df[["m", "n", "k"]].to_numpy().tolist())) == set(SHAPES)


@needs_opencl
def test_a_worker_of_another_device_class_is_refused(ray_cluster):
    from costlearn.collect.fleet import start_fleet
    with pytest.raises(ValueError, match=r"worker 1 \(pid \d+ on .*\) measures 'Other OpenCL CPU' .* but worker 0 "
                                         r"\(pid \d+ on .*\) measures 'pthread"):
        start_fleet(two_devices, workers=2)


@needs_opencl
def test_collect_command_runs_on_the_ray_cluster(ray_cluster, tmp_path, capsys):
    """Also ``collect --ray --epilogues``, which a fleet once refused (it
    measured epilogue none only): every shape with every epilogue asked."""
    from costlearn.cli import main
    from costlearn.collect.dataset import load
    assert main(["collect", "--ray", "--workers", "2", "--device", "opencl", "--data", str(tmp_path),
                 "--shapes", "64x64x64", "96x64x32", "--pool", "3", "--rounds", "3", "--max-rounds", "3",
                 "--target-rse", "0", "--recheck", "0", "--no-progress", "--epilogues", "none", "bias"]) == 0
    out = capsys.readouterr()
    assert "collected" in out.out and "2 workers" in out.err and "rows planned over 4 problems" in out.err
    (folder,) = [p.parent for p in tmp_path.glob("*/device.json")]
    rows = load(folder)[0]
    assert set(map(tuple, rows[["m", "n", "k"]].to_numpy().tolist())) == {(64, 64, 64), (96, 64, 32)}
    assert set(map(tuple, rows[["m", "epilogue"]].to_numpy().tolist())) == \
        {(64, "none"), (64, "bias"), (96, "none"), (96, "bias")}


def test_workers_without_ray_is_an_error(capsys):
    from costlearn.cli import main
    assert main(["collect", "--workers", "2"]) == 2
    assert "--workers needs --ray" in capsys.readouterr().err


def test_a_fleets_closing_note_says_the_workers_compiled(tmp_path, capsys):
    """Regression (found by a new user): over budget, a fleet run said "compiling took 0 s (the first shape
    compiles the whole pool)"; on a fleet the workers compile when they start."""
    from costlearn.cli.collect import print_collect_result
    from costlearn.collect.fleet import FleetResult
    res = FleetResult(budget_s=10.0, folder=tmp_path)
    res.seconds = dict(start=42.0, write=0.1, total=60.0)
    print_collect_result(res, tmp_path, "gemm", "float32", 0)
    err = capsys.readouterr().err
    assert "starting the workers (each compiles the whole pool; --pool sets its size) took 42 s" in err
    assert "compiling took 0 s" not in err



@needs_opencl
def test_a_fleet_runs_the_active_strategy_and_resumes_it(ray_cluster, tmp_path):
    """The fleet runs the collection strategies; active chooses
    among the given shapes in rounds refit on what the workers returned, and a
    second run measures the rest, nothing twice."""
    from costlearn.collect.dataset import KEY_COLUMNS, load
    from costlearn.collect.fleet import collect_fleet, start_fleet
    from costlearn.learn.active import active_settings
    small = active_settings(first_round=2, round_share=0.5, candidates=10, members=2, trees=4)
    settings = dict(SETTINGS, strategy="active", active=small)
    with start_fleet("opencl", workers=2) as fleet:
        first = collect_fleet(fleet, tmp_path, pool=_pool(), protocol=_protocol(), max_problems=4, **settings)
        again = collect_fleet(fleet, tmp_path, pool=_pool(), protocol=_protocol(), **settings)
    df, rep = load(tmp_path)
    assert first.problems_done == 4 and again.problems_done == 2 and not rep.corrupt
    assert set(map(tuple, df[["m", "n", "k"]].drop_duplicates().to_numpy().tolist())) == set(SHAPES)
    assert not df.duplicated(list(KEY_COLUMNS)).any()
