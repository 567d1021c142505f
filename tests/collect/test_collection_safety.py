"""Collection never loses data: kill -9 mid-run, concurrent writers."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, default_ctrl_c, needs_opencl
from costlearn.collect.dataset import KEY_COLUMNS, load
from costlearn.collect.protocol import Protocol
from costlearn.families.gemm import GemmConfig as TileConfig

_WRITER = r"""
import sys
sys.path.insert(0, {root!r})
from costlearn.collect.dataset import write_part
from conftest import dataset_row as _row
w = int(sys.argv[1])
for p in range(10):
    write_part([_row(m=1000 * w + 25 * p + i) for i in range(25)], sys.argv[2])
"""


def test_four_concurrent_writers_lose_nothing(tmp_path):
    code = _WRITER.format(root=str(ROOT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(w), str(tmp_path)], env=env) for w in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    df, rep = load(tmp_path)
    assert len(df) == 1000 and df["m"].nunique() == 1000 and rep.parts == 40 and not rep.corrupt


@needs_opencl
def test_kill_9_mid_collection_leaves_a_loadable_dataset_and_a_rerun_measures_nothing_twice(tmp_path):
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "costlearn", "collect", "--device", "opencl", "--data", str(data),
           "--pool", "6", "--max-extent", "48", "--rounds", "2", "--budget", "300", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    parts = []
    while time.monotonic() < deadline:
        parts = list(data.glob("*/part-*.parquet"))
        if len(parts) >= 3:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(parts) >= 3, "collector wrote nothing within 240 s"
    folder = parts[0].parent
    first, rep = load(folder, strict=True)
    assert not rep.corrupt and len(first) > 0
    # A rerun resumes: every key is measured once over both runs.
    subprocess.run(cmd[:-3] + ["--budget", "8", "--no-progress"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    both, rep = load(folder, strict=True)
    assert len(both) > len(first)
    assert not both.duplicated(subset=list(KEY_COLUMNS)).any()


@needs_opencl
def test_ctrl_c_says_how_many_rows_it_saved(tmp_path):
    """Ctrl-C said "everything measured so far is saved" but not
    how much, nor that the same command resumes."""
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "costlearn", "collect", "--device", "opencl", "--data", str(data),
           "--pool", "6", "--max-extent", "48", "--rounds", "2", "--budget", "300", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_ctrl_c)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list(data.glob("*/part-*.parquet"))) < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    rows = len(load(next(data.glob("*/device.json")).parent)[0])
    assert f"interrupted: {rows} new rows over" in err and "resumes" in err, err[-500:]


def test_a_second_candidate_pool_in_one_folder_is_reported(tmp_path):
    from costlearn.collect.loop import record_pool
    from costlearn.families.gemm import GemmConfig
    a = [GemmConfig(16, 16, 8, 2, 2), GemmConfig(32, 32, 8, 4, 4)]
    b = [GemmConfig(64, 64, 16, 4, 4)]
    assert record_pool(tmp_path, "gemm", "float32", 0, a) == []
    assert record_pool(tmp_path, "gemm", "float32", 0, list(reversed(a))) == []     # the same pool again
    others = record_pool(tmp_path, "gemm", "float32", 1, b)
    assert [(p["seed"], p["size"]) for p in others] == [(0, 2)]
    assert record_pool(tmp_path, "gemm", "float16", 1, b) == []                      # another dtype is its own
    (tmp_path / "pools.json").write_text("{not json")                                 # a corrupt record is rewritten
    assert record_pool(tmp_path, "gemm", "float32", 0, a) == []


def _replay_setup(dataset_dir, dataset_rows, n_shapes):
    from costlearn.families.gemm import GemmConfig
    counts = dataset_rows.groupby(["m", "n", "k"]).size().sort_values(ascending=False, kind="stable")
    shapes = [tuple(int(x) for x in s) for s in counts.index[:n_shapes]]          # shapes with many configs
    on = dataset_rows.set_index(["m", "n", "k"]).loc[shapes]
    common = set.intersection(*(set(g["config_id"]) for _, g in on.groupby(level=[0, 1, 2])))
    pool = [GemmConfig.from_id(c) for c in sorted(common)[:6]]             # measured on every shape
    return shapes, pool


def test_an_interrupted_resumed_collection_counts_what_it_skipped(dataset_dir, dataset_rows, tmp_path):
    """Ctrl-C in a resumed run named the new rows only, so a user
    could not tell the earlier run's rows were still there."""
    import pytest
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    from costlearn.collect.summary import CollectionInterrupted
    shapes, pool = _replay_setup(dataset_dir, dataset_rows, 3)
    first = collect(ReplayBackend(dataset_dir), tmp_path, shapes=shapes[:2], pool=pool, configs_per_shape=6,
                    progress=False)

    class CtrlC(ReplayBackend):
        def workspace(self, problem, *a, **kw):
            if problem.shape == shapes[2]:
                raise KeyboardInterrupt
            return super().workspace(problem, *a, **kw)
    with pytest.raises(CollectionInterrupted) as e:
        collect(CtrlC(dataset_dir), tmp_path, shapes=shapes, pool=pool, configs_per_shape=6, progress=False)
    assert e.value.result.skipped == first.rows_written > 0
    assert f"0 new rows over 0 problems saved in {tmp_path} ({first.rows_written} already measured" in str(e.value)


def test_a_collection_past_its_budget_says_why(dataset_dir, dataset_rows, tmp_path, capsys):
    """A shape started inside --budget (the first compiles the whole
    pool) ran past it without a word."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.cli.collect import print_collect_result
    from costlearn.collect.loop import collect
    shapes, pool = _replay_setup(dataset_dir, dataset_rows, 1)

    class SlowCompile(ReplayBackend):
        def compile_many(self, configs, dtype, epilogue="none"):
            time.sleep(1.5)
            return super().compile_many(configs, dtype, epilogue=epilogue)
    res = collect(SlowCompile(dataset_dir), tmp_path, shapes=shapes, pool=pool, configs_per_shape=6, budget_s=0.5,
                  progress=False)
    assert res.over_budget_s >= 1.0 and res.problems_done == 1
    print_collect_result(res, tmp_path, "gemm", "float32", seed=0)
    assert "more than --budget 0: a shape started inside the budget" in capsys.readouterr().err


_HOLDER = r"""
import sys, time
sys.path.insert(0, {root!r})
from costlearn.collect.backends.replay import ReplayBackend
from costlearn.collect.loop import collect
from costlearn.families.gemm import GemmConfig


class Slow(ReplayBackend):
    def compile_many(self, configs, dtype, epilogue="none"):
        print("compiling", flush=True)
        time.sleep(120)
        return super().compile_many(configs, dtype, epilogue=epilogue)


shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
pool = [GemmConfig.from_id(c) for c in sys.argv[4].split(",")]
collect(Slow(sys.argv[1]), sys.argv[2], shapes=shapes, pool=pool, configs_per_shape=6, progress=False)
"""


def test_two_collectors_on_one_folder_do_not_both_measure_and_a_killed_one_leaves_no_lock(dataset_dir, dataset_rows,
                                                                                         tmp_path):
    """Two `costlearn collect` on one folder at once measured every
    config twice (66 rows, 33 duplicates). The second now stops with
    FolderBusy naming the first; kill -9 of the first leaves nothing stuck,
    and the next run measures every config once."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    from costlearn.collect.plan import LOCK_FILE
    from costlearn.core.locks import FolderBusy
    shapes, pool = _replay_setup(dataset_dir, dataset_rows, 2)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER.format(root=str(ROOT)), str(dataset_dir), str(tmp_path),
                               ",".join("x".join(map(str, s)) for s in shapes), ",".join(c.config_id for c in pool)],
                              env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "compiling"          # it holds the folder, mid-collection
        with pytest.raises(FolderBusy, match=f"pid {holder.pid} since .*a collection"):
            collect(ReplayBackend(dataset_dir), tmp_path, shapes=shapes, pool=pool, configs_per_shape=6,
                    progress=False)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    assert (tmp_path / LOCK_FILE).exists()                               # left behind, but not held
    res = collect(ReplayBackend(dataset_dir), tmp_path, shapes=shapes, pool=pool, configs_per_shape=6, progress=False)
    again = collect(ReplayBackend(dataset_dir), tmp_path, shapes=shapes, pool=pool, configs_per_shape=6,
                    progress=False)
    df, _ = load(tmp_path)
    assert res.rows_written == len(df) == 12 and again.rows_written == 0
    assert not df.duplicated(list(KEY_COLUMNS)).any()


A = TileConfig(64, 64, 16, 4, 4)


def test_resume_key_includes_the_input_distribution(dataset_dir, dataset_rows, tmp_path):
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    shape = tuple(int(x) for x in dataset_rows[["m", "n", "k"]].iloc[0])
    same = (dataset_rows["m"] == shape[0]) & (dataset_rows["n"] == shape[1]) & (dataset_rows["k"] == shape[2])
    pool = [TileConfig.from_id(c) for c in dataset_rows.loc[same, "config_id"]]
    be = ReplayBackend(dataset_dir)
    first = collect(be, tmp_path, shapes=[shape], pool=pool, progress=False)
    sparse = collect(be, tmp_path, shapes=[shape], pool=pool, progress=False,
                     protocol=Protocol(distribution="sparse", density=0.1))
    assert first.rows_written == sparse.rows_written > 0


def test_collect_stops_cleanly_when_the_device_is_lost_and_keeps_earlier_shapes(dataset_dir, dataset_rows, tmp_path):
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    from costlearn.collect.dataset import load
    shapes = [tuple(int(x) for x in s) for s in dataset_rows[["m", "n", "k"]].drop_duplicates().iloc[:3].to_numpy()]
    pool = [TileConfig.from_id(c) for c in sorted(dataset_rows["config_id"].unique())]

    class LosesDevice(ReplayBackend):
        def workspace(self, problem, *a, **kw):
            ws = super().workspace(problem)
            if problem.shape == shapes[1]:
                def boom(kern):
                    raise RuntimeError("cudaErrorIllegalAddress")
                ws.verify = boom
            return ws
    res = collect(LosesDevice(dataset_dir), tmp_path, shapes=shapes, pool=pool, progress=False)
    assert "device context lost" in res.stopped and res.problems_done == 1
    df, _ = load(tmp_path)
    assert set(map(tuple, df[["m", "n", "k"]].drop_duplicates().to_numpy())) == {shapes[0]}


@pytest.mark.slow
def test_a_short_budget_measures_its_first_epilogue_instead_of_compiling_the_others(dataset_dir, dataset_rows,
                                                                                   tmp_path):
    """Regression: the README's `collect --budget 120` collected 7 rows on 2 cores: compiling the pools of the
    four epilogues took 184 s, past the whole budget. An epilogue is brought in only while its compile, estimated
    from the pools compiled so far, fits a quarter of the budget left."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import EPILOGUES, collect
    from costlearn.collect.dataset import load
    _, pool = _replay_setup(dataset_dir, dataset_rows, 1)

    class SlowCompile(ReplayBackend):
        seconds = 0.4

        def compile_many(self, configs, dtype, epilogue="none"):
            time.sleep(self.seconds)
            return super().compile_many(configs, dtype, epilogue=epilogue)
    res = collect(SlowCompile(dataset_dir), tmp_path / "short", pool=pool, configs_per_shape=2, budget_s=1.2,
                  progress=False, epilogues=EPILOGUES)
    assert res.problems_done >= 1 and res.epilogues_left_out == list(EPILOGUES[1:])
    assert set(load(tmp_path / "short")[0]["epilogue"]) == {"none"}
    SlowCompile.seconds = 0.02                                        # a cheap compile: every epilogue comes in
    res = collect(SlowCompile(dataset_dir), tmp_path / "long", pool=pool, configs_per_shape=2, budget_s=60,
                  progress=False, epilogues=EPILOGUES, max_problems=40)
    assert res.epilogues_left_out == [] and set(load(tmp_path / "long")[0]["epilogue"]) == set(EPILOGUES)


@pytest.mark.slow
def test_a_warm_compile_cache_of_one_epilogue_does_not_bring_in_a_cold_one_past_the_budget(dataset_dir, dataset_rows,
                                                                                          tmp_path):
    """Regression (a fresh-clone user on PoCL): `collect --budget 60` brought in bias_gelu at 33 s because the
    `none` pool had compiled in 3 s from PoCL's kernel cache (the main job's kernels); bias_gelu's pool then
    compiled for 48 s. Before an epilogue comes in, one config of it is compiled and timed."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import EPILOGUES, collect
    from costlearn.collect.dataset import load
    _, pool = _replay_setup(dataset_dir, dataset_rows, 1)
    compiled = []

    class WarmNone(ReplayBackend):
        cold_s = 1.0                                        # a config of another epilogue: not in the cache

        def compile_many(self, configs, dtype, epilogue="none"):
            compiled.extend((c.config_id, epilogue) for c in configs)
            time.sleep(0.0 if epilogue == "none" else self.cold_s * len(configs))
            return super().compile_many(configs, dtype, epilogue=epilogue)
    t0 = time.monotonic()
    res = collect(WarmNone(dataset_dir), tmp_path / "cold", pool=pool, configs_per_shape=2, budget_s=6.0,
                  progress=False, epilogues=EPILOGUES)
    took = time.monotonic() - t0
    # the probe: one config of the second epilogue (1 s; its pool of 6 would be 6 s, over a quarter of the budget)
    assert res.epilogues_left_out == list(EPILOGUES[1:]) and took < 6.0 + 2.0, took
    assert [e for _, e in compiled if e != "none"] == [EPILOGUES[1]]
    assert set(load(tmp_path / "cold")[0]["epilogue"]) == {"none"}
    WarmNone.cold_s, compiled[:] = 0.0, []                  # every epilogue's kernels cached: all come in
    res = collect(WarmNone(dataset_dir), tmp_path / "warm", pool=pool, configs_per_shape=2, budget_s=60,
                  progress=False, epilogues=EPILOGUES, max_problems=40)
    assert res.epilogues_left_out == [] and set(load(tmp_path / "warm")[0]["epilogue"]) == set(EPILOGUES)
    assert len(compiled) == len(set(compiled))              # the probed config is not compiled again

@pytest.mark.slow
def test_a_large_pool_compiles_while_the_budget_lasts_not_to_its_end(dataset_dir, dataset_rows, tmp_path,
                                                                      monkeypatch):
    """`collect --pool 100000000 --budget 10` was still compiling after 150 s: the first problem
    compiled the whole pool before anything was measured. Past the first problem's configs the pool now compiles
    in batches while the budget lasts (here a batch is 2 configs, each config 1 s). The budget counts from the
    call, setup included: it was 0.15 s here, and a loaded 2-core machine once spent that before the first
    problem (nothing measured); the budgets leave setup 0.6 s now."""
    import costlearn.collect.local as local
    import costlearn.collect.loop as loop
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.dataset import load
    shapes, pool = _replay_setup(dataset_dir, dataset_rows, 1)
    monkeypatch.setattr(local, "COMPILE_BATCH", 2)
    compiled = []

    class SlowCompile(ReplayBackend):
        def compile_many(self, configs, dtype, epilogue="none"):
            time.sleep(1.0 * len(configs))
            compiled.extend(configs)
            return super().compile_many(configs, dtype, epilogue=epilogue)
    res = loop.collect(SlowCompile(dataset_dir), tmp_path / "a", shapes=shapes, pool=pool, configs_per_shape=1,
                       budget_s=0.6, progress=False)
    assert res.problems_done == 1 and len(load(tmp_path / "a")[0]) >= 1
    assert len(compiled) < len(pool) == 6, [c.config_id for c in compiled]
    # A batch starts only where it is expected to end inside the budget (attack: a batch started with 10 s left
    # took 130 s): 1 s for the problem's config, then one batch of 2 (2 s expected, 3 s less setup left), no more.
    compiled.clear()
    loop.collect(SlowCompile(dataset_dir), tmp_path / "b", shapes=shapes, pool=pool, configs_per_shape=1,
                 budget_s=4.0, progress=False)
    assert len(compiled) == 3, [c.config_id for c in compiled]


def test_collect_says_the_real_pool_size_and_spreads_a_large_pool_over_shapes(capsys):
    """`collect --pool 100000000` printed "pool 100000000 configs" (22,760 were recorded), and measured
    every config of that pool on each shape (configs per shape defaulted to the pool)."""
    from costlearn.cli.collect import _collection_defaults
    from costlearn.collect.space import enumerate_space
    from costlearn.core.device import preset
    spec = preset("h200")
    feasible = len(enumerate_space(spec, family="triton_mm", dtype="float16").configs)
    _, _, size, per_shape = _collection_defaults(spec, "data", "triton_mm", "float16", 10 ** 8, None, None, None)
    assert size == feasible and per_shape == 160
    assert f"runs {feasible} triton_mm/float16 configs; the pool is all of them" in capsys.readouterr().err
    assert _collection_defaults(spec, "data", "triton_mm", "float16", 64, 10, None, None)[2:] == (64, 10)
    assert _collection_defaults(spec, "data", "triton_mm", "float16", None, None, None, None)[2:] == (160, 160)


def test_the_collect_summary_counts_problems_by_that_name_and_the_old_one_still_reads():
    """CollectResult.shapes_done counted problems (a shape with one epilogue); it is problems_done now."""
    from costlearn.collect.summary import CollectResult
    res = CollectResult(problems_done=3)
    assert res.problems_done == res.shapes_done == 3


def test_max_shapes_was_a_count_of_problems_and_still_reads_as_max_problems():
    """``collect(max_shapes=...)`` counted problems (a shape with one
    epilogue); the limit is ``max_problems`` now and the old keyword still
    works, with a DeprecationWarning; both at once is an error."""
    from costlearn.collect.plan import problems_limit
    assert problems_limit(3, None) == 3 and problems_limit(None, None) is None
    with pytest.warns(DeprecationWarning, match="max_problems"):
        assert problems_limit(None, 5) == 5
    with pytest.raises(ValueError, match="max_problems=3 and max_shapes=5"):
        problems_limit(3, 5)
