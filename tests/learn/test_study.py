"""costlearn.learn.study and its commands: what predict_best answers, scored by log
(evaluate --no-measure), and leave one log out (costlearn study), on
synthetic Inductor fixture logs (tests/inductor_fixture.py; not
measurements)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from costlearn.learn.study import TOP_K, by_source, decision_scores, format_by_source, leave_one_log_out

from inductor_fixture import DEVICE, SHAPE_LAYOUTS, SHAPES, write_log

FAST = dict(n_estimators=40, learning_rate=0.3, max_depth=3, early_stopping_rounds=10)


@pytest.fixture(scope="module")
def two_logs(tmp_path_factory):
    """A dataset folder holding two imported logs of different shapes."""
    from costlearn.interop import import_file
    tmp = tmp_path_factory.mktemp("study")
    write_log(tmp / "zoo_a.txt")
    write_log(tmp / "zoo_b.txt", shapes=[(m * 3, n, k * 2) for m, n, k in SHAPES], layouts=SHAPE_LAYOUTS)
    for f in ("zoo_a.txt", "zoo_b.txt"):
        import_file("inductor", tmp / f, device=DEVICE, data_root=tmp / "data")
    return tmp


def test_leave_one_log_out_scores_each_log_with_a_model_that_never_saw_it(two_logs, tmp_path):
    from costlearn.model.xgb import XGBParams
    res = leave_one_log_out(two_logs / "data" / DEVICE, tmp_path / "work", dtypes=["float16"],
                            settings=dict(params=XGBParams(**FAST)))
    t = res.table.set_index("source")
    assert set(t.index) == {"zoo_a.txt", "zoo_b.txt", "all"}
    assert t.loc["zoo_a.txt", "problems"] == len(SHAPES) and t.loc["all", "problems"] == 2 * len(SHAPES)
    for col in ("top1", f"top{TOP_K}", "prune", "vendor_only", "best_fixed"):
        assert np.isfinite(t[col]).all() and (t[col] >= 0).all(), col
    assert (t[f"top{TOP_K}"] <= t["top1"] + 1e-12).all()
    # the fold that left zoo_a out was trained on zoo_b only
    import json
    side = json.loads((tmp_path / "work" / "float16" / "without-zoo_a" / DEVICE / "triton_mm" / "float16"
                       / "model.json").read_text())
    assert side["training"]["sources"] == ["zoo_b.txt"] and side["training"]["excluded_sources"] == ["zoo_a.txt"]
    text = res.format()
    assert "float16: each log scored by a model trained on the others" in text and "zoo_b.txt" in text


def test_a_single_log_cannot_be_left_out_and_says_so(tmp_path):
    from costlearn.interop import import_file
    write_log(tmp_path / "only.txt")
    import_file("inductor", tmp_path / "only.txt", device=DEVICE, data_root=tmp_path / "data")
    with pytest.raises(ValueError, match="needs two"):
        leave_one_log_out(tmp_path / "data" / DEVICE, tmp_path / "work")


def test_an_unmeasured_pick_is_counted_not_scored():
    per = pd.DataFrame(dict(source="x.txt", top1_regret=[0.1, np.nan], top1_regret_tile=[0.0, np.nan],
                            **{f"top{TOP_K}_regret": [0.0, 0.05]}, prune_regret=[0.1, 0.2],
                            vendor_regret=[0.0, 0.3], best_fixed_regret=[0.0, 0.3], ood=[False, True],
                            pick=["vendor", "m64n64k32_w4_s3_g8"], pick_measured=[True, False]))
    t = by_source(per).iloc[0]
    assert t["unmeasured"] == 1 and t["top1"] == pytest.approx(0.1) and t["flagged"] == 0.5
    assert "| x.txt | 2 | 10.00% |" in format_by_source(by_source(per))


def test_cli_study_and_evaluate_no_measure_by_log(two_logs, tmp_path, capsys, monkeypatch):
    import costlearn.learn.study as study_mod
    from costlearn.learn import train as train_mod
    from costlearn.cli import main
    from costlearn.model.xgb import XGBParams
    real = train_mod.train

    def fast_train(*a, **kw):                # the CLI trains with the product's settings; fewer trees here
        kw["settings"] = dict(params=XGBParams(**FAST))
        return real(*a, **kw)

    monkeypatch.setattr(study_mod, "train", fast_train)        # where leave_one_log_out looks it up
    data = str(two_logs / "data" / DEVICE)
    report = tmp_path / "study.md"
    assert main(["study", "--data", data, "--dtype", "float16", "--out", str(tmp_path / "w"),
                 "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "| zoo_a.txt | 12 |" in out and "picks never measured" in out
    assert report.is_file() and report.with_suffix(".csv").is_file()
    models = str(tmp_path / "w" / "float16" / "without-zoo_a")
    # evaluate --no-measure: no --model needed where the store holds one device's model
    assert main(["evaluate", "--no-measure", "--family", "triton_mm", "--dtype", "float16", "--models", models,
                 "--data", data]) == 0
    out = capsys.readouterr().out
    assert "What predict_best answers" in out and "| zoo_a.txt | 12 |" in out and "| zoo_b.txt | 12 |" in out


def test_scoring_a_folder_without_the_models_dtype_names_what_it_holds(two_logs, tmp_path):
    from costlearn.learn.evaluate import score
    from costlearn.collect.dataset import load
    from costlearn.model.xgb import XGBParams
    from costlearn.learn.train import train
    res = train(two_logs / "data" / DEVICE, tmp_path / "m", family="triton_mm", dtype="float16", holdout=False,
                settings=dict(params=XGBParams(**FAST)))
    rows = load(two_logs / "data" / DEVICE)[0].assign(dtype="bfloat16")
    with pytest.raises(ValueError, match=r"a100/triton_mm/bfloat16"):
        score(res.path.parent, rows)


def test_decision_scores_follow_what_predict_answers(two_logs, tmp_path):
    from costlearn.collect.dataset import load, valid_rows
    from costlearn.model.xgb import XGBParams
    from costlearn.serve.predictor import Predictor
    from costlearn.learn.train import train
    res = train(two_logs / "data" / DEVICE, tmp_path / "m", family="triton_mm", dtype="float16", holdout=False,
                settings=dict(params=XGBParams(**FAST)))
    pred = Predictor(res.path.parent)
    rows = valid_rows(load(two_logs / "data" / DEVICE)[0])
    per = decision_scores(pred, rows)
    assert len(per) == 2 * len(SHAPES)
    for r in per.head(4).itertuples():
        p = pred.predict(pred.problem(r.m, r.n, r.k, r.layout))
        assert p.config.config_id == r.pick and p.chosen_by == r.chosen_by
    assert per["pick_measured"].all()              # every candidate was measured on every fixture problem


def test_evaluate_no_measure_names_in_sample_logs_and_takes_a_data_root(two_logs, tmp_path, capsys, monkeypatch):
    """Regressions (fresh-user trial): the same log imported into another folder was scored with no in-sample note;
    a data root given as --out said 'no valid rows'; --report naming a folder failed only after all the work."""
    from costlearn.cli import main
    from costlearn.interop import import_file
    from costlearn.model.xgb import XGBParams
    from costlearn.learn.train import train
    train(two_logs / "data" / DEVICE, tmp_path / "m", family="triton_mm", dtype="float16", holdout=False,
          settings=dict(params=XGBParams(**FAST)))
    import_file("inductor", two_logs / "zoo_a.txt", device=DEVICE, data_root=tmp_path / "copy")
    assert main(["evaluate", "--no-measure", "--family", "triton_mm", "--dtype", "float16", "--models",
                 str(tmp_path / "m"), "--data", str(tmp_path / "copy")]) == 0
    err = capsys.readouterr().err
    assert "1 of the logs scored here (by sha256) were in this model's training rows" in err
    (tmp_path / "rep").mkdir()
    assert main(["evaluate", "--no-measure", "--family", "triton_mm", "--dtype", "float16", "--models",
                 str(tmp_path / "m"), "--data", str(tmp_path / "copy"), "--report", str(tmp_path / "rep")]) == 2
    assert "is a folder; give a file name" in capsys.readouterr().err
