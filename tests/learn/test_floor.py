"""The vendor floor (costlearn.learn.holdout), per-candidate coverage
(costlearn.model.envelope.Coverage) and the decisions the Predictor and the
Triton hook make with them.

Held-out records below are small hand-made tables (mocks pinning the
calibration's logic, not measurements); the models are trained on the
synthetic Inductor fixture log (tests/inductor_fixture.py).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from costlearn.model.envelope import Coverage, fit_coverage
from costlearn.learn.holdout import (MARGIN_GRID, VENDOR_NEAR_GRID, calibrate_floor, heldout_folds, heldout_problems,
                                     neighbour_stats, region_folds, rule_regrets)
from costlearn.model.vendor_floor import VendorFloor
from costlearn.learn.metrics import geomean_regret

from inductor_fixture import DEVICE, FIXTURE_CONFIGS, SHAPE_LAYOUTS, SHAPES, build_models, write_log


def _held(n_per_log=12, seed=0):
    """Two logs: on 'good' the model's tile beats the vendor by 10 % and the
    prediction says so; on 'bad' the model predicts a 5-15 % win but its tile
    is 20 % slower than the vendor (what real-model logs showed on an A100)."""
    rng = np.random.default_rng(seed)
    recs = []
    for src, tile_regret, vendor_regret, lr in (("good.txt", 0.0, 0.10, -0.3), ("bad.txt", 0.20, 0.0, -0.15)):
        for i in range(n_per_log):
            m, n, k = (int(v) for v in 2 ** rng.integers(6, 13, 3))
            if src == "bad.txt":
                m *= 64                       # a region of its own
            recs.append(dict(m=m, n=n, k=k, dtype="float16", layout="NN", source=src, model_regret=tile_regret,
                             vendor_regret=vendor_regret, tile_lr=lr + 0.01 * rng.standard_normal(),
                             tile_regret=tile_regret))
    return pd.DataFrame(recs)


def test_calibrated_floor_is_never_worse_than_the_vendor_on_any_heldout_log():
    held = _held()
    floor = calibrate_floor(held, has_vendor=True, kind="leave-one-log-out (2 logs)")
    cal = floor["calibration"]
    for log, s in cal["by_log"].items():
        assert s["rule"] <= s["vendor"] + 1e-9, (log, s)
    # the plain argmin (always the tile) loses 20 % on 'bad'; the floor must do better overall
    assert cal["rule_geomean"] < cal["argmin_geomean"]
    assert floor["margin_log2"] in MARGIN_GRID


def test_calibration_scores_each_heldout_problem_with_its_other_neighbours():
    pts = np.array([[0.0, 0, 0], [0.1, 0, 0], [5.0, 5, 5]])
    lay = np.array(["NN", "NN", "NN"], object)
    vr, mr = np.array([0.0, 0.5, 1.0]), np.array([0.2, 0.0, 0.0])
    vn, mn = neighbour_stats(pts, lay, vr, mr, pts, lay, exclude_self=True, k=1)
    assert vn.tolist() == pytest.approx([0.5, 0.0, 0.5])       # each sees its nearest *other* problem
    assert mn.tolist() == pytest.approx([0.0, 0.2, 0.0])


def test_rule_keeps_the_vendor_where_the_model_is_unsure():
    held = _held()
    vn = np.zeros(len(held)) + 0.5
    mn = np.where(held["source"] == "bad.txt", 0.3, 0.0)
    r = rule_regrets(held, vn, mn, margin_log2=0.0, vendor_near_min=0.0, unsure_regret=0.1)
    assert geomean_regret(r[held["source"] == "bad.txt"]) == 0.0       # vendor kept: its regret there is 0
    assert geomean_regret(r[held["source"] == "good.txt"]) == 0.0      # tile chosen: best there


def test_uncalibrated_floor_is_the_plain_argmin():
    floor = VendorFloor.plain()
    assert not floor.calibrated and floor.margin_log2 == 0.0 and math.isinf(floor.unsure_regret)
    assert all(math.isnan(x) for x in floor.near(64, 64, 64, "NN"))
    assert floor.keeps_vendor(-0.01, math.nan) is False and floor.keeps_vendor(0.0, math.nan) is True
    assert floor.unsure_reason(math.nan) is None


@pytest.mark.parametrize("change, says", [
    (dict(version=9), "version 9"),
    (dict(margin_log2=-1.0), "margin_log2=-1.0"),
    (dict(problems=[[0, 1, 1, 0, 0.0, 0.0]]), "integer extents in"),
    (dict(problems=[[1e19, 64, 64, 0, 0.0, 0.0]]), "integer extents in"),
    (dict(problems=[[2.5, 64, 64, 0, 0.0, 0.0]]), "integer extents in"),
    (dict(neighbors=0), "neighbors=0; need an integer in"),
    (dict(neighbors=2**31), "neighbors=2147483648; need an integer in"),
    (dict(neighbors=5.9), "neighbors=5.9"),
    (dict(neighbors=float("inf")), "neighbors=inf"),
    (dict(neighbors=10**400), "need an integer in"),
    (dict(margin_log2=10**400), "malformed vendor floor"),
    (dict(estimate=[1]), "estimate=\\[1\\]"),
    (dict(estimate_unsure=float("nan")), "estimate_unsure=nan"),
    (dict(problems=[[64, 64, 64, 7, 0.0, 0.0]]), "layout index"),
    (dict(problems=[[1, 1, 1, 3, 0.0, 0.0]]), "layout"),
    (dict(neighbors="five"), "malformed vendor floor"),
    (dict(ood_fallback="yes"), "ood_fallback='yes'"),
])
def test_a_malformed_floor_is_refused_naming_the_field(change, says):
    floor = calibrate_floor(_held(), True)
    floor.update(change)
    with pytest.raises(ValueError, match=says):
        VendorFloor(floor)


@pytest.mark.parametrize("change", [dict(neighbors=2**31), dict(neighbors=2**32 + 1), dict(extent=1e19)])
def test_a_model_whose_floor_counts_past_int32_is_refused_not_a_crash(tmp_path, change):
    """Regression (an attack): a model.json whose floor asked for 2**31 neighbours crashed the C ranker
    (its int32 count wrapped negative; the evidence scan wrote out of bounds), 2**32 + 1 wrapped to 1 (a wrong
    answer), and a held-out extent of 1e19 (int64 overflow: a NaN point) made C and numpy disagree. The floor
    refuses them when the model loads: a clear error, in a process of its own so that a crash fails this test."""
    import json
    import shutil
    import subprocess
    import sys
    from conftest import ROOT
    src = ROOT / "models" / "ocl-pthread-amd-epyc-1w" / "gemm" / "float32"
    dst = tmp_path / "models" / "ocl-pthread-amd-epyc-1w" / "gemm" / "float32"
    shutil.copytree(src, dst)
    meta = json.loads((dst / "model.json").read_text())
    assert meta["floor"]["problems"], "the committed model's floor has held-out evidence"
    if "neighbors" in change:
        meta["floor"]["neighbors"] = change["neighbors"]
    else:
        meta["floor"]["problems"][0][0] = change["extent"]
    (dst / "model.json").write_text(json.dumps(meta))
    code = ("import costlearn\n"
            "try:\n"
            f"    costlearn.predict_best(100, 200, 300, models_dir={str(tmp_path / 'models')!r})\n"
            "except ValueError as e:\n"
            "    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused:" in out.stdout and ("need an integer in" in out.stdout or "integer extents in" in out.stdout), \
        out.stdout


def test_heldout_folds_leave_one_log_out_where_there_are_several_logs():
    rows = pd.DataFrame(dict(m=list(range(1, 13)), n=8, k=8, dtype="float16", layout="NN",
                             source_file=["a.txt"] * 4 + ["b.txt"] * 4 + ["c.txt"] * 4))
    folds, kind = heldout_folds(rows)
    assert kind == "leave-one-log-out (3 logs)" and len(folds) == 3
    for tr, te in folds:
        assert rows.iloc[te]["source_file"].nunique() == 1
        assert not set(rows.iloc[te]["source_file"]) & set(rows.iloc[tr]["source_file"])
    one = rows.assign(source_file="a.txt")
    folds, kind = heldout_folds(one)
    assert kind == "5 regions of shapes"
    held_out = np.concatenate([te for _, te in folds])
    assert sorted(held_out.tolist()) == list(range(len(one)))          # every problem held out once


def test_heldout_folds_never_train_a_fold_on_a_log_of_one_problem():
    """Regression: a folder whose second log held one problem of a dtype made a leave-one-log-out fold that
    trained on that one problem, and `costlearn train` stopped ("need rows from at least 2 problems to fit, got 1")."""
    rows = pd.DataFrame(dict(m=list(range(1, 42)), n=8, k=8, dtype="tfloat32", layout="NN",
                             source_file=["big.txt"] * 40 + ["one.txt"]))
    folds, kind = heldout_folds(rows, min_train_problems=5)
    assert kind.endswith("regions of shapes"), kind
    for tr, _ in folds:
        assert rows.iloc[tr][["m"]].drop_duplicates().shape[0] >= 5
    three = pd.concat([rows, rows.iloc[:3].assign(m=range(100, 103), source_file="mid.txt")], ignore_index=True)
    folds, kind = heldout_folds(three, min_train_problems=5)
    assert kind == "leave-one-log-out (3 logs, 2 held out)" and len(folds) == 2
    held = {three.iloc[te]["source_file"].iloc[0] for _, te in folds}
    assert held == {"one.txt", "mid.txt"}                   # big.txt's fold would train on 4 problems: not made

def test_a_tunings_rows_train_every_fold_and_are_never_held_out():
    """Regression: rows imported from a tuning database (a model's top k and the vendor per problem) were a log of
    their own, held out in a fold of their own: a held-out model was scored among the few configs another model
    chose, its regret looked small, and the vendor floor trusted the model beside them (a replayed fleet's pure
    predictions lost 9.1 % where they had lost 7.9 % before it retrained)."""
    logged = pd.DataFrame(dict(m=list(range(1, 13)), n=8, k=8, dtype="float16", layout="NN", source_format="inductor",
                               source_file=["a.txt"] * 6 + ["b.txt"] * 6))
    tuned = pd.DataFrame(dict(m=[3, 50, 51, 52], n=8, k=8, dtype="float16", layout="NN", source_format="tuning-db",
                              source_file="tuning.db"))
    rows = pd.concat([logged, tuned], ignore_index=True)
    folds, kind = heldout_folds(rows)
    want, want_kind = heldout_folds(logged)
    assert kind == f"{want_kind}; 4 tuning rows trained on in every fold" and len(folds) == len(want) == 2
    for (tr, te), (wtr, wte) in zip(folds, want):
        assert te.tolist() == wte.tolist()                          # the logs' folds, as without the tuning
        extra = set(tr) - set(wtr)
        assert extra <= set(range(12, 16)) and not set(te) & set(range(12, 16))
        # every tuned problem trains the fold, but the one of a shape the fold holds out (m=3, in a.txt)
        assert extra == ({13, 14, 15} if 2 in te else set(range(12, 16)))
    folds, kind = heldout_folds(tuned)                              # nothing else to hold out: regions of it
    assert kind.endswith("regions of shapes")



def test_one_logged_problem_beside_a_tunings_rows_holds_out_regions_of_every_row_never_crashes():
    """Regression: one logged problem (any number of its layouts) beside a tuning's rows left the hold-out one shape
    to make folds of, and ``costlearn train`` skipped the pair ("a hold-out needs rows of 2 shapes at least; got 1")
    where every row a tuning's trained; the folds are then regions of every row's shapes (the tuning's rows are not
    held out as a log of their own)."""
    tuned = pd.DataFrame(dict(m=[3, 50, 51, 52, 900, 901], n=8, k=8, dtype="float16", layout="NN",
                              source_format="tuning-db", source_file="tuning.db"))
    for logged_m in (7, 50):                                    # a shape of its own, or one the tuning measured too
        logged = pd.DataFrame(dict(m=logged_m, n=8, k=8, dtype="float16", layout=["NN", "TN"],
                                   source_format="inductor", source_file="a.txt"))
        rows = pd.concat([tuned, logged], ignore_index=True)
        folds, kind = heldout_folds(rows)
        assert kind.endswith("regions of shapes") and len(folds) >= 2
        assert [(tr.tolist(), te.tolist()) for tr, te in folds] == [
            (tr.tolist(), te.tolist()) for tr, te in region_folds(rows)[0]]
        assert sorted(np.concatenate([te for _, te in folds]).tolist()) == list(range(len(rows)))
    two = pd.concat([tuned, logged.assign(m=[7, 8])], ignore_index=True)  # two logged shapes: their folds again
    assert heldout_folds(two)[1].endswith("; 6 tuning rows trained on in every fold")

def test_one_log_is_held_out_by_region_every_layout_of_a_shape_together():
    """Within one log the hold-out leaves regions of shapes out, not random problems: two clusters of shapes far
    apart are never split across a fold's training and test sides, and a shape's layouts are held out together
    (a random split held out NN while TN of the same shape stayed in training)."""
    small = [(2 ** a, 2 ** b, 2 ** c) for a in (6, 7) for b in (6, 7) for c in (6, 7)]
    large = [(2 ** a, 2 ** b, 2 ** c) for a in (13, 14) for b in (13, 14) for c in (13, 14)]
    shapes = small + large
    rows = pd.DataFrame([dict(m=m, n=n, k=k, layout=lay, dtype="float16") for m, n, k in shapes
                         for lay in ("NN", "TN")])
    folds, kind = region_folds(rows, regions=2)
    assert kind == "2 regions of shapes" and len(folds) == 2
    for tr, te in folds:
        test = {tuple(r) for r in rows.iloc[te][["m", "n", "k"]].to_numpy()}
        assert test in (set(small), set(large))
        assert not test & {tuple(r) for r in rows.iloc[tr][["m", "n", "k"]].to_numpy()}
    assert sorted(np.concatenate([te for _, te in folds]).tolist()) == list(range(len(rows)))
    with pytest.raises(ValueError, match="2 shapes"):
        region_folds(rows.iloc[:2])


def test_region_folds_cluster_on_one_openmp_thread_whatever_the_process_allows(monkeypatch):
    """k-means runs on one OpenMP thread: on every core its centres' sums
    depended on the core count (last bits, 794 A100 shapes), and it took
    4.9 s instead of 0.05 s for 4,000 shapes while another process kept one
    of two cores busy."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_info, threadpool_limits
    seen = []
    fit = KMeans.fit
    monkeypatch.setattr(KMeans, "fit", lambda self, *a, **kw: (
        seen.extend(p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"), fit(self, *a, **kw))[1])
    rows = pd.DataFrame([dict(m=2 ** a, n=2 ** b, k=64, layout="NN") for a in range(6, 12) for b in range(6, 12)])
    with threadpool_limits(limits=3, user_api="openmp"):
        folds, _ = region_folds(rows, regions=3)
    assert len(folds) == 3 and seen and set(seen) == {1}


def test_heldout_problems_record_vendor_model_and_tile():
    rows = pd.DataFrame(dict(m=64, n=64, k=64, dtype="float16", layout="NN", source_file="a.txt",
                             config_id=["vendor", "m64n64k32_w4_s3_g8", "m32n32k32_w2_s2_g8"],
                             time_us=[10.0, 12.0, 8.0]))
    h = heldout_problems(rows, np.array([11.0, 9.0, 9.5]))
    r = h.iloc[0]
    assert r["vendor_regret"] == pytest.approx(0.25) and r["model_regret"] == pytest.approx(0.5)
    assert r["tile_lr"] == pytest.approx(np.log2(9.0 / 11.0)) and r["tile_regret"] == pytest.approx(0.5)


def test_coverage_masks_a_config_far_from_where_it_was_measured():
    rows = pd.DataFrame(dict(config_id=["a", "a", "b", "b"], m=[1024, 4096, 1024, 4096], n=[8, 16, 512, 8192],
                             k=[1024, 1024, 1024, 1024]))
    cov = Coverage(fit_coverage(rows, ["a", "b"]), 2)
    assert cov.mask(2048, 16, 1024).tolist() == [True, False]
    assert cov.mask(2048, 3584, 1024).tolist() == [False, True]        # 'a' was measured on N <= 16 only
    assert Coverage(None, 2).mask(1, 1, 1).tolist() == [True, True]
    with pytest.raises(ValueError, match="no training row"):
        fit_coverage(rows, ["a", "c"])
    with pytest.raises(ValueError, match="malformed coverage"):
        Coverage(dict(margin_log2=1.0, lo=[[1, 1, 1]], hi=[[0, 0, 0]]), 1)
    with pytest.raises(ValueError, match="derived"):
        Coverage(dict(margin_log2=1.0, lo=[[0, 0, 0]], hi=[[1, 1, 1]], derived=[1]), 1)


# -- the Predictor, the prune path and the hook, on models trained from fixture logs --------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return build_models(tmp_path_factory.mktemp("floor"))


@pytest.fixture()
def predictor(models):
    from costlearn.serve.predictor import Predictor
    from costlearn.model.artifact_layout import model_folder
    return Predictor(model_folder(models, DEVICE, "triton_mm", "float16"))


def test_predict_never_picks_a_config_measured_only_far_from_the_problem(tmp_path):
    """Regression: on an A100 log, predict picked a 128x16 tile measured only on shapes with N <= 16 for a
    1920x3584x3584 problem. Here the last fixture config is logged only for N <= 512 (and made the fastest
    there); it must never be the answer for N = 8192."""
    from costlearn.interop import import_file
    from costlearn.model.xgb import XGBParams
    from costlearn.serve.predictor import Predictor
    from costlearn.learn.train import train
    configs = FIXTURE_CONFIGS[:-1] + [(16, 32, 16, 1, 1)]
    fast_last = list(reversed(configs))                  # the fixture's order: first is fastest
    write_log(tmp_path / "log.txt", configs=fast_last, only={0: lambda m, n, k: n <= 512})
    import_file("inductor", tmp_path / "log.txt", device=DEVICE, data_root=tmp_path / "data")
    res = train(tmp_path / "data" / DEVICE, tmp_path / "models", family="triton_mm", dtype="float16", holdout=False,
                settings=dict(params=XGBParams(n_estimators=60, learning_rate=0.3, max_depth=4,
                                               early_stopping_rounds=20)))
    pred = Predictor(res.path.parent)
    narrow = "m16n32k16_w1_s1_g8"
    for m, k in ((1024, 1024), (2048, 2048), (4096, 512)):
        p = pred.predict(pred.problem(m, 2048, k, "NN"), top_k=len(pred.configs))
        assert narrow not in [c.config_id for c, _ in p.top_k]
        assert not any("no candidate tile config was measured" in r for r in p.ood_reasons)
    small = pred.predict(pred.problem(256, 256, 256, "NN"), top_k=len(pred.configs))
    assert narrow in [c.config_id for c, _ in small.top_k]


def test_a_floor_with_a_large_margin_keeps_the_vendor_and_says_why(predictor):
    floor = calibrate_floor(pd.DataFrame(), True)
    floor["margin_log2"] = 5.0                          # a tile must be predicted 32x faster
    predictor.floor = VendorFloor(floor)
    p = predictor.predict(predictor.problem(1024, 1024, 1024, "NN"))
    assert p.config.config_id == "vendor" and p.chosen_by == "vendor_floor"
    assert p.top_k[0][0].config_id == "vendor" and len({c.config_id for c, _ in p.top_k}) == len(p.top_k)
    assert 0 < p.tile_vendor_ratio < 2 ** 5 and p.margin_log2 == 5.0


def test_plain_floor_chooses_the_lowest_prediction_and_reports_the_ratio(predictor):
    predictor.floor = VendorFloor.plain()
    p = predictor.predict(predictor.problem(1024, 1024, 1024, "NN"), top_k=3)
    full, times = predictor.rank(p.problem)
    assert p.config == full[0]
    assert p.chosen_by == ("predicted" if full[0].config_id != "vendor" else "vendor_floor")
    assert np.isfinite(p.tile_vendor_ratio)


def test_a_problem_the_heldout_evidence_flags_falls_back_to_the_vendor(predictor):
    floor = calibrate_floor(_held(), True)
    floor["unsure_regret"] = 0.05
    floor["problems"] = [row[:5] + [0.5] for row in floor["problems"]]      # the model lost 50 % near every one
    predictor.floor = VendorFloor(floor)
    p = predictor.predict(predictor.problem(1024, 1024, 1024, "NN"))
    assert p.ood and p.config.config_id == "vendor" and p.chosen_by == "ood_fallback"
    assert any("held-out top-1 regret on the 5 nearest training problems is 50.0%" in r for r in p.ood_reasons)


def test_a_symptom_is_flagged_but_does_not_decide_alone(predictor):
    """Regression (A100 leave-one-log-out): 'no tile measured near' and 'faster than the peak' sent timm shapes to
    cuBLAS (25 % regret) where the model's own pick lost 7.8 %; they are OOD reasons, the floor decides."""
    predictor.floor = VendorFloor.plain()
    p = predictor.predict(predictor.problem(2**24, 8, 2**20, "NN"))
    assert p.ood and any("no candidate's block tile fits" in r or "no candidate tile config" in r
                         for r in p.ood_reasons)
    assert p.chosen_by in ("predicted", "vendor_floor")


@pytest.mark.parametrize("ood_fallback", [False, True])
def test_outside_the_envelope_the_calibrated_choice_decides_the_fallback(predictor, ood_fallback):
    floor = calibrate_floor(pd.DataFrame(), True)
    floor["ood_fallback"] = ood_fallback
    predictor.floor = VendorFloor(floor)
    p = predictor.predict(predictor.problem(8192, 1024, 1024, "NN"))       # M above the trained 4096, tiles cover it
    assert p.ood and any("above the trained maximum" in r for r in p.ood_reasons)
    if ood_fallback:
        assert p.config.config_id == "vendor" and p.chosen_by == "ood_fallback"
    else:
        assert p.chosen_by in ("predicted", "vendor_floor")


def test_the_prune_path_uses_the_same_floor(predictor):
    from costlearn.families.triton_mm import VENDOR, TritonMMConfig
    problem = predictor.problem(1024, 1024, 1024, "NN")
    tiles = [TritonMMConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=w, num_stages=s)
             for bm, bn, bk, w, s in FIXTURE_CONFIGS[:3]]
    floor = calibrate_floor(pd.DataFrame(), True)
    floor["margin_log2"] = 5.0
    predictor.floor = VendorFloor(floor)
    i, how, _ = predictor.choose_among(problem, tiles + [VENDOR])
    assert (i, how) == (3, "vendor_floor")
    # without a vendor, an unsure model keeps the config listed first
    i, how, _ = predictor.choose_among(problem, list(reversed(tiles)))
    assert (i, how) == (0, "first_listed")            # no config is predicted 32x faster than the first
    predictor.floor = VendorFloor.plain()
    i, how, _ = predictor.choose_among(problem, tiles + [VENDOR])
    assert how in ("predicted", "vendor_floor")


def test_the_hook_keeps_the_users_first_config_when_the_model_is_unsure(models, monkeypatch):
    from costlearn.serve.predictor import load_predictor
    from costlearn.interop.triton_autotune import ConfigStandIn, prune_configs
    pred = load_predictor(DEVICE, "triton_mm", "float16", models)
    floor = calibrate_floor(pd.DataFrame(), True)
    floor["margin_log2"] = 5.0
    monkeypatch.setattr(pred, "floor", VendorFloor(floor))
    slow_first = [ConfigStandIn(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8), num_warps=w, num_stages=s)
                  for bm, bn, bk, w, s in reversed(FIXTURE_CONFIGS[:4])]
    hook = prune_configs(1, device=DEVICE, dtype="float16", layout="NN", models_dir=models)
    assert hook(slow_first, dict(M=1024, N=1024, K=1024)) == [slow_first[0]]
    monkeypatch.setattr(pred, "floor", VendorFloor.plain())
    kept = hook(slow_first, dict(M=1024, N=1024, K=1024))
    assert kept[0] is not slow_first[0]                  # confident: the model's choice


def test_training_with_a_holdout_calibrates_and_records_the_floor(tmp_path):
    from costlearn.interop import import_file
    from costlearn.model.artifact import load
    from costlearn.model.xgb import XGBParams
    from costlearn.learn.train import train
    write_log(tmp_path / "a.txt")
    write_log(tmp_path / "b.txt", shapes=[(m * 2, n, k) for m, n, k in SHAPES], layouts=SHAPE_LAYOUTS)
    for f in ("a.txt", "b.txt"):
        import_file("inductor", tmp_path / f, device=DEVICE, data_root=tmp_path / "data")
    res = train(tmp_path / "data" / DEVICE, tmp_path / "models", family="triton_mm", dtype="float16",
                settings=dict(params=XGBParams(n_estimators=40, learning_rate=0.3, max_depth=3,
                                               early_stopping_rounds=10)))
    assert res.holdout_kind == "leave-one-log-out (2 logs)"
    art = load(res.path.parent)
    assert art.floor.calibrated and len(art.floor.vendor_regret) == 2 * len(SHAPES)
    cal = art.sidecar["floor"]["calibration"]
    assert set(cal["by_log"]) == {"a.txt", "b.txt"}
    for s in cal["by_log"].values():
        assert s["rule"] <= s["vendor"] + 1e-9
    assert art.sidecar["training"]["sources"] == ["a.txt", "b.txt"]
    assert art.coverage.recorded


def test_a_query_sees_the_same_neighbours_as_the_calibration():
    floor = VendorFloor(calibrate_floor(_held(), True))
    rng = np.random.default_rng(1)
    for _ in range(50):
        m, n, k = (int(x) for x in 2 ** rng.uniform(0, 18, 3))
        got = floor.near(m, n, k, "NN")
        from costlearn.model.envelope import embed
        vn, mn = neighbour_stats(floor.points, floor.layout_of, floor.vendor_regret, floor.model_regret,
                                 embed([(m, n, k)]), np.array(["NN"], object), k=floor.neighbors)
        assert got == pytest.approx((vn[0], mn[0]))


def test_dispatch_keeps_the_vendor_where_the_floor_does(predictor):
    from costlearn.serve.dispatch import fit_dispatch
    floor = calibrate_floor(pd.DataFrame(), True)
    floor["margin_log2"] = 5.0
    predictor.floor = VendorFloor(floor)
    d = fit_dispatch(predictor, {"M": (256, 2048), "N": (256, 2048), "K": (256, 2048)}, max_configs=2, samples=50)
    assert [c.config_id for c in d.configs] == ["vendor"] or d.select(1024, 1024, 1024).config_id == "vendor"
    assert d.predicted["selector_geomean"] == pytest.approx(0.0)


def test_a_time_faster_than_the_memory_bandwidth_allows_is_a_symptom(predictor):
    """Regression (fresh-user trial): 1000000 x 8 x 1000000 float16 got a 37.8 ms answer with no warning although
    reading A alone (2 TB) takes over 600 ms at the device's bandwidth; only the compute peak was checked."""
    predictor.floor = VendorFloor.plain()
    problem = predictor.problem(1_000_000, 8, 1_000_000, "NN")
    p = predictor.predict(problem)
    traffic_us = (1e12 + 8e6 * 2) * 2 / (predictor.spec.memory_bandwidth_gbps * 1e3)
    _, times = predictor.rank(problem, predictor.candidate_mask(problem))
    assert times.min() < traffic_us                 # trees do not extrapolate to a 2 TB problem
    assert p.ood and any("faster than the memory bandwidth allows" in r for r in p.ood_reasons)
    small = predictor.predict(predictor.problem(64, 64, 64, "NN"))      # fits in L2: no bandwidth bound applies
    assert not any("memory bandwidth" in r for r in small.ood_reasons)


def test_within_one_log_the_calibration_gives_up_a_little_regret_to_keep_the_vendor():
    """A hold-out within one log cannot see another kind of shape: where the tile wins by less than TOLERANCE on
    held-out problems, the vendor is kept; with two logs the lowest regret wins."""
    from costlearn.learn.holdout import TOLERANCE
    held = _held().assign(source="one.txt", tile_regret=0.0, vendor_regret=TOLERANCE / 2, model_regret=0.0,
                          tile_lr=-0.3)
    one = calibrate_floor(held, True)
    assert one["calibration"]["rule_geomean"] == pytest.approx(TOLERANCE / 2)      # the vendor everywhere
    two = calibrate_floor(held.assign(source=np.where(np.arange(len(held)) % 2, "a.txt", "b.txt")), True)
    assert two["calibration"]["rule_geomean"] == pytest.approx(0.0)                 # the tile everywhere


def test_a_problem_without_a_vendor_row_does_not_switch_the_calibration_off():
    """Regression: one held-out problem whose vendor call failed (no vendor row) left the whole floor uncalibrated."""
    held = _held()
    held.loc[0, ["vendor_regret", "tile_lr", "tile_regret"]] = np.nan
    floor = calibrate_floor(held, True)
    assert "rule_geomean" in floor["calibration"] and floor["calibration"]["scored"] == len(held) - 1
    assert len(floor["problems"]) == len(held)


def test_floor_of_one_log_keeps_the_vendor_within_the_tolerance_unless_told_none():
    """Regression: a transfer's floor, calibrated on 32 H100 bfloat16 problems of one log, kept cuBLAS on every
    problem (2.67 %) although the model's own picks were 0.90 %: the one-log tolerance of 2 points."""
    rng = np.random.default_rng(1)
    recs = [dict(m=int(2 ** rng.integers(6, 13)), n=int(2 ** rng.integers(6, 13)), k=int(2 ** rng.integers(6, 13)),
                 dtype="bfloat16", layout="NN", source="h100_mm.txt", model_regret=0.01, vendor_regret=0.025,
                 tile_lr=-0.1 + 0.01 * rng.standard_normal(), tile_regret=0.01, envelope_ood=False)
            for _ in range(32)]
    held = pd.DataFrame(recs)
    default = calibrate_floor(held, True, "one log")
    none = calibrate_floor(held, True, "destination problems", tolerance=0.0)
    assert default["calibration"]["tolerance"] == 0.02 and none["calibration"]["tolerance"] == 0.0
    assert default["calibration"]["rule_geomean"] == pytest.approx(0.025)        # the vendor everywhere
    assert none["calibration"]["rule_geomean"] == pytest.approx(0.01)            # the model's picks
    assert not any(VendorFloor(none).keeps_vendor(lr, 0.025) for lr in held["tile_lr"])


def test_a_transfer_floor_can_leave_the_neighbours_vendor_regret_unchecked():
    """Regression: on the H100 cuBLAS is the best of all on many problems, so the smallest threshold (0) on the
    neighbours' vendor regret kept it near them even where a tile was measured and predicted faster (bfloat16,
    32 problems: 2.34 % held-out against the model's own 0.28 %)."""
    rng = np.random.default_rng(2)
    recs = []
    for i in range(40):
        win = i % 8 == 0                      # a few problems where the tile wins, among many where cuBLAS is best
        recs.append(dict(m=int(2 ** rng.integers(6, 13)), n=int(2 ** rng.integers(6, 13)),
                         k=int(2 ** rng.integers(6, 13)), dtype="bfloat16", layout="NN", source="h100_mm.txt",
                         vendor_regret=0.2 if win else 0.0, model_regret=0.0,
                         tile_lr=-0.5 if win else 0.3, tile_regret=0.0 if win else 0.1, envelope_ood=False))
    held = pd.DataFrame(recs)
    checked = calibrate_floor(held, True, "destination problems", tolerance=0.0)
    free = calibrate_floor(held, True, "destination problems", tolerance=0.0,
                           vendor_near_grid=(None,) + VENDOR_NEAR_GRID)
    assert free["vendor_near_min"] is None and free["calibration"]["rule_geomean"] == pytest.approx(0.0)
    assert checked["calibration"]["rule_geomean"] > 0.0
    floor = VendorFloor(free)
    assert not floor.keeps_vendor(-0.5, 0.0) and floor.keeps_vendor(0.3, 0.0)


def test_the_pool_holds_inductors_shrunk_configs_covered_where_inductor_runs_them():
    """Regression: a model trained without the timm log had none of the shrunk configs Inductor runs on timm's
    small extents (m128n32k32 for N <= 32, ...): on 58 of its 899 problems the best config was no candidate."""
    from costlearn.core.device import preset
    from costlearn.families import get_family
    from costlearn.learn.train import candidate_pool
    rows = pd.DataFrame(dict(config_id=["m128n128k32_w4_s3_g8"] * 2 + ["vendor"] * 2, m=[1024, 4096] * 2,
                             n=[512, 2048] * 2, k=[1024, 1024] * 2, registers_per_thread=np.nan))
    cands, coverage, dropped = candidate_pool(get_family("triton_mm"), rows, preset("a100"), "float16")
    ids = cands["config_id"].tolist()
    assert ids == sorted(ids) and dropped == 0 and len(ids) == 2 + 4 * 4 * 2 - 1
    assert "m128n32k32_w4_s3_g8" in ids and np.isnan(cands.set_index("config_id").loc["m128n32k32_w4_s3_g8"].iloc[0])
    cov = Coverage(coverage, len(ids))
    at = ids.index("m128n32k32_w4_s3_g8")
    assert cov.mask(2048, 20, 1024)[at] and cov.mask(2048, 32, 1024)[at]              # next_pow2(N) = 32 only
    assert not cov.mask(2048, 16, 1024)[at] and not cov.mask(2048, 33, 1024)[at]
    assert cov.mask(2048, 3, 1024)[ids.index("m128n16k32_w4_s3_g8")]                   # the smallest block: N <= 16
    assert not cov.mask(2048, 20, 1 << 20)[at]                                        # K: where its parent ran
    assert cov.mask(2048, 2048, 1024)[ids.index("m128n128k32_w4_s3_g8")]


def test_the_native_rankers_decision_is_the_floors_on_every_branch(predictor):
    """The floor's decision made in the native ranker's one call (``floor_decision`` in _native_rank.c, which
    predict reads) is :meth:`VendorPolicy.decide`'s on the same ranking, with the same reasons: inside and
    outside the envelope, flagged by the held-out evidence, with ood_fallback, a margin, the neighbours'
    vendor rule, the vendor model's rule and doubt, and the vendor pruned by a cascade (scored alone)."""
    from collections import Counter
    from costlearn.ranker import make_ranker
    from costlearn.ranker.base import (DECISION_DOUBT, DECISION_FAR, DECISION_OUTSIDE, DECISION_PLAIN, DECISION_TIME,
                                       DECISION_UNSURE)
    from costlearn.serve.ood import OODVerdict
    from costlearn.serve.vendor_policy import VendorPolicy
    art, vi = predictor.artifact, predictor.vendor_index
    flagged = calibrate_floor(_held(), True)
    flagged.update(unsure_regret=0.05, problems=[row[:5] + [0.5] for row in flagged["problems"]])
    wide = dict(calibrate_floor(pd.DataFrame(), True), margin_log2=0.3, ood_fallback=True, estimate=[0.0, 1.0],
                estimate_unsure=1e-6)                # the fixture's members spread ~1e-6 of the estimate
    floors = [VendorFloor.plain(), VendorFloor(calibrate_floor(_held(), True)), VendorFloor(flagged),
              VendorFloor(dict(calibrate_floor(_held(), True), vendor_near_min=0.2)), VendorFloor(wide),
              VendorFloor(dict(calibrate_floor(pd.DataFrame(), True), margin_log2=5.0))]
    # a transfer that lets tiles win far away, one that does not, and one that does in one layout alone
    for a, b, own in ((-0.3, 0.8, {}), (0.2, 0.1, {}), (0.2, 0.8, {predictor.layouts[0]: -0.3})):
        floors.append(VendorFloor(dict(calibrate_floor(_held(), True), estimate=[0.0, 1.0], transfer=dict(
            near_log2=1.0, intercept=a, slope=b, intercepts=own, spread_log2=0.4, problems=30))))
    rng = np.random.default_rng(0)
    problems = [predictor.problem(*(int(v) for v in np.round(2 ** rng.uniform(0, 15, 3))), layout)
                for layout in predictor.layouts for _ in range(25)]
    seen = Counter()
    for floor in floors:
        for stages in ((), ((8, 5, 0.0),)):
            ood = OODVerdict(art, floor, floor.uses_evidence(True))
            ranker = make_ranker(art.candidate_features(), art.scorer.with_cascade(stages), art.envelope,
                                 art.family.min_tile_caps(art.spec), "native", coverage=art.coverage, vendor=vi,
                                 evidence=floor, vendor_model=art.vendor_model, time_limits=ood.time_limits)
            policy = VendorPolicy(art, ranker, vi, floor)
            for q in problems:
                for top in (2, 6):
                    res = ranker.rank(q, top=top, estimate=True, decide=True)
                    order, scores = res.order, res.scores
                    reasons, fallback, vendor_near = ood.problem_reasons(q, (res.nearest, res.nearest_distance),
                                                                         (res.vendor_near, res.model_near))
                    near = (res.nearest, res.nearest_distance)
                    want = policy.decide(q, order, scores, fallback, vendor_near, res.estimate, near)
                    bits = res.decision[0]
                    got = policy.decided(q.layout, order, scores, res.decision, res.estimate, near)
                    assert (got.order, got.scores, got.chosen_by, got.doubt, got.estimate) == \
                        (want.order, want.scores, want.chosen_by, want.doubt, want.estimate), (q, floor.floor)
                    assert got.ratio == want.ratio or (math.isnan(got.ratio) and math.isnan(want.ratio))
                    assert ood.decided_reasons(q.m, q.n, q.k, (res.nearest, res.nearest_distance), res.model_near,
                                               bits & DECISION_OUTSIDE, bits & DECISION_UNSURE) == reasons
                    timed = ood.time_reasons(q.m, q.n, q.k, 2.0 ** scores[0])
                    assert bits & DECISION_TIME or not timed, q             # clear: no time reason, for sure
                    seen.update([want.chosen_by] + ["pruned"] * (vi not in order)
                                + [name for name, bit in (("outside", DECISION_OUTSIDE), ("unsure", DECISION_UNSURE),
                                                          ("doubt", DECISION_DOUBT), ("far", DECISION_FAR))
                                   if bits & bit]
                                + ["timed"] * bool(timed) + ["plain"] * (bits == DECISION_PLAIN))
    assert set(seen) == {"predicted", "vendor_floor", "ood_fallback", "pruned", "outside", "unsure", "doubt", "timed",
                         "plain", "far"}, seen
    # and whole predictions: the native ranker's decision against the numpy ranker's (left to VendorPolicy.decide)
    twin = type(predictor)(art.path, ranker="numpy")
    for floor in floors:
        predictor.floor = twin.floor = floor
        assert [repr(predictor.predict(q, 3)) for q in problems] == [repr(twin.predict(q, 3)) for q in problems]
        assert repr(predictor.predict_many(problems, 2)) == repr(twin.predict_many(problems, 2))
