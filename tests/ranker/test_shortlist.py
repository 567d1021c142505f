"""The shortlist table (costlearn/model/shortlist.py) and the ranker's
candidate rule and held-out evidence, on a triton_mm model trained from the
synthetic Inductor fixture log (a vendor candidate, recorded coverage): the C
and numpy rankers give the same bits with all of them; the table is saved
with its artifact, checked on load and served; predict_many answers as
predict_best does."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import costlearn
from costlearn.learn.holdout import calibrate_floor
from costlearn.model.vendor_floor import VendorFloor
from costlearn.model.artifact_layout import SIDECAR_DIGEST, ArtifactError, files_folder, model_folder, sidecar_digest
from costlearn.model.artifact_save import replace_shortlist
from costlearn.serve.predictor import Predictor, clear_cache
from costlearn.core.problem import Problem
from costlearn.ranker import RANKERS
from costlearn.model.shortlist import Shortlist, ShortlistError, grid_shapes
from costlearn.ranker.shortlist_build import build_lists_numpy, build_shortlist

from inductor_fixture import DEVICE, SHAPES, build_models

STEP, TILES, TREES = 1.0, 3, 4
"""A coarse, cheap table for the fixture model (tens of trees)."""


def _evidence_floor(layouts, unsure_regret: float = 0.2) -> VendorFloor:
    """A calibrated floor whose held-out evidence differs from problem to
    problem (so the nearest evidence matters), with NaN vendor regrets."""
    rng = np.random.default_rng(3)
    recs = []
    for i in range(40):
        m, n, k = (int(v) for v in 2 ** rng.integers(4, 13, 3))
        recs.append(dict(m=m, n=n, k=k, dtype="float16", layout=layouts[i % len(layouts)], source=f"log{i % 2}.txt",
                         model_regret=float(rng.uniform(0, 0.3)),
                         vendor_regret=float("nan") if i % 7 == 0 else float(rng.uniform(0, 0.3)),
                         tile_lr=float(rng.uniform(-0.5, 0.1)), tile_regret=float(rng.uniform(0, 0.3))))
    floor = calibrate_floor(pd.DataFrame(recs), True)
    floor["unsure_regret"] = unsure_regret
    return VendorFloor(floor)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    models = build_models(tmp_path_factory.mktemp("shortlist"), shrunk_variants=False)   # every rule level reached
    return model_folder(models, DEVICE, "triton_mm", "float16")


@pytest.fixture(scope="module")
def pred(folder):
    p = Predictor(folder)
    assert p.ranker.name == "native", "the C ranker did not build here"
    assert p.artifact.scorer.n_trees > TREES and p.vendor_index is not None and p.coverage.recorded
    p.floor = _evidence_floor(p.layouts)
    return p


@pytest.fixture(scope="module")
def table(pred):
    env = pred.artifact.sidecar["envelope"]["max"]
    return build_shortlist(pred.ranker, pred.layouts, [env[d] for d in "MNK"], step=STEP, tiles=TILES, trees=TREES)


@pytest.fixture(scope="module")
def problems(pred):
    rng = np.random.default_rng(11)
    out = [Problem(*(int(x) for x in np.round(2 ** rng.uniform(0, 13, 3))), "float16", pred.layouts[i % 3])
           for i in range(120)]
    out += [Problem(m, n, k, "float16", "NN") for m, n, k in SHAPES[:4]]            # training shapes
    out += [Problem(1, 1, 1, "float16", "NT"), Problem(3, 2**20, 5, "float16", "TN")]  # nothing near; outside
    return out


def _rankers(pred, shortlist):
    r = pred.ranker
    kw = dict(coverage=r.coverage, vendor=r.vendor, evidence=r.evidence, shortlist=shortlist)
    return {name: RANKERS.get(name)(r.features, r.scorer, r.envelope, r.min_tile_caps, **kw)
            for name in RANKERS.names()}


def _same(a, b):
    def eq(x, y):
        return x == y or (math.isnan(x) and math.isnan(y))
    return np.array_equal(a.order, b.order) and np.array_equal(a.scores, b.scores) and a.nearest == b.nearest \
        and a.nearest_distance == b.nearest_distance and a.fits == b.fits and a.level == b.level \
        and eq(a.vendor_near, b.vendor_near) and eq(a.model_near, b.model_near) and a.shortlist == b.shortlist


@pytest.mark.parametrize("with_table", [False, True])
@pytest.mark.parametrize("cascade", [True, False])
def test_both_rankers_give_the_same_bits_with_the_candidate_rule_evidence_and_table(pred, table, problems,
                                                                                     with_table, cascade):
    rk = _rankers(pred, table if with_table else None)
    levels, used = set(), 0
    for q in problems:
        a, b = rk["native"].rank(q, top=6, cascade=cascade), rk["numpy"].rank(q, top=6, cascade=cascade)
        assert _same(a, b), q
        levels.add(a.level)
        used += a.shortlist
    assert levels == {0, 1, 2}, "the problems must reach every level of the candidate rule"
    assert (used > len(problems) // 2) if with_table and cascade else used == 0


def _nudged(f):
    """``f`` rounded one ulp up: how numpy's SIMD paths (AVX-512) can differ from the C library."""
    def g(x, *args, **kw):
        return np.nextafter(f(x, *args, **kw), np.inf)
    return g


def test_rankers_give_the_same_bits_when_numpy_logarithms_round_differently(pred, table, problems, monkeypatch):
    """Regression: on an AVX-512 machine numpy's expm1 (and log2) differ from the C library's in the last
    bit, and the numpy ranker's ``model_near`` differed from the C ranker's (0.09243074034585501 against
    ...502 for Problem(81, 4, 4663, float16, NN)). The numpy ranker must call the C library's functions."""
    for name in ("log2", "expm1", "log1p", "exp", "log"):
        monkeypatch.setattr(np, name, _nudged(getattr(np, name)))
    for with_table in (False, True):
        rk = _rankers(pred, table if with_table else None)
        for q in problems:
            assert _same(rk["native"].rank(q, top=6), rk["numpy"].rank(q, top=6)), (with_table, q)
            assert _same(rk["native"].rank(q, top=6, cascade=False), rk["numpy"].rank(q, top=6, cascade=False)), q
        assert all(_same(a, rk["numpy"].rank(q, top=6)) for q, a in zip(problems, rk["native"].rank_many(problems,
                                                                                                        top=6)))


def test_libm_log2_is_the_c_librarys():
    from costlearn.features.shape import libm_log2
    x = np.random.default_rng(0).uniform(1, 1e6, 2000)
    assert np.array_equal(libm_log2(x), [math.log2(v) for v in x]) and libm_log2(x).dtype == np.float64
    assert libm_log2(81.0) == math.log2(81.0) and libm_log2(x.reshape(40, 50)).shape == (40, 50)


def test_the_candidate_rule_is_the_predictors_mask(pred, problems):
    for q in problems:
        mask, level = pred.ranker.candidate_rule(q)
        res = pred.ranker.rank(q, top=len(pred.configs), cascade=False, shortlist=False)
        assert sorted(res.order) == np.flatnonzero(mask).tolist() and res.level == level, q
        assert np.array_equal(pred.candidate_mask(q), mask)


def test_evidence_is_the_floors(pred, problems):
    for q in problems:
        res = pred.ranker.rank(q, top=6)
        want = pred.floor.near(q.m, q.n, q.k, q.layout)
        assert (res.vendor_near, res.model_near) == pytest.approx(want, nan_ok=True), q


def test_evidence_near_breaks_ties_by_index_and_takes_all_of_too_few_in_c_as_numpy(pred, problems):
    """The C ranker finds the evidence near a problem by a scan of the points sorted by their first coordinate
    (as the envelope's nearest shape). Equal distances (the same problem held out twice, with other regrets;
    a coarse grid) must still go to the lower index, and evidence of fewer problems than ``neighbors`` must
    be used whole, as numpy's sort of every distance does."""
    rng = np.random.default_rng(5)

    def floor_of(count):
        recs = []
        for i in range(count):
            m, n, k = (int(v) for v in 2 ** rng.integers(4, 9, 3))            # a coarse grid: many equal distances
            for _ in range(1 + (i % 3 == 0)):                                   # every third held out twice
                recs.append(dict(m=m, n=n, k=k, dtype="float16", layout=pred.layouts[i % 2], source=f"log{i % 2}.txt",
                                 model_regret=float(rng.uniform(0, 0.3)),
                                 vendor_regret=float("nan") if i % 7 == 0 else float(rng.uniform(0, 0.3)),
                                 tile_lr=float(rng.uniform(-0.5, 0.1)), tile_regret=float(rng.uniform(0, 0.3))))
        floor = calibrate_floor(pd.DataFrame(recs), True)
        floor["neighbors"] = 5
        return VendorFloor(floor)

    r = pred.ranker
    grid = [Problem(int(m), int(n), int(k), "float16", lay) for m, n, k in 2 ** rng.integers(3, 10, (60, 3))
            for lay in pred.layouts[:2]]
    for ev in (floor_of(60), floor_of(2)):
        kw = dict(coverage=r.coverage, vendor=r.vendor, evidence=ev, shortlist=None)
        rk = {name: RANKERS.get(name)(r.features, r.scorer, r.envelope, r.min_tile_caps, **kw)
              for name in RANKERS.names()}
        for q in grid + problems:
            a, b = rk["native"].rank(q, top=6), rk["numpy"].rank(q, top=6)
            assert _same(a, b), q
            assert (a.vendor_near, a.model_near) == pytest.approx(ev.near(q.m, q.n, q.k, q.layout), nan_ok=True), q
    assert len(ev.evidence(pred.layouts[0])[0]) == 3 < ev.neighbors


def test_table_lists_have_the_same_bits_in_c_and_numpy(pred):
    shapes = np.ascontiguousarray(grid_shapes((13, 13, 13), STEP)[::23])     # extents 1 .. 4096
    for lay in pred.layouts:
        a = pred.ranker.shortlist_lists(lay, shapes, TILES, TREES)
        b = build_lists_numpy(_rankers(pred, None)["numpy"], lay, shapes, TILES, TREES)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), lay
        listed = a[0][:, 0] >= 0
        assert 10 < listed.sum() < len(shapes)                                # some points fit nothing
        last = [row[row >= 0][-1] for row in a[0][listed]]
        assert all(c == pred.vendor_index for c in last)                      # the vendor closes each list


def test_at_a_grid_point_the_table_scores_its_own_list_like_the_full_scorer(pred, table):
    """The residual stored at a grid point is the full score minus the early trees' there: at that point
    the table's scores of the candidates it lists are the full scorer's (to float32 rounding), and the
    full scorer's best is among them."""
    rk = _rankers(pred, table)["native"]
    shapes = grid_shapes(table.n, table.step)
    idx = table.tables["NN"][0]
    rng = np.random.default_rng(0)
    checked = 0
    for p in rng.permutation(len(shapes))[:300].tolist():
        m, n, k = shapes[p].tolist()
        q = Problem(m, n, k, "float16", "NN")
        res = rk.rank(q, top=4)
        if not res.shortlist:
            continue
        checked += 1
        full = rk.rank(q, top=4, cascade=False)
        score = dict(zip(full.order, full.scores))
        own = set(idx[p][idx[p] >= 0].tolist())
        assert int(full.order[0]) in own, q
        for c, s in zip(res.order, res.scores):
            if c in own:
                assert s == pytest.approx(score[c], abs=1e-5), (q, c)
    assert checked > 100


def test_rank_many_is_rank_for_each(pred, table, problems):
    for name, r in _rankers(pred, table).items():
        many = r.rank_many(problems, top=6)
        for q, got in zip(problems, many):
            assert _same(got, r.rank(q, top=6)), (name, q)


def test_a_table_is_saved_with_the_artifact_checked_and_served(folder, table, tmp_path):
    import shutil
    dst = tmp_path / "a100" / "triton_mm" / "float16"
    shutil.copytree(folder, dst)
    replace_shortlist(dst, table, dict(note="test"))
    side = json.loads((dst / "model.json").read_text())
    assert side["shortlist"]["trees"] == TREES and side["shortlist"]["note"] == "test"
    p = Predictor(dst)
    assert p.ranker.shortlist is not None
    q = p.problem(1000, 3000, 700, "NN")
    assert p.ranker.rank(q).shortlist and p.predict(q).config in p.configs
    assert Predictor(dst, shortlist=False).ranker.shortlist is None
    files = files_folder(dst)
    data = (files / "shortlist.npz").read_bytes()
    (files / "shortlist.npz").write_bytes(data[:-10] + b"0" * 10)             # damaged: another sha256
    with pytest.raises(ArtifactError, match="does not belong"):
        Predictor(dst)
    (files / "shortlist.npz").unlink()
    with pytest.raises(ArtifactError, match="missing"):
        Predictor(dst)
    replace_shortlist(dst, None)                                              # mended: served without
    assert Predictor(dst).ranker.shortlist is None and json.loads((dst / "model.json").read_text())["shortlist"] is None


def test_a_table_for_other_candidates_is_refused(folder, table, tmp_path):
    import shutil
    dst = tmp_path / "m"
    shutil.copytree(folder, dst)
    idx, res = next(iter(table.tables.values()))
    other = Shortlist(table.step, table.trees, table.tiles, table.width, table.n, table.n_candidates + 1,
                      {"NN": (idx, res)})
    replace_shortlist(dst, other)
    with pytest.raises(ArtifactError, match="candidates"):
        Predictor(dst)
    with pytest.raises(ShortlistError, match="outside"):
        Shortlist(table.step, table.trees, table.tiles, table.width, table.n, 2, {"NN": (idx, res)})
    (files_folder(dst) / "shortlist.npz").write_bytes(b"not a zip")
    side = json.loads((dst / "model.json").read_text())
    side["shortlist"]["sha256"] = __import__("hashlib").sha256(b"not a zip").hexdigest()
    side[SIDECAR_DIGEST] = sidecar_digest(side)                        # rewritten whole, as by hand
    (dst / "model.json").write_text(json.dumps(side))
    with pytest.raises(ArtifactError, match="unreadable shortlist"):
        Predictor(dst)


def test_predict_many_takes_an_integer_array_and_problems(folder):
    """Regression (found by a new user): an (n, 3) int64 array, what a compiler holds, was refused."""
    models = folder.parents[2]
    kw = dict(family="triton_mm", models_dir=models)
    want = costlearn.predict_many([(1000, 3000, 700), (64, 64, 64)], "float16", DEVICE, **kw)
    got = costlearn.predict_many(np.array([[1000, 3000, 700], [64, 64, 64]], np.int64), "float16", DEVICE, **kw)
    assert got == want
    assert costlearn.predict_many([Problem(1000, 3000, 700, "float16")], "float16", DEVICE, **kw) == want[:1]


def test_predict_many_answers_as_predict_best_in_order(folder, tmp_path, monkeypatch):
    models = folder.parents[2]
    shapes = [(1000, 3000, 700), (64, 64, 64, "NT"), (5, 7, 9), (1000, 3000, 700, "TN"), (1000, 3000, 700)]
    clear_cache()
    many = costlearn.predict_many(shapes, "float16", DEVICE, family="triton_mm", models_dir=models, top_k=3)
    clear_cache()
    one = [costlearn.predict_best(*s[:3], "float16", DEVICE, family="triton_mm", layout=s[3] if len(s) > 3 else "NN",
                                  models_dir=models, top_k=3) for s in shapes]
    assert many == one
    assert many[0] is many[4]                                                 # a repeat is the cached answer


@pytest.mark.parametrize("problems, exc, says", [
    ([(64, 64)], TypeError, r"problems\[0\]"),
    ([(64, 64, 64), (64, 0, 64)], ValueError, r"problems\[1\].*N"),
    ([(64, 64, 64.0)], TypeError, r"problems\[0\]"),
    ([(64, 64, 64, "XX")], ValueError, r"problems\[0\].*layout"),
    ("64 64 64", TypeError, r"list of .*\(M, N, K, layout, epilogue\) tuples"),   # all three forms named
    ({(64, 64, 64): 1}, TypeError, "list of"),
    ((p for p in [(64, 64, 64)]), TypeError, "list of"),
    (np.array([[64.0, 64, 64]]), TypeError, r"integers of shape \(n, 3\)"),
    ([Problem(64, 64, 64, "float32")], ValueError, r"problems\[0\].*dtype 'float32'"),
])
def test_predict_many_names_the_bad_problem(folder, problems, exc, says):
    with pytest.raises(exc, match=says):
        costlearn.predict_many(problems, "float16", DEVICE, family="triton_mm", models_dir=folder.parents[2])


def test_a_ranking_of_a_given_mask_never_uses_the_table(pred, table, problems):
    """The table lists the candidate rule's best; a caller's mask (a Triton autotuner's configs, the configs
    measured on a problem) must get every one of its candidates scored."""
    for name, r in _rankers(pred, table).items():
        for q in problems[:40]:
            mask, _ = r.candidate_rule(q)
            res = r.rank(q, mask, top=int(mask.sum()))
            assert not res.shortlist and sorted(res.order) == np.flatnonzero(mask).tolist(), (name, q)


def test_predict_many_of_tuples_answers_as_of_problems_and_as_the_numpy_ranker(folder):
    """costlearn.predict_many answers plain (M, N, K[, layout[, epilogue]]) tuples through
    Predictor.predict_shapes and the ranker's rank_many_served, without a Problem where an answer needs none: the
    answers must be predict_many's of the Problems, and the numpy ranker's (which leaves every decision to
    Python), in order, a repeat the same answer."""
    fresh, twin = Predictor(folder), Predictor(folder, ranker="numpy")
    rng = np.random.default_rng(31)
    shapes = []
    for i, row in enumerate(np.round(2.0 ** rng.uniform(0, 13, size=(45, 3))).astype(int).tolist()):
        layout, epilogue = fresh.layouts[i % len(fresh.layouts)], fresh.epilogues[i % len(fresh.epilogues)]
        shapes.append([tuple(row), (*row, layout), (*row, layout, epilogue), [*row, layout]][i % 4])
    shapes.append(shapes[5])
    clear_cache()
    got = costlearn.predict_many(shapes, "float16", DEVICE, family="triton_mm", models_dir=folder.parents[2], top_k=3)
    problems = [Problem(*s[:3], "float16", *s[3:]) for s in shapes]
    assert repr(got) == repr(fresh.predict_many(problems, 3)) == repr(twin.predict_many(problems, 3))
    assert got[-1] is got[5]
