"""The benchmarks, studies and the GPU check run end to end (on PoCL here), as a user runs them."""
import importlib
import subprocess
import sys

from conftest import ROOT, needs_opencl

pytestmark = needs_opencl


def test_gpu_check_quick_on_opencl(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "opencl", "--quick",
                          "--configs", "3", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    md = (tmp_path / "gpu_check.md").read_text()
    assert "0 wrong" in md and "best at (384, 384, 384)" in md and (tmp_path / "gpu_check.json").is_file()


def test_bench_collect_prints_the_table_and_removes_its_folder(tmp_path):
    """The table; and the collection's folder is removed at the end (each run left a costlearn-bench-* folder in
    the temporary folder)."""
    import os
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "benchmarks.collect", "--device", "opencl",
                          "--budget", "8", "--pool", "4"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    for line in ("measurements per second (wall)", "| compile |", "| measure |", "| write |", "noise floor"):
        assert line in out.stdout
    assert not list(tmp_path.glob("costlearn-bench-*"))


def test_bench_predict_prints_the_table_and_checks_agreement(tmp_path):
    """A triton_mm model with a shortlist table (the Inductor fixture's; held out: two shapes of a second
    fixture log). (The committed gemm model, the default, takes the same path without a table.)"""
    from costlearn.interop import import_file
    from costlearn.model.artifact_layout import model_folder
    from costlearn.model.artifact_save import replace_shortlist
    from costlearn.serve.predictor import Predictor
    from costlearn.ranker.shortlist_build import build_shortlist
    from inductor_fixture import DEVICE, build_models, write_log
    tm = model_folder(build_models(tmp_path / "fixture"), DEVICE, "triton_mm", "float16")
    write_log(tmp_path / "extra.txt", shapes=[(640, 640, 640), (1280, 2560, 320)], layouts=["NN", "NT"])
    import_file("inductor", tmp_path / "extra.txt", device=DEVICE, data_root=tmp_path / "extra")
    pred = Predictor(tm)
    replace_shortlist(tm, build_shortlist(pred.ranker, pred.layouts, (4096, 4096, 4096), step=1.0, tiles=3, trees=4))
    out = subprocess.run([sys.executable, "-m", "benchmarks.predict", "--shapes", "60",
                          "--load-runs", "2", "--model", str(tm),
                          "--heldout-data", str(tmp_path / "extra" / DEVICE),
                          "--out", str(tmp_path / "b.md")], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    for line in ("**drawn like the training shapes**", "**log-uniform in [1, 16384]**",
                 "| plain: pandas features + the model's predict (the full model) |",
                 "| predict_best, unseen problem |",
                 "| predict_best, repeated problem |", "| predict_many, 30 unseen problems (per call) |",
                 "| the ranker alone (rank_served: the C call and its RankResult, no Prediction), unseen problem |",
                 "| the ranker alone (rank_many_served: one C call), 30 unseen problems (per call) |",
                 "the ranking's best equals the full model's argmin on", "| warm cache", "| empty cache",
                 "NVIDIA heuristics:", "shortlist table: 3 tiles + vendor per point, 4 trees at the query",
                 "**held-out problems**: 2 problems", "| every tree (the full model) |"):
        assert line in out.stdout, line
    assert out.stdout.count("the ranking's best equals") == 2
    assert (tmp_path / "b.md").read_text().strip() == out.stdout.strip()


def test_ood_study_flag_rates_without_measuring(tmp_path):
    out = subprocess.run([sys.executable, "-m", "studies.ood", "--shapes", "300", "--no-measure",
                          "--measure-dir", str(tmp_path / "none"), "--eval-dir", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    # Exit status 1 says a flag-rate bar was missed (the table shows which);
    # anything else is a crash.
    assert out.returncode in (0, 1), out.stdout[-2000:] + out.stderr[-2000:]
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if line.startswith("| ")}
    like = float(rows["drawn like the training shapes"].split("|")[3].strip().rstrip("%"))
    far = [float(rows[k].split("|")[3].strip().rstrip("%")) for k in
           ("outside the trained ranges", "inside the ranges, >= 2 doublings from any training shape")]
    assert out.returncode == (0 if like <= 5 and min(far) >= 95 else 1)      # the status follows the bars
    assert "| drawn like the training shapes | 300 |" in out.stdout
    assert "| outside the trained ranges | 300 |" in out.stdout


def test_the_epilogue_study_counts_a_changed_best_config_only_beyond_the_noise():
    """Shape A: with the bias the best config changes, by 20 %; shape B:
    it changes by 1 %, within a 3 % noise floor (counted as no change);
    shape C has no epilogue-free rows and is not scored."""
    import pandas as pd
    best_config_change = importlib.import_module("studies.epilogue").best_config_change
    rows = []
    for (m, e), times in {(1, "none"): [10, 12], (1, "bias"): [15, 12.5],
                          (2, "none"): [10, 20], (2, "bias"): [10.1, 10.0], (3, "bias"): [5, 6]}.items():
        rows += [dict(m=m, n=8, k=8, epilogue=e, config_id=c, time_us=t) for c, t in zip("xy", times)]
    ch = best_config_change(pd.DataFrame(rows), noise=0.03).set_index("m")
    assert ch.loc[1, "changed"] and abs(ch.loc[1, "regret"] - 0.2) < 1e-12
    assert not ch.loc[2, "changed"] and ch.loc[2, "regret"] == 0.0
    assert 3 not in ch.index and abs(ch.loc[1, "slowdown"] - ((1.5 + 12.5 / 12) / 2 - 1)) < 1e-12


def test_the_pocl_strategy_study_runs_both_strategies_and_reports_a_run(tmp_path):
    """Regression: the study passed no active settings after the ensemble moved
    to learn/, and nothing ran it before its hour-long run. Problems, not
    seconds, bound the collections: a busy machine measured too few in 12 s
    for train's 50 rows."""
    out = subprocess.run([sys.executable, "-m", "studies.strategy_pocl", "--work", str(tmp_path),
                          "--report", str(tmp_path / "r.md"), "--runs", "1", "--budget", "600", "--max-problems",
                          "24", "--pool", "6", "--first-round", "3", "--eval-random", "1", "--eval-budget", "120"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = (tmp_path / "r.md").read_text()
    assert "| run | random: problems |" in report and "runs (mean top-1 geomean: random" in report
    points = (tmp_path / "points.csv").read_text().splitlines()
    assert len(points) == 3 and points[1].startswith("0,random,") and points[2].startswith("0,active,")


def test_bench_tuning_db_prints_both_stores_and_the_server_away(tmp_path, pg_server):
    """A small run (2 clients x 300 operations) against a throwaway server of its own and an SQLite file."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.tuning_db", "--clients", "2", "--ops", "300",
                          "--out", str(tmp_path / "bench.md")], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    md = (tmp_path / "bench.md").read_text()
    for line in ("| PostgreSQL |", "| SQLite |", "| predict_best |", "the tuning database was not read"):
        assert line in md
