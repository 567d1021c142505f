import math

import numpy as np
import pandas as pd
import pytest

from costlearn.learn.metrics import evaluate_rows, shape_metrics, summarize, topk_regret


def test_topk_regret_by_hand():
    true = np.array([10.0, 12.0, 20.0, 11.0])
    pred = np.array([3.0, 1.0, 2.0, 4.0])          # model ranks 12, 20, 10, 11
    assert topk_regret(pred, true, 1) == pytest.approx(0.2)
    assert topk_regret(pred, true, 2) == pytest.approx(0.2)
    assert topk_regret(pred, true, 3) == 0.0
    assert topk_regret(pred, true, 1, noise_rel=0.25) == 0.0     # within noise: a tie


def test_shape_metrics_perfect_ranking():
    t = np.array([5.0, 1.0, 3.0])
    s = shape_metrics(t, t)
    assert s["top1_regret"] == 0 and s["kendall_tau"] == pytest.approx(1.0) and s["mape"] == 0


def test_summary_tenset_score_and_geomean():
    per = pd.DataFrame(dict(top1_regret=[0.0, 1.0], top5_regret=[0.0, 0.0], top10_regret=[0.0, 0.0],
                            top1_time_us=[1.0, 20.0], top5_time_us=[1.0, 10.0], top10_time_us=[1.0, 10.0],
                            best_time_us=[1.0, 10.0], kendall_tau=[1.0, 0.0], mape=[0.0, 0.5]))
    s = summarize(per)
    assert s["top1_mean"] == 0.5 and s["top1_geomean"] == pytest.approx(math.sqrt(2) - 1)
    assert s["tenset_top1"] == pytest.approx(11 / 21)


def test_score_model_and_baselines_on_replayed_rows(model_dir, dataset_rows):
    from costlearn.learn.evaluate import format_per_shape, format_table, score
    shapes = dataset_rows[["m", "n", "k"]].drop_duplicates().iloc[:6]
    rows = dataset_rows.merge(shapes, on=["m", "n", "k"])
    res = score(model_dir, rows)
    assert set(res.per_shape["model"]) == {"xgboost", "roofline", "best_fixed", "random"}
    assert res.models == ["xgboost", "roofline", "best_fixed", "random"]
    assert (res.per_shape["top1_regret"] >= 0).all()
    assert "xgboost" in format_table(res) and "| M |" in format_per_shape(res)


PUBLISHED_ALL = (0.011, 0.011, 0.0)
"""reports/pocl_eval.md's xgboost line: top-1 mean, top-1 geomean, top-5 mean."""


def test_committed_evaluation_rescores_to_the_published_numbers(model_dir, dataset_dir):
    """The committed model re-scored on the committed fresh measurements (ties
    at their across-session floor, from eval-epilogues/recheck/) gives the
    published table: `costlearn evaluate --no-measure ... --out <data>/eval-epilogues`."""
    from costlearn.collect.dataset import load
    from costlearn.learn.evaluate import score
    folder = dataset_dir / "eval-epilogues"
    res = score(model_dir, load(folder)[0], data=folder)
    s = res.summary["xgboost"]["all"]
    assert s["shapes"] == 116 and res.noise_floors.pairs > 0 and res.noise_floor == res.noise_floors.across_shape
    assert (round(s["top1_mean"], 3), round(s["top1_geomean"], 3), round(s["top5_mean"], 3)) == PUBLISHED_ALL
    assert [res.summary["xgboost"][f"epilogue {e}"]["shapes"] for e in ("none", "bias", "bias_relu", "bias_gelu")] \
        == [29] * 4


def test_the_per_problem_table_names_each_problems_epilogue(model_dir, dataset_dir):
    """Regression: with several epilogues a shape has several rows, and the
    per-shape table failed (int() of a Series) instead of listing each."""
    from costlearn.collect.dataset import load
    from costlearn.learn.evaluate import format_per_shape, score
    res = score(model_dir, load(dataset_dir / "eval-epilogues")[0])
    lines = format_per_shape(res).splitlines()
    assert lines[0].startswith("| M | N | K | epilogue | class |") and len(lines) == 2 + 116
    assert {ln.split(" | ")[3] for ln in lines[2:]} == {"none", "bias", "bias_relu", "bias_gelu"}


def test_collect_through_replay_resumes_without_remeasuring(dataset_dir, dataset_rows, tmp_path):
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    from costlearn.families.gemm import GemmConfig as TileConfig
    shapes = [tuple(int(x) for x in s) for s in dataset_rows[["m", "n", "k"]].drop_duplicates().iloc[:3].to_numpy()]
    pool = [TileConfig.from_id(c) for c in sorted(dataset_rows["config_id"].unique())]
    be = ReplayBackend(dataset_dir)
    first = collect(be, tmp_path, shapes=shapes, pool=pool, configs_per_shape=len(pool), progress=False)
    assert first.rows_written > 0 and first.problems_done == 3
    # Replayed rows keep their recorded times and say they are a replay.
    from costlearn.collect.dataset import load
    df, _ = load(tmp_path)
    assert (df["api"] == "replay").all()
    again = collect(be, tmp_path, shapes=shapes, pool=pool, configs_per_shape=len(pool), progress=False)
    assert again.rows_written == 0 and again.skipped == first.rows_written


def test_collect_with_compilation_overlapped_gives_the_same_rows(dataset_dir, dataset_rows, tmp_path):
    """The GPU path: the pool compiles in background threads while shapes are measured."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    from costlearn.collect.dataset import load
    from costlearn.families.gemm import GemmConfig as TileConfig
    shapes = [tuple(int(x) for x in s) for s in dataset_rows[["m", "n", "k"]].drop_duplicates().iloc[:4].to_numpy()]
    pool = [TileConfig.from_id(c) for c in sorted(dataset_rows["config_id"].unique())]
    results = {}
    for overlap in (False, True):
        be = ReplayBackend(dataset_dir)
        be.overlap_compile = overlap
        collect(be, tmp_path / str(overlap), shapes=shapes, pool=pool, configs_per_shape=len(pool), progress=False)
        df, _ = load(tmp_path / str(overlap))
        results[overlap] = df.sort_values(["m", "n", "k", "config_id"])[["m", "n", "k", "config_id", "time_us"]]
    assert len(results[True]) > 0
    pd.testing.assert_frame_equal(results[True].reset_index(drop=True), results[False].reset_index(drop=True))


def test_report_tables_and_plots_from_replayed_rows(model_dir, dataset_rows, tmp_path):
    pytest.importorskip("matplotlib")
    from costlearn.learn.evaluate import format_by_class, score, write_plots, write_report
    shapes = dataset_rows[["m", "n", "k"]].drop_duplicates().iloc[:8]
    res = score(model_dir, dataset_rows.merge(shapes, on=["m", "n", "k"]))
    assert "| shape class |" in format_by_class(res)
    files = write_plots(res, tmp_path)
    assert [f.name for f in files] == ["predicted_vs_measured.png", "top1_regret_cdf.png", "regret_by_class.png"]
    assert all(f.stat().st_size > 10_000 and f.read_bytes()[:4] == b"\x89PNG" for f in files)
    text = write_report(res, tmp_path / "r.md").read_text()
    assert "Noise floor" in text and "## By shape class" in text and (tmp_path / "r.csv").is_file()


def test_evaluate_rows_by_hand_on_two_shapes():
    rows = pd.DataFrame(dict(m=[1, 1, 1, 8, 8], n=[4, 4, 4, 8, 8], k=[4, 4, 4, 8, 8],
                             time_us=[10.0, 20.0, 12.0, 5.0, 4.0]))
    pred = np.array([3.0, 1.0, 2.0, 1.0, 2.0])   # shape 1 picks 20 then 12; shape 2 picks 5
    per = evaluate_rows(rows, pred).set_index(["m", "n", "k"])
    assert per.loc[(1, 4, 4), "top1_regret"] == pytest.approx(1.0)
    assert per.loc[(1, 4, 4), "top5_regret"] == 0.0
    assert per.loc[(8, 8, 8), "top1_regret"] == pytest.approx(0.25)
    assert per.loc[(1, 4, 4), "n_candidates"] == 3
    s = summarize(per.reset_index())
    assert s["top1_mean"] == pytest.approx(0.625)
    assert s["tenset_top1"] == pytest.approx((10 + 4) / (20 + 5))
    # a 30 % noise floor makes the 25 % regret a tie, not the 100 % one
    assert evaluate_rows(rows, pred, noise_rel=0.3)["top1_regret"].tolist() == [1.0, 0.0]


def test_a_config_measured_in_several_sessions_counts_once_with_its_median():
    """Regression: an imported log holds each (problem, config) up to three
    times; evaluation must rank configs, not rows, and keep layouts apart."""
    import pandas as pd
    from costlearn.learn.metrics import evaluate_rows
    rows = pd.DataFrame(dict(m=8, n=8, k=8, dtype="float16", layout=["NN"] * 5 + ["TN"] * 2,
                             config_id=["a", "a", "a", "b", "b", "a", "b"],
                             time_us=[10.0, 30.0, 11.0, 10.5, 10.5, 5.0, 4.0]))
    per = evaluate_rows(rows, np.array([1, 1, 1, 2, 2, 2, 1], float))   # predicts a first on NN, b on TN
    assert per["layout"].tolist() == ["NN", "TN"] and per["n_candidates"].tolist() == [2, 2]
    assert per["best_time_us"].tolist() == [10.5, 4.0]            # a's median 11.0, not its 10.0 minimum
    assert per.loc[0, "top1_regret"] == pytest.approx(11.0 / 10.5 - 1) and per.loc[1, "top1_regret"] == 0.0


def test_vendor_regret_is_reported_against_the_best_tile_config_and_the_best_of_all():
    import pandas as pd
    from costlearn.learn.metrics import vendor_only_scores, vendor_summaries
    rows = pd.DataFrame(dict(m=[8] * 3 + [16] * 3, n=8, k=8, dtype="float16", layout="NN",
                             config_id=["vendor", "x", "y"] * 2, time_us=[9.0, 10.0, 12.0, 20.0, 10.0, 11.0]))
    pred = np.array([3.0, 1.0, 2.0, 3.0, 1.0, 2.0])                 # always picks x
    s = vendor_summaries(rows, pred)
    assert s["tile_only"]["top1_max"] == 0.0                       # x is the best tile config on both
    assert s["all"]["top1_max"] == pytest.approx(10.0 / 9.0 - 1)  # the library beat it on the first
    v = vendor_summaries(rows, vendor_only_scores(rows))["all"]
    assert v["top1_max"] == pytest.approx(20.0 / 10.0 - 1)


def test_a_report_opens_with_the_model_the_data_and_a_noise_warning(tmp_path, model_dir):
    """out/report.md had no header, and a 14 % noise floor turned
    every smaller regret into 0.0 % without a word."""
    from costlearn.collect.dataset import load
    from costlearn.learn.evaluate import score, write_report
    from conftest import committed_dataset
    evald = committed_dataset() / "eval"
    if not evald.is_dir():
        pytest.skip("no committed eval/ measurements")
    res = score(model_dir, load(evald)[0], data=evald)
    text = write_report(res, tmp_path / "r.md").read_text()
    head = text.splitlines()[:6]
    assert head[0] == "# costlearn evaluation"
    assert any(line.startswith("Model: ") and res.model_info["sha256"] in line and "trained on" in line
               and "models/" + "/".join(model_dir.parts[-3:]) in line
               and f"for the device {res.model_info['device_name']}" in line
               for line in head)                                          # where the model is stored, its device
    assert any(line.startswith("Evaluated: ") and "costlearn " in line and f"from {evald}" in line
               for line in head)                                          # which data was evaluated
    raw = evaluate_rows(res.rows, res.predictions[res.model])["top1_regret"].to_numpy()    # no noise tie
    assert res.hidden_by_noise == int(((raw > 0) & (raw <= res.noise_floor)).sum())
    res.hidden_by_noise = 3                                  # the warning follows the count
    assert "hides the model's top-1 regret on 3 of" in write_report(res, tmp_path / "w.md").read_text()


def test_evaluate_no_measure_defaults_to_the_measurements_devices_model(tmp_path, capsys):
    """Regression (found by a new user): with a store of several devices' models, `evaluate --no-measure`
    demanded --model although its help promised a default; it now scores with the model of --out's device."""
    import shutil

    from costlearn.cli import main
    from inductor_fixture import DEVICE, build_models
    models = build_models(tmp_path)
    shutil.copytree(models / DEVICE, models / "h100")                  # a second device in the store
    assert main(["evaluate", "--no-measure", "--family", "triton_mm", "--dtype", "float16", "--models", str(models),
                 "--data", str(tmp_path / "data" / DEVICE)]) == 0
    assert f"Model: {DEVICE}/triton_mm/float16" in capsys.readouterr().out



def test_evaluate_refuses_to_measure_on_another_device_than_the_models(model_dir, dataset_dir, tmp_path):
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.core.device import preset
    from costlearn.learn.evaluate import evaluate
    rows = ReplayBackend(dataset_dir).rows
    with pytest.raises(ValueError, match="--no-measure"):
        evaluate(ReplayBackend(rows, spec=preset("h200")), model_dir, tmp_path, progress=False)


def test_evaluate_no_measure_scores_existing_rows_without_a_device(model_dir, device_name, capsys):
    from costlearn.cli import main
    eval_dir = model_dir.parents[3] / "data" / device_name / "eval"
    if not eval_dir.is_dir():
        pytest.skip("no committed eval measurements")
    assert main(["evaluate", "--no-measure", "--model", device_name, "--data", str(eval_dir)]) == 0
    assert "| xgboost |" in capsys.readouterr().out


def test_evaluate_no_measure_refuses_an_out_it_would_not_write(dataset_dir, capsys):
    """Regression: `evaluate --no-measure --data D --out report.md` exited 0 and wrote nothing."""
    from costlearn.cli import main
    assert main(["evaluate", "--no-measure", "--data", str(dataset_dir), "--out", "report.md"]) == 2
    assert "--report FILE writes the report" in capsys.readouterr().err
