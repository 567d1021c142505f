"""The vendor model (costlearn/model/vendor.py): per problem, the best tile config's time over the vendor
library's and its members' spread; fitted at training where the family has a vendor candidate, saved and checked
with its artifact, evaluated in C and numpy to the same bits, and used by the floor's decision."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

from costlearn.learn.holdout import calibrate_floor, rule_regrets

from costlearn.model.vendor_floor import VendorFloor, estimate_wins
from costlearn.model import artifact, artifact_layout
from costlearn.model.vendor import (FEATURES, MAX_MEMBERS, MIN_PROBLEMS, VendorEstimate, VendorModel, problem_features,
                                    problem_features_table, problem_row, problem_table)
from costlearn.serve.predictor import Predictor
from costlearn.ranker import RANKERS
from costlearn.ranker.native_library import library

from inductor_fixture import DEVICE, SHAPES, build_models


def _problems(n=60, seed=0):
    """Problems whose tile/vendor ratio follows a rule of their shape (a stand-in for measurements)."""
    rng = np.random.default_rng(seed)
    m, nn, k = (2 ** rng.uniform(3, 14, (3, n))).astype(np.int64)
    lay = np.array(["NN", "NT", "TN"])[rng.integers(0, 3, n)]
    y = np.where(k < 128, -0.5, 0.3) + 0.05 * rng.standard_normal(n)        # tiles win at small K
    return pd.DataFrame(dict(m=m, n=nn, k=k, layout=lay, epilogue="none", y=y))


def test_problem_table_is_log2_of_the_best_tile_over_the_vendor():
    rows = pd.DataFrame(dict(m=64, n=64, k=[64] * 5 + [8] * 2, layout="NN", epilogue="none",
                             config_id=["vendor", "a", "a", "b", "vendor", "vendor", "vendor"],
                             time_us=[10.0, 4.0, 6.0, 7.0, 12.0, 3.0, 3.0]))
    t = problem_table(rows)
    assert len(t) == 1                                              # K=8 has no tile row: left out
    # vendor median 11, tile a median 5, b 7: log2(5 / 11)
    assert t.iloc[0][["m", "n", "k", "layout"]].tolist() == [64, 64, 64, "NN"]
    assert t.iloc[0]["y"] == pytest.approx(math.log2(5 / 11))
    assert problem_table(rows[rows.config_id != "vendor"]).empty


def test_problem_features_are_the_same_row_by_row_and_in_a_table():
    row = problem_row(96, 768, 3072, "NT", "bias")
    assert len(row) == len(FEATURES) and row[FEATURES.index("pow2_m")] == 5 and row[FEATURES.index("pow2_k")] == 8
    assert row[FEATURES.index("layout_NT")] == 1 and row[FEATURES.index("epilogue_flops_per_element")] == 1
    t = pd.DataFrame(dict(m=[96, 7], n=[768, 9], k=[3072, 11], layout=["NT", "TT"], epilogue=["bias", "none"]))
    assert np.array_equal(problem_features_table(t)[0], problem_features(96, 768, 3072, "NT", "bias")[0])


def test_members_estimate_the_ratio_and_spread_and_round_trip(tmp_path):
    vm = VendorModel.fit(_problems())
    small = vm.estimate_problem(512, 512, 32, "NN")
    large = vm.estimate_problem(512, 512, 4096, "NN")
    assert isinstance(small, VendorEstimate) and small.mean_log2 < 0 < large.mean_log2 and small.sd_log2 >= 0
    mean, sd = vm.estimate(problem_features(512, 512, 32, "NN"))
    assert (mean[0], sd[0]) == pytest.approx(small) and len(vm.bases) == 5
    np.savez(tmp_path / "v.npz", **vm.arrays())
    with np.load(tmp_path / "v.npz") as z:
        back = VendorModel.from_arrays(z)
    assert back.estimate_problem(512, 512, 32, "NN") == small
    with pytest.raises(ValueError, match="needs 10 problems"):
        VendorModel.fit(_problems(MIN_PROBLEMS - 1))
    with pytest.raises(ValueError, match="do not split"):
        VendorModel(vm.forest, [0, len(vm.forest.roots)], [0.0])


def test_both_rankers_evaluate_the_members_to_the_same_bits(tmp_path):
    """Another vendor model than the artifact's (fitted on 200 problems), given to both rankers: the estimate
    each ranking reports is VendorModel.estimate_problem's, bit for bit, and the batch estimate agrees."""
    models = build_models(tmp_path)
    pred = Predictor(artifact_layout.model_folder(models, DEVICE, "triton_mm", "float16"))
    vm = VendorModel.fit(_problems(200, seed=1))
    r = pred.ranker
    kw = dict(coverage=r.coverage, vendor=r.vendor, evidence=r.evidence, vendor_model=vm)
    rankers = {name: RANKERS.get(name)(r.features, r.scorer, r.envelope, r.min_tile_caps, **kw)
               for name in RANKERS.names()}
    shapes = [(1, 1, 1), (7, 4096, 33), (3000, 128, 65536)] + \
        [tuple(int(v) for v in row) for row in _problems(50, seed=2)[["m", "n", "k"]].to_numpy()]
    for m, n, k in shapes:
        want = vm.estimate_problem(m, n, k, "TN")
        for name, rk in rankers.items():
            assert rk.rank(pred.problem(m, n, k, "TN"), None, top=3, estimate=True).estimate == want, (name, m, n, k)
    t = pd.DataFrame(dict(m=[s[0] for s in shapes], n=[s[1] for s in shapes], k=[s[2] for s in shapes],
                          layout="TN", epilogue="none"))
    mean, sd = vm.estimate(problem_features_table(t))
    assert [tuple(v) for v in zip(mean.tolist(), sd.tolist())] == [tuple(vm.estimate_problem(*s, "TN"))
                                                                   for s in shapes]
    no_vendor = RANKERS.get("native")(r.features, r.scorer, r.envelope, r.min_tile_caps,
                                      **dict(kw, vendor=None))
    assert no_vendor.vendor_model is None and no_vendor.vendor_estimate(pred.problem(8, 8, 8, "TN")) is None


def test_the_floor_decides_with_the_estimate_where_it_predicts_held_out_error():
    """Held-out problems where the cost model's own tile/vendor ratio misleads (it always favours the tile) but
    the estimate knows when the vendor wins: the calibration takes the estimate, and the floor keeps the vendor
    exactly where the estimate does not expect a tile to win."""
    rng = np.random.default_rng(4)
    n = 200
    tile_wins = rng.random(n) < 0.5
    held = pd.DataFrame(dict(
        m=(2 ** rng.uniform(3, 12, n)).astype(int), n=256, k=256, dtype="float16", layout="NN", source="one.txt",
        tile_lr=-0.5, tile_regret=np.where(tile_wins, 0.0, 0.3), vendor_regret=np.where(tile_wins, 0.3, 0.0),
        model_regret=np.where(tile_wins, 0.0, 0.3), estimate_log2=np.where(tile_wins, -0.4, 0.4),
        estimate_sd_log2=0.05))
    floor = calibrate_floor(held, True, "20 % of problems")
    assert floor["estimate"] is not None and floor["calibration"]["rule_geomean"] == 0.0
    assert floor["calibration"]["argmin_geomean"] > 0.1
    f = VendorFloor(json.loads(json.dumps(floor)))
    assert not f.keeps_vendor(-0.5, math.nan, VendorEstimate(-0.4, 0.05))
    assert f.keeps_vendor(-0.5, math.nan, VendorEstimate(0.4, 0.05))
    assert f.keeps_vendor(-0.5, math.nan, None)                      # no estimate: the vendor
    assert list(estimate_wins(np.array([-0.4, 0.4, np.nan]), np.zeros(3), 0.0, 1.0)) == [True, False, False]
    r = rule_regrets(held, np.full(n, np.nan), np.full(n, np.nan), 0.0, None, math.inf, False, (0.0, 0.0))
    assert (r == 0).all()
    with pytest.raises(ValueError, match="estimate="):
        VendorFloor(dict(floor, estimate=[0.0, -1.0]))
    # the estimate flags where it doubts the decision more than 95 % of the held-out problems
    assert floor["estimate_unsure"] == pytest.approx(0.05 / 0.4)
    assert f.estimate_reason(VendorEstimate(0.02, 0.05)).startswith("the vendor model is unsure")
    assert f.estimate_reason(VendorEstimate(-0.4, 0.05)) is None and f.estimate_reason(None) is None


def test_a_trained_model_with_a_vendor_carries_its_vendor_model_checked_on_load(tmp_path):
    models = build_models(tmp_path)
    folder = artifact_layout.model_folder(models, DEVICE, "triton_mm", "float16")
    art = artifact.load(folder)
    assert art.vendor_model is not None and art.sidecar["vendor_model"]["members"] == 5
    assert len(SHAPES) >= MIN_PROBLEMS
    pred = Predictor(folder)
    p = pred.predict(pred.problem(512, 1024, 256, "NN"))
    est = pred.vendor_estimate(pred.problem(512, 1024, 256, "NN"))
    assert p.tile_vendor_estimate == pytest.approx((2 ** est.mean_log2, 2 ** (est.mean_log2 - 2 * est.sd_log2),
                                                    2 ** (est.mean_log2 + 2 * est.sd_log2)))
    dst = tmp_path / "copy" / DEVICE / "triton_mm" / "float16"
    shutil.copytree(folder, dst)
    files = artifact_layout.files_folder(dst)
    blob = bytearray((files / "vendor.npz").read_bytes())
    blob[len(blob) // 2] ^= 0x20
    (files / "vendor.npz").write_bytes(bytes(blob))
    with pytest.raises(artifact_layout.ArtifactError, match="vendor.npz does not belong"):
        artifact.load(dst)
    (files / "vendor.npz").unlink()
    with pytest.raises(artifact_layout.ArtifactError, match="vendor.npz is missing"):
        artifact.load(dst)
    side = json.loads((dst / "model.json").read_text())
    side["vendor_model"] = None
    side["floor"]["estimate"] = [0.0, 1.0]
    side[artifact_layout.SIDECAR_DIGEST] = artifact_layout.sidecar_digest(side)  # rewritten whole, as by hand
    (dst / "model.json").write_text(json.dumps(side))
    with pytest.raises(artifact_layout.ArtifactError, match="has no vendor model"):
        artifact.load(dst)


def test_a_lookup_table_lists_one_config_only_where_the_whole_estimate_says_the_tile_wins():
    from costlearn.interop.inductor.lut import confident
    from costlearn.serve.prediction import Prediction
    p = Prediction(object(), 1.0, (), False, (), 8, 8, 8, "float16", "NN", "triton_mm", "a100", "predicted")
    assert confident(p) and confident(p._replace(tile_vendor_estimate=(0.7, 0.6, 0.9)))
    assert not confident(p._replace(tile_vendor_estimate=(0.8, 0.6, 1.1)))          # the interval reaches 1
    assert not confident(p._replace(chosen_by="vendor_floor"))


def test_heldout_estimates_come_from_models_that_did_not_see_the_problem(tmp_path):
    from costlearn.collect.dataset import current_rows, load, valid_rows
    from costlearn.learn.holdout import heldout_problems
    from costlearn.learn.train import heldout_estimates
    from costlearn.interop import import_file
    from inductor_fixture import write_log
    shapes = [(64 * (1 + i % 7), 128 * (1 + i % 5), 32 * (1 + i % 11)) for i in range(40)]
    write_log(tmp_path / "log.txt", shapes=shapes, layouts=["NN"] * len(shapes))
    import_file("inductor", tmp_path / "log.txt", device=DEVICE, data_root=tmp_path / "data")
    rows = valid_rows(current_rows(load(tmp_path / "data" / DEVICE)[0])[0]).reset_index(drop=True)
    vendor = rows["config_id"].eq("vendor")                             # a vendor that varies from problem to problem
    rows.loc[vendor, "time_us"] *= 2.0 ** (((rows.loc[vendor, "m"] * 7 + rows.loc[vendor, "k"]) % 13) / 13 - 0.5)
    held = heldout_problems(rows, rows["time_us"].to_numpy())           # any predictions: the records' keys
    got = heldout_estimates(rows, held)
    assert len(got) == len(held) and np.isfinite(got["estimate_log2"]).all() and (got["estimate_sd_log2"] >= 0).all()
    thin = heldout_estimates(rows[rows["m"] == 64].reset_index(drop=True), held)
    assert np.isnan(thin["estimate_log2"]).all()                       # folds of < MIN_PROBLEMS problems: none
    full = VendorModel.fit(problem_table(rows))
    own = full.estimate(problem_features_table(got))[0]
    assert not np.allclose(own, got["estimate_log2"])                  # each fold's model left its problems out


def test_predict_many_estimates_each_problem_as_predict_does(tmp_path):
    models = build_models(tmp_path)
    pred = Predictor(artifact_layout.model_folder(models, DEVICE, "triton_mm", "float16"))
    problems = [pred.problem(m, n, k, lay) for (m, n, k), lay in zip(SHAPES, ["NN", "NT", "TN"] * 4)]
    many = pred.predict_many(problems)
    pred.clear_results()
    assert [p.tile_vendor_estimate for p in many] == [pred.predict(q).tile_vendor_estimate for q in problems]


@pytest.mark.parametrize("chosen_by, estimate, ood, sure", [
    ("predicted", (0.5, 0.4, 0.9), False, True), ("predicted", (0.8, 0.6, 1.1), False, False),
    ("vendor_floor", (1.3, 1.1, 1.6), False, True), ("vendor_floor", (1.1, 0.9, 1.4), False, False),
    ("predicted", (0.5, 0.4, 0.9), True, False), ("ood_fallback", (1.3, 1.1, 1.6), False, False),
    ("predicted", (), False, True), ("vendor_floor", (), False, False)])
def test_a_prediction_is_sure_where_the_whole_interval_agrees_with_its_answer(tmp_path, chosen_by, estimate, ood,
                                                                              sure):
    models = build_models(tmp_path)
    p = Predictor(artifact_layout.model_folder(models, DEVICE, "triton_mm", "float16")).predict_best(256, 256, 256)
    assert p._replace(chosen_by=chosen_by, tile_vendor_estimate=estimate, ood=ood).sure is sure


def test_estimate_doubt_of_floats_is_the_array_path_value():
    from costlearn.model.vendor_floor import estimate_doubt
    means = [0.3, -0.2, 0.0, -0.0, 1e-5, -2.5, math.nan, 0.7]
    sds = [0.1, 0.05, 0.2, 0.2, 0.01, 0.0, 0.1, math.nan]
    arr = estimate_doubt(np.array(means), np.array(sds))
    got = [estimate_doubt(m, s) for m, s in zip(means, sds)]
    assert all(type(g) is float for g in got)
    np.testing.assert_array_equal(np.array(got), arr)           # NaN where the array path has NaN, else equal bits


@pytest.mark.parametrize("damage, match", [
    ("nan bases", "base scores"), ("huge bases", "base scores"), ("2-D bases", "base scores"),
    ("empty file", "unreadable vendor model"), ("truncated", "unreadable vendor model"),
    ("one member fewer", "members of")])
def test_a_vendor_model_rewritten_with_its_sha256_updated_is_still_refused(tmp_path, damage, match):
    """Regression: a vendor.npz whose recorded sha256 was rewritten loaded NaN or 5000 base scores (the vendor kept
    with no reason, or OverflowError at predict), and an empty or truncated one raised EOFError/BadZipFile."""
    from costlearn.core.files import sha256_file
    folder = artifact_layout.model_folder(build_models(tmp_path), DEVICE, "triton_mm", "float16")
    path = artifact_layout.files_folder(folder) / "vendor.npz"
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    if damage == "nan bases":
        arrays["bases"] = np.full_like(arrays["bases"], np.nan)
    elif damage == "huge bases":
        arrays["bases"] = arrays["bases"] + 5000.0
    elif damage == "2-D bases":
        arrays["bases"] = np.stack([arrays["bases"], arrays["bases"]])
    if damage == "empty file":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "one member fewer":
        side = json.loads((folder / "model.json").read_text())
        side["vendor_model"]["members"] -= 1
        side[artifact_layout.SIDECAR_DIGEST] = artifact_layout.sidecar_digest(side)  # rewritten whole, as by hand
        (folder / "model.json").write_text(json.dumps(side))
    else:
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    side = json.loads((folder / "model.json").read_text())
    side["vendor_model"]["sha256"] = sha256_file(path)
    side[artifact_layout.SIDECAR_DIGEST] = artifact_layout.sidecar_digest(side)  # rewritten whole, as by hand
    (folder / "model.json").write_text(json.dumps(side))
    with pytest.raises(artifact_layout.ArtifactError, match=match):
        artifact.load(folder)


def test_the_rankings_estimate_is_the_vendor_models_in_c_and_numpy_to_the_bit(tmp_path):
    """The estimate moved into the ranker's one C call (the row, the members' sums, math.fsum's
    mean and deviation in C); both rankers must still give VendorModel.estimate_problem's bits."""
    models = build_models(tmp_path)
    folder = artifact_layout.model_folder(models, DEVICE, "triton_mm", "float16")
    preds = {name: Predictor(folder, ranker=name) for name in RANKERS.names()}
    vm = preds["native"].artifact.vendor_model
    rng = np.random.default_rng(9)
    shapes = [(1, 1, 1), (256, 512, 1024), (7, 4096, 33)] + \
        [tuple(int(v) for v in s) for s in np.round(2.0 ** rng.uniform(0, 15, (60, 3)))]
    for i, (m, n, k) in enumerate(shapes):
        lay = ("NN", "NT", "TN", "TT")[i % 4]
        want = vm.estimate_problem(m, n, k, lay)
        for name, pred in preds.items():
            q = pred.problem(m, n, k, lay) if lay in pred.layouts else None
            if q is None:
                continue
            got = pred.ranker.rank(q, None, top=3, estimate=True).estimate
            assert (got.mean_log2, got.sd_log2) == (want.mean_log2, want.sd_log2), (name, m, n, k, lay)
            assert pred.vendor_estimate(q) == want
            assert pred.ranker.rank(q, None, top=3).estimate is None            # not asked: not computed
    many = preds["native"].ranker.rank_many([preds["native"].problem(m, n, k) for m, n, k in shapes], top=3,
                                            estimate=True)
    assert [r.estimate for r in many] == [vm.estimate_problem(m, n, k, preds["native"].layouts[0])
                                          for m, n, k in shapes]


def test_c_fsum_is_pythons_math_fsum_to_the_bit():
    """The C mean and deviation must keep math.fsum's bits (the answers may not change with the move to C):
    cancellation, ties at half an ulp, and signs mixed."""
    lib = library()
    if lib is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(3)
    cases = [[1e-16, 1.0, 1e16], [1e16, 1.0, -1e16], [0.1] * 10, [1.0, 2.0 ** -53, 2.0 ** -106], [-0.0, 0.0],
             [], [5e-324, -5e-324, 1e308, -1e308]]
    cases += [(rng.standard_normal(rng.integers(1, 33)) * 10.0 ** rng.integers(-20, 20, 1)).tolist()
              for _ in range(500)]
    cases += [[float(v) for v in rng.choice([1.0, -1.0, 2.0 ** -52, 2.0 ** 52, 3.0], rng.integers(1, 33))]
              for _ in range(500)]
    for xs in cases:
        arr = np.ascontiguousarray(xs, np.float64)
        assert lib.costlearn_fsum(arr.ctypes.data, len(arr)) == math.fsum(xs), xs


def test_a_vendor_model_of_more_members_than_the_c_sums_take_is_refused():
    vm = VendorModel.fit(_problems())
    with pytest.raises(ValueError, match=f"2 to {MAX_MEMBERS}"):
        VendorModel.concat([vm.forest] * (MAX_MEMBERS + 1))
    assert len(VendorModel.concat([vm.forest] * MAX_MEMBERS).bases) == MAX_MEMBERS


def _resave_vendor(dst, arrays):
    """Write ``arrays`` as the artifact's vendor.npz with its sha256 and the sidecar digest updated (a hostile
    or damaged writer that keeps the digests consistent)."""
    import hashlib
    import io
    files = artifact_layout.files_folder(dst)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    (files / "vendor.npz").write_bytes(buf.getvalue())
    side = json.loads((dst / "model.json").read_text())
    side["vendor_model"]["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    side[artifact_layout.SIDECAR_DIGEST] = artifact_layout.sidecar_digest(side)
    (dst / "model.json").write_text(json.dumps(side))


def test_a_vendor_file_whose_bounds_are_not_one_row_is_refused_not_walked_out_of_its_trees(tmp_path):
    """Regression (an attack): bounds of shape (6, 1) passed the partition check (element-wise
    comparisons of one-element rows, an empty diff), and the C estimate then walked tree ranges never checked:
    a segfault, or a wrong estimate where the ranges stayed inside the forest."""
    models = build_models(tmp_path)
    folder = artifact_layout.model_folder(models, DEVICE, "triton_mm", "float16")
    vm = artifact.load(folder).vendor_model
    n = len(vm.forest.roots)
    for bounds in ([[0], [10 ** 8], [0], [0], [0], [n]],
                   [[0], [n * 4 // 5], [n // 5], [n * 2 // 5], [n * 3 // 5], [n]]):
        with pytest.raises(ValueError, match="do not split"):
            VendorModel(vm.forest, np.array(bounds, np.int32), vm.bases)
        dst = tmp_path / "bad" / DEVICE / "triton_mm" / "float16"
        shutil.rmtree(tmp_path / "bad", ignore_errors=True)
        shutil.copytree(folder, dst)
        _resave_vendor(dst, dict(vm.arrays(), bounds=np.array(bounds, np.int32)))
        with pytest.raises(artifact_layout.ArtifactError, match="do not split"):
            artifact.load(dst)



def _with_transfer(pred, intercept, slope, near_log2=0.5):
    """``pred`` with its floor's estimate rule and the given transfer (the rest of its floor kept)."""
    floor = dict(pred.floor.floor, estimate=[0.0, 1.0],
                 transfer=dict(near_log2=near_log2, intercept=intercept, slope=slope, spread_log2=0.3, problems=40))
    pred.floor = VendorFloor(floor)
    return pred


@pytest.mark.parametrize("ranker", RANKERS)
def test_a_tile_far_from_every_training_shape_is_not_chosen_on_the_members_agreement(tmp_path, ranker):
    """Regression: an A100 float16 model answered 50176x570x95 NT with sure=True and a tile the timm log measured
    48x slower than the best: beyond the data the members' trees each predict a constant, so they agreed most
    where the model knew least. Far from every training shape the decision now rests on the transfer the
    hold-out by region measured; where that found the estimate worth nothing (slope 0), the vendor is kept, in
    words, and the answer is not sure."""
    if ranker == "native" and library() is None:
        pytest.skip("no C compiler")
    folder = artifact_layout.model_folder(build_models(tmp_path), DEVICE, "triton_mm", "float16")
    pred = _with_transfer(Predictor(folder, ranker=ranker), intercept=0.0, slope=0.0)
    far = pred.problem(50176, 570, 95, "NT")
    p = pred.predict(far)
    assert p.chosen_by == "vendor_floor" and p.ood and not p.sure
    words = [r for r in p.ood_reasons if r.startswith("no training problem within 0.5 doublings")]
    assert len(words) == 1 and "the vendor library is kept" in words[0] and "nearest (" in words[0]
    assert "+0.00 + 0.00 x estimate" in words[0]
    assert p.tile_vendor_estimate == pytest.approx((1.0, 2 ** -0.6, 2 ** 0.6))      # the transfer's, not the members'
    # a transfer that measured tiles winning far away lets the cost model's tile through, said as such
    pred = _with_transfer(Predictor(folder, ranker=ranker), intercept=-1.0, slope=0.0)
    p = pred.predict(far)
    assert p.chosen_by == "predicted" and not p.sure
    assert any("a tile config is chosen" in r for r in p.ood_reasons)
    # near a training shape the members' estimate decides as before, with no words about distance
    near = pred.problem(*SHAPES[1], "NN")
    assert not any(r.startswith("no training problem within") for r in pred.predict(near).ood_reasons)
    other = _with_transfer(Predictor(folder, ranker=ranker), intercept=0.0, slope=0.0)
    assert pred.predict(near) == other.predict(near)


def test_the_transfer_is_the_held_out_line_of_measured_ratio_on_estimate():
    from costlearn.learn.holdout import fit_transfer
    rng = np.random.default_rng(0)
    est = rng.uniform(-1, 1, 200)
    y = 0.1 + 0.5 * est + 0.05 * rng.standard_normal(200)              # log2(chosen tile / vendor)
    vendor_regret = np.where(y > 0, 0.0, 2.0 ** -y - 1.0)
    tile_regret = (1.0 + vendor_regret) * 2.0 ** y - 1.0
    held = pd.DataFrame(dict(estimate_log2=est, tile_regret=tile_regret, vendor_regret=vendor_regret))
    t = fit_transfer(held)
    assert t["slope"] == pytest.approx(0.5, abs=0.02) and t["intercept"] == pytest.approx(0.1, abs=0.02)
    assert t["spread_log2"] == pytest.approx(0.05, abs=0.01) and t["problems"] == 200 and t["near_log2"] == 0.5
    # an estimate that ranks problems backwards carries nothing: the line is flat at the mean
    flat = fit_transfer(held.assign(estimate_log2=-est))
    assert flat["slope"] == 0.0 and flat["intercept"] == pytest.approx(np.mean(y))
    # too few problems: nothing is expected to win far away
    few = fit_transfer(held.iloc[:10])
    assert (few["intercept"], few["slope"], few["problems"]) == (0.0, 0.0, 10)
    tr = dict(near_log2=0.5, intercept=0.1, slope=0.5, spread_log2=0.2, problems=50)
    floor = VendorFloor(dict(calibrate_floor(pd.DataFrame(), True), estimate=[0.0, 1.0], transfer=tr))
    assert floor.is_far(0.51) and not floor.is_far(0.5) and floor.is_far(math.nan) and floor.is_far(math.inf)
    e = VendorEstimate(-0.1, 0.01)
    assert not floor.keeps_vendor(-1.0, math.nan, e, 0.1)          # near: -0.1 + 0.01 < 0: a tile
    assert floor.keeps_vendor(-1.0, math.nan, e, 2.0)              # far: 0.1 + 0.5 * -0.1 = 0.05: the vendor
    assert not floor.keeps_vendor(-1.0, math.nan, VendorEstimate(-0.5, 0.9), 2.0)   # far: the spread plays no part
    assert floor.transferred(e, 2.0) == (0.1 + 0.5 * -0.1, 0.2) and floor.transferred(e, 0.1) is e
    assert floor.transfer_reason(e, 0.1, "NN", "1x1x1", True) is None
    # a floor written before the transfer decides as it did
    old = VendorFloor(dict(calibrate_floor(pd.DataFrame(), True), estimate=[0.0, 1.0]))
    assert old.transfer is None and not old.is_far(math.inf) and not old.keeps_vendor(-1.0, math.nan, e, 9.0)


def test_the_transfer_has_an_intercept_per_layout_and_one_slope_measured_within_them():
    """Where the pick lands against the vendor at a given estimate differs by layout (the vendor's kernels and the
    tile template treat each layout's operands their own way): each layout of enough held-out problems gets its own
    intercept, the slope is measured within the layouts (a pooled line, biased by the layouts' different estimates,
    would not find it), and a far problem is decided by its layout's line."""
    from costlearn.learn.holdout import fit_transfer
    rng = np.random.default_rng(1)
    parts = []
    for layout, a, centre, n in (("NN", 0.3, -1.0, 120), ("TN", -0.2, 1.0, 120), ("NT", 0.0, 0.0, 12)):
        est = centre + rng.uniform(-0.5, 0.5, n)
        y = a + 0.5 * est + 0.02 * rng.standard_normal(n)
        vendor_regret = np.where(y > 0, 0.0, 2.0 ** -y - 1.0)
        parts.append(pd.DataFrame(dict(layout=layout, estimate_log2=est, vendor_regret=vendor_regret,
                                       tile_regret=(1.0 + vendor_regret) * 2.0 ** y - 1.0)))
    held = pd.concat(parts, ignore_index=True)
    t = fit_transfer(held)
    assert t["slope"] == pytest.approx(0.5, abs=0.02) and set(t["intercepts"]) == {"NN", "TN"}     # NT: 12 < 20
    assert t["intercepts"]["NN"] == pytest.approx(0.3, abs=0.02) and t["intercepts"]["TN"] == pytest.approx(-0.2,
                                                                                                         abs=0.02)
    assert t["spread_log2"] == pytest.approx(0.02, abs=0.01)
    pooled = np.polyfit(held["estimate_log2"], np.log2((1 + held["tile_regret"]) / (1 + held["vendor_regret"])), 1)
    assert pooled[0] < 0.3                                              # what one line over the layouts saw
    floor = VendorFloor(dict(calibrate_floor(pd.DataFrame(), True), estimate=[0.0, 1.0], transfer=t))
    assert floor.transfer_line("TN") == (t["intercepts"]["TN"], t["slope"])
    assert floor.transfer_line("NT") == (t["intercept"], t["slope"])   # too few of its own: the line of all
    e = VendorEstimate(0.0, 0.01)
    assert floor.keeps_vendor(-1.0, math.nan, e, 2.0, "NN") and not floor.keeps_vendor(-1.0, math.nan, e, 2.0, "TN")
    assert floor.transferred(e, 2.0, "TN").mean_log2 == pytest.approx(t["intercepts"]["TN"])
    assert "held as -0.20 + 0.50 x estimate" in floor.transfer_reason(e, 2.0, "TN", "1x1x1", False)
    # one line over every layout where asked: the pooled least squares, bit for bit as before the intercepts
    one = fit_transfer(held, per_layout=False)
    x, y = held["estimate_log2"].to_numpy(), np.log2((1 + held["tile_regret"]) / (1 + held["vendor_regret"])).to_numpy()
    xm, ym = float(np.mean(x)), float(np.mean(y))
    slope = max(float(np.sum((x - xm) * (y - ym)) / float(np.sum((x - xm) ** 2))), 0.0)
    spread = float(np.sqrt(np.sum((y - (ym - slope * xm + slope * x)) ** 2) / (len(x) - 2)))
    assert one["intercepts"] == {} and (one["slope"], one["intercept"], one["spread_log2"]) == (slope, ym - slope * xm,
                                                                                                spread)
    # the calibration asks for the layouts' intercepts only where the held-out problems come from two logs or more
    held = held.assign(m=rng.integers(1, 4096, len(held)), n=64, k=64, model_regret=held["tile_regret"],
                       tile_lr=-1.0, estimate_sd_log2=0.01)
    two = calibrate_floor(held.assign(source=np.where(np.arange(len(held)) % 2, "a.txt", "b.txt")), True)
    assert set(two["transfer"]["intercepts"]) == {"NN", "TN"}
    assert calibrate_floor(held.assign(source="a.txt"), True)["transfer"]["intercepts"] == {}


@pytest.mark.parametrize("transfer", [dict(near_log2=-1.0, intercept=0.0, slope=0.5, spread_log2=0.1),
                                      dict(near_log2=0.5, intercept=math.nan, slope=0.5, spread_log2=0.1),
                                      dict(near_log2=0.5, intercept=0.0, slope=-0.5, spread_log2=0.1),
                                      dict(near_log2=0.5, intercept=0.0, slope=0.5), [0.5, 0.0, 0.5, 0.1], "far",
                                      dict(near_log2=0.5, intercept=0.0, slope=0.5, spread_log2=0.1,
                                           intercepts={"NN": math.inf}),
                                      dict(near_log2=0.5, intercept=0.0, slope=0.5, spread_log2=0.1,
                                           intercepts=[0.1])])
def test_a_malformed_transfer_is_refused_by_name(transfer):
    with pytest.raises(ValueError, match="transfer"):
        VendorFloor(dict(calibrate_floor(pd.DataFrame(), True), estimate=[0.0, 1.0], transfer=transfer))


def test_train_says_how_the_model_answers_real_models_layers_per_layout(tmp_path):
    from costlearn.collect.real_shapes import REFERENCE_LAYERS
    from costlearn.learn.coverage import coverage_lines, data_coverage
    from costlearn.collect.dataset import load, valid_rows
    models = build_models(tmp_path)
    pred = Predictor(artifact_layout.model_folder(models, DEVICE, "triton_mm", "float16"))
    rows = valid_rows(load(tmp_path / "data" / DEVICE)[0])
    rows = rows[rows["dtype"].astype(str) == "float16"]
    cov = data_coverage(pred, rows)
    assert set(cov) == set(pred.layouts)
    for layout, c in cov.items():
        trained = rows[rows["layout"].astype(str) == layout][["m", "n", "k"]].drop_duplicates()
        assert c["problems"] == len(trained) and c["m"] == [int(trained.m.min()), int(trained.m.max())]
        assert c["reference"] == len(REFERENCE_LAYERS) == c["tile"] + c["vendor"] == sum(c["chosen_by"].values())
        assert 0 <= c["sure"] <= c["reference"] and c["far"] >= len(REFERENCE_LAYERS) - 1   # 12 small fixture shapes
    line = coverage_lines(cov, "float16", (0.5,))[0]
    assert f"of {len(REFERENCE_LAYERS)} real-model layer shapes" in line and "farther than 0.5 doublings" in line
