"""Noise measured the way a user meets it (across sessions), the
recorded CPU-device settings, and filter-then-measure's tie set. Timing is
mocked (replay, fake times) where a real one would be flaky."""
import json

import numpy as np
import pandas as pd
import pytest

from conftest import needs_opencl


def _rows(times, session, **kw):
    from conftest import dataset_row as _row

    from costlearn.families import get_family
    from costlearn.collect.protocol import PROTOCOL_VERSION
    return [_row(m=8, n=8, k=8 + i, config_id="m16n16k8_t2x2_outer_p0_row", time_us=t, session_id=session,
                 protocol_version=PROTOCOL_VERSION, template_hash=get_family("gemm").template_hash, source_format="",
                 **kw)
            for i, t in enumerate(times)]


def test_the_across_session_floor_pairs_each_retiming_with_the_row_it_retimed():
    from costlearn.collect.dataset import _conform
    from costlearn.collect.noise import across_session_pairs
    first = _conform(pd.DataFrame(_rows([100.0, 200.0, 300.0, 400.0], "s1")), upgrade=True)
    later = _conform(pd.DataFrame(_rows([110.0, 200.0, 330.0], "s2")), upgrade=True)
    pairs = across_session_pairs(first, later)
    assert len(pairs) == 3 and sorted(np.round(pairs["rel_diff"], 6)) == [0.0, 0.1, 0.1]
    same = _conform(pd.DataFrame(_rows([150.0], "s1")), upgrade=True)       # the same session is no re-timing
    assert across_session_pairs(first, same).empty
    assert across_session_pairs(first, first.iloc[:0]).empty


def test_a_shift_every_config_of_a_shape_shares_is_not_ranking_noise():
    """A later session on a machine 20 % slower moves every config alike: the
    raw floor says 20 %, the floor ties use (the shape's factor removed) 0."""
    from costlearn.collect.dataset import _conform
    from costlearn.collect.noise import across_session_pairs
    from conftest import dataset_row as _row
    from costlearn.families import get_family
    th = get_family("gemm").template_hash
    ids = ["m16n16k8_t2x2_outer_p0_row", "m32n32k8_t2x2_outer_p0_row", "m64n64k8_t4x4_outer_p0_row"]

    def rows(times, session):
        return _conform(pd.DataFrame([_row(m=64, n=64, k=64, config_id=c, time_us=t, session_id=session,
                                           protocol_version=3, template_hash=th, source_format="")
                                      for c, t in zip(ids, times)]), upgrade=True)
    pairs = across_session_pairs(rows([100.0, 150.0, 300.0], "a"), rows([120.0, 180.0, 360.0], "b"))
    assert np.allclose(pairs["rel_diff"], 0.2) and np.allclose(pairs["rel_diff_shape"], 0.0)
    pairs = across_session_pairs(rows([100.0, 150.0, 300.0], "a"), rows([120.0, 150.0, 360.0], "b"))
    assert np.allclose(sorted(pairs["rel_diff_shape"]), [0.0, 0.0, 0.2])     # the one that moved on its own


def test_recheck_retimes_in_a_new_session_and_ties_use_the_across_floor(dataset_dir, dataset_rows, tmp_path,
                                                                         monkeypatch, model_dir):
    import costlearn.collect.rows
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    from costlearn.learn.evaluate import score
    from costlearn.collect.dataset import load
    from costlearn.families.gemm import GemmConfig
    from costlearn.collect.noise import RECHECK_FOLDER, noise_floors, recheck
    counts = dataset_rows.groupby(["m", "n", "k"]).size().sort_values(ascending=False, kind="stable")
    shapes = [tuple(int(x) for x in s) for s in counts.index[:3]]         # shapes with many configs measured
    pool = [GemmConfig.from_id(c) for c in sorted(dataset_rows["config_id"].unique())]
    be = ReplayBackend(dataset_dir)
    collect(be, tmp_path, shapes=shapes, pool=pool, configs_per_shape=len(pool), progress=False)
    n_rows = len(load(tmp_path)[0])
    with pytest.raises(ValueError, match="measured in another session"):
        recheck(be, tmp_path)                                   # nothing from another session yet

    odd = {c.config_id for c in pool[1::2]}

    class Slower(ReplayBackend):                # the later session: every config 10 % slower, half of them 20 % more
        def workspace(self, problem, *a, **kw):
            ws = super().workspace(problem)
            base = ws.sample
            ws.sample = lambda kern, n: 1.1 * (1.2 if kern.config.config_id in odd else 1.0) * base(kern, n)
            return ws
    import costlearn.collect.noise
    for mod in (costlearn.collect.rows, costlearn.collect.noise):          # the session id, where each module reads it
        monkeypatch.setattr(mod, "SESSION_ID", "later0session")
    res = recheck(Slower(dataset_dir), tmp_path, shapes=2, configs_per_shape=len(pool), seed=0)
    assert res.shapes == 2 and res.rows_written > 0
    re_rows, _ = load(tmp_path / RECHECK_FOLDER)
    assert set(re_rows["session_id"]) == {"later0session"}
    assert res.noise_floors.pairs == res.rows_written and 0.1 - 1e-9 <= res.noise_floors.across <= 0.32 + 1e-9
    assert 0 < res.noise_floors.across_shape < res.noise_floors.across      # the common 10 % is no ranking noise
    assert res.noise_floors.tie == res.noise_floors.across_shape            # ties use the across-session floor
    assert "common factor (the machine's speed then) removed" in res.noise_floors.describe()
    assert noise_floors(tmp_path).sessions == 1
    s = score(model_dir, load(tmp_path)[0], data=tmp_path)
    assert s.noise_floor == s.noise_floors.tie > 0 and s.noise_floors.pairs > 0
    assert len(load(tmp_path)[0]) == n_rows                   # re-timings never enter the dataset itself


def test_pocl_settings_leave_the_host_a_core_and_respect_the_users_own(monkeypatch):
    pytest.importorskip("pyopencl")
    import costlearn.collect.backends.opencl as ocl
    monkeypatch.setattr(ocl, "_allowed_cpus", lambda: [0, 1, 2, 3])
    assert ocl.pocl_settings({}) == {"POCL_MAX_PTHREAD_COUNT": 3, "POCL_AFFINITY": "1", "host_cpu": 3}
    assert ocl.pocl_settings({"POCL_MAX_PTHREAD_COUNT": "4"})["host_cpu"] is None      # no core left for the host
    assert ocl.pocl_settings({"POCL_AFFINITY": "0"})["host_cpu"] is None                 # unpinned: nothing to pin
    monkeypatch.setattr(ocl, "_allowed_cpus", lambda: [0])
    assert ocl.pocl_settings({}) == {"POCL_MAX_PTHREAD_COUNT": 1, "POCL_AFFINITY": "1", "host_cpu": None}
    monkeypatch.setattr(ocl, "_allowed_cpus", lambda: [4, 5, 6])                         # a taskset: no index pinning
    assert ocl.pocl_settings({})["POCL_AFFINITY"] == "0"
    with pytest.raises(ValueError, match="POCL_MAX_PTHREAD_COUNT='two'"):
        ocl.pocl_settings({"POCL_MAX_PTHREAD_COUNT": "two"})


def test_a_cpu_devices_worker_count_is_part_of_its_identity():
    import dataclasses

    from costlearn.core.device import preset
    cpu = dataclasses.replace(preset("h200"), name="pthread-AMD EPYC", api="opencl", device_type="cpu",
                              multiprocessors=1, extra={"settings": {"POCL_AFFINITY": "1"}})
    assert cpu.slug == "ocl-pthread-amd-epyc-1w"
    two = dataclasses.replace(cpu, multiprocessors=2, extra={"settings": {"POCL_AFFINITY": "0"}})
    assert two.slug == "ocl-pthread-amd-epyc-2w"                    # another folder: never mixed in one dataset
    assert any(d.startswith("settings") for d in cpu.differences(two))
    assert preset("h200").slug == "h200"                               # a GPU's slug is unchanged


@needs_opencl
@pytest.mark.opencl
def test_the_worker_thread_setting_is_recorded_on_every_row(tmp_path):
    from costlearn.collect.backends import get_backend
    from costlearn.collect.loop import collect
    from costlearn.collect.dataset import load
    from costlearn.families.gemm import GemmConfig
    from costlearn.collect.protocol import Protocol
    be = get_backend("opencl")
    if be.spec.device_type != "cpu":
        pytest.skip("the OpenCL device is not a CPU")
    collect(be, tmp_path, shapes=[(32, 32, 32)], pool=[GemmConfig(16, 16, 8, 2, 2)], configs_per_shape=1,
            protocol=Protocol(rounds=3, max_rounds=3, min_sample_us=100.0), progress=False)
    df, _ = load(tmp_path)
    settings = json.loads(df["device_settings"].iloc[0])
    assert settings["POCL_MAX_PTHREAD_COUNT"] == be.device.max_compute_units == be.spec.multiprocessors
    assert df["device_slug"].iloc[0].endswith(f"-{settings['POCL_MAX_PTHREAD_COUNT']}w")
    assert be.spec.extra["settings"] == settings
    assert df["stop_reason"].iloc[0] in ("target", "cap") and len(json.loads(df["samples_us"].iloc[0])) >= 3


def _tie_of_two(model_dir, dataset_dir, db_path):
    """Filter-then-measure of a problem whose model's first two configs run
    equally fast (a replay backend): (predictor, rows, shape, the model's
    top 3, the Prediction)."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.dataset import load, valid_rows
    from costlearn.serve.predictor import Predictor
    from costlearn.serve.tuning import Tuner
    from costlearn.serve.tuning_db import TuningDB
    pred = Predictor(model_dir)
    rows = valid_rows(load(dataset_dir)[0])
    rows = rows[rows["epilogue"] == "none"]             # the problems asked below have no epilogue
    recorded = rows.groupby(["m", "n", "k"])["config_id"].apply(set).to_dict()
    top3 = {s: [c.config_id for c, _ in pred.predict_best(*s).top_k[:3]] for s in recorded}
    shape = next(s for s, ids in recorded.items() if len(top3[s]) == 3 and set(top3[s]) <= ids)  # three to tie in
    top = top3[shape]

    class TwoEqual(ReplayBackend):            # the model's first two run equally fast: no measurement separates them
        def workspace(self, problem, *a, **kw):
            ws = super().workspace(problem)
            ws.sample = lambda kern, n: n * (100.0 if kern.config.config_id in top[:2] else 500.0)
            return ws
    tuner = Tuner(pred, TuningDB(db_path, create=True), TwoEqual(rows, spec=pred.spec))
    return pred, rows, shape, top, tuner.tune(pred.problem(*shape), measure_top_k=3)


def test_filter_then_measure_returns_the_tie_set_when_it_cannot_separate(model_dir, dataset_dir, tmp_path):
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.serve.tuning import Tuner
    from costlearn.serve.tuning_db import TuningDB
    pred, rows, shape, top, p = _tie_of_two(model_dir, dataset_dir, tmp_path / "t.sqlite")
    assert p.chosen_by == "measured" and p.config.config_id in top[:2]
    assert p.tied_with == tuple(set(top[:2]) - {p.config.config_id})

    class Apart(ReplayBackend):
        def workspace(self, problem, *a, **kw):
            ws = super().workspace(problem)
            ws.sample = lambda kern, n: n * (100.0 + 50 * top.index(kern.config.config_id))
            return ws
    tuner = Tuner(pred, TuningDB(tmp_path / "u.sqlite", create=True), Apart(rows, spec=pred.spec))
    p = tuner.tune(pred.problem(*shape), measure_top_k=3)
    assert p.config.config_id == top[0] and p.tied_with == ()


def test_a_measured_answer_read_from_the_tuning_database_keeps_its_tie_set(model_dir, dataset_dir, tmp_path):
    """Regression: another host (or a later call) that found the measured
    answer in the database was told no tie: ``tied_with`` came only with a
    measurement made in the call."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.serve.tuning import Tuner
    from costlearn.serve.tuning_db import TuningDB
    pred, rows, shape, _, p = _tie_of_two(model_dir, dataset_dir, tmp_path / "t.sqlite")

    class NeverMeasures(ReplayBackend):
        def compile_many(self, *a, **kw):
            raise AssertionError("a measured answer in the database was measured again")
    again = Tuner(pred, TuningDB(tmp_path / "t.sqlite"), NeverMeasures(rows, spec=pred.spec)).tune(
        pred.problem(*shape), measure_top_k=3)
    assert again.from_tuning_db and again.chosen_by == "measured" and again.config == p.config
    assert again.tied_with == p.tied_with != ()


def test_a_retiming_pairs_only_with_the_row_of_its_epilogue():
    """Regression: the pairing key had no epilogue, so re-timing a shape's
    bias row was compared with the same config's epilogue-free row too."""
    from costlearn.collect.dataset import _conform
    from costlearn.collect.noise import across_session_pairs
    first = _conform(pd.DataFrame(_rows([100.0], "s1", epilogue="none") + _rows([300.0], "s1", epilogue="bias")),
                     upgrade=True)
    later = _conform(pd.DataFrame(_rows([330.0], "s2", epilogue="bias")), upgrade=True)
    pairs = across_session_pairs(first, later)
    assert len(pairs) == 1 and pairs["epilogue"].tolist() == ["bias"] and np.isclose(pairs["rel_diff"].iloc[0], 0.1)


@needs_opencl
def test_recheck_retimes_an_epilogue_row_with_its_epilogue(tmp_path):
    from costlearn.collect.backends import get_backend
    from costlearn.collect.loop import collect
    from costlearn.collect.dataset import load, write_part
    from costlearn.families.gemm import GemmConfig
    from costlearn.collect.protocol import Protocol
    from costlearn.collect.noise import RECHECK_FOLDER, recheck
    import costlearn.collect.noise
    be = get_backend("opencl")
    proto = Protocol(rounds=3, max_rounds=3, min_sample_us=100.0)
    collect(be, tmp_path, shapes=[(40, 48, 24)], pool=[GemmConfig(16, 16, 8, 2, 2)], protocol=proto,
            progress=False, epilogues=("bias_relu",))
    df, _ = load(tmp_path)
    (part,) = tmp_path.glob("part-*.parquet")
    write_part(df.assign(session_id="an-earlier-session"), tmp_path)
    part.unlink()
    res = recheck(be, tmp_path, shapes=1, configs_per_shape=1, protocol=proto, seed=0)
    again, _ = load(tmp_path / RECHECK_FOLDER)
    assert res.rows_written == 1 and again["epilogue"].tolist() == ["bias_relu"] and again["status"].tolist() == ["ok"]
    pairs = costlearn.collect.noise.across_session_pairs(df.assign(session_id="x"), again)
    assert pairs["epilogue"].tolist() == ["bias_relu"]
