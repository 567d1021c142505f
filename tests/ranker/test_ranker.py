"""The Ranker seam: one contract run over both implementations (native C and
numpy), which must give the same bits; the cascade keeps the full model's
choice; the C struct is checked against its one Python definition."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from costlearn.model.forest import FlatForest
from costlearn.model.scorer import Scorer
from costlearn.serve.predict import Predictor, predict_best
from costlearn.core.problem import EPILOGUES, Problem
from costlearn.ranker import RANKERS, _build
from costlearn.collect.sampler import ShapeBounds, sample_shapes

from conftest import ROOT


@pytest.fixture(scope="module")
def pred(model_dir):
    p = Predictor(model_dir)
    assert p.ranker.name == "native", "the C ranker did not build here"
    return p


@pytest.fixture(scope="module")
def rankers(pred):
    """Every registered ranker over the committed model."""
    r = pred.ranker
    return {name: RANKERS.get(name)(r.features, r.scorer, r.envelope, r.min_tile_caps) for name in RANKERS.names()}


@pytest.fixture(scope="module")
def problems():
    rng = np.random.default_rng(17)
    wide = [Problem(*(int(x) for x in np.round(2 ** rng.uniform(0, 14, 3)))) for _ in range(150)]
    fused = [Problem(*q.shape, epilogue=EPILOGUES[1 + i % 3]) for i, q in enumerate(wide[:60])]
    return wide + [Problem(*s) for s in [(1, 1, 1), (1, 1024, 1024), (2**31 - 1, 1, 1), (3, 2**20, 5)]] + fused + \
        [Problem(1, 1, 1, epilogue="bias_gelu"), Problem(2**31 - 1, 1, 1, epilogue="bias")]


def _same(a, b):
    return np.array_equal(a.order, b.order) and np.array_equal(a.scores, b.scores) and a.nearest == b.nearest \
        and a.nearest_distance == b.nearest_distance and a.fits == b.fits


@pytest.mark.parametrize("cascade", [True, False])
@pytest.mark.parametrize("top", [1, 5, 12])
def test_every_ranker_gives_the_same_bits(rankers, problems, cascade, top):
    ref = rankers["numpy"]
    for name, r in rankers.items():
        for q in problems:
            assert _same(r.rank(q, top=top, cascade=cascade), ref.rank(q, top=top, cascade=cascade)), (name, q)


def test_every_shape_feature_has_the_same_bits_in_c_and_numpy(pred, problems):
    """A scorer that reads one feature column makes the column the score: the
    C features (costlearn_shape_features) equal features.analytic.shape_arrays."""
    f, r = pred.ranker.features, pred.ranker
    for j in np.flatnonzero(f.shape_columns >= 0):
        col = int(f.shape_columns[j])
        sc = Scorer(len(f.names), None, 1.0, col, 1.0)
        a = RANKERS.get("native")(f, sc, r.envelope, r.min_tile_caps)
        b = RANKERS.get("numpy")(f, sc, r.envelope, r.min_tile_caps)
        for q in problems[::5]:
            assert _same(a.rank(q, top=64), b.rank(q, top=64)), (f.names[col], q)


def test_nearest_shape_is_the_envelopes(pred, problems):
    env = pred.envelope
    for q in problems:
        res = pred.ranker.rank(q)
        assert (res.nearest, res.nearest_distance) == env.nearest_index(q.m, q.n, q.k)


def test_flat_forest_margins_match_xgboost(pred, problems):
    booster = pred.artifact.model().booster_
    for q in problems[:40]:
        X = pred.ranker.features.numpy(q.m, q.n, q.k)
        ref = booster.inplace_predict(X, validate_features=False)
        assert np.abs(pred.artifact.scorer.forest.margin_numpy(X) - ref).max() < 1e-4


@pytest.mark.parametrize("kind", ["drawn like the training shapes", "log-uniform"])
def test_cascade_keeps_the_full_models_choice(model_dir, pred, kind):
    full = Predictor(model_dir, cascade=False)
    train = {tuple(s) for s in pred.envelope.shapes}
    if kind == "log-uniform":
        rng = np.random.default_rng(99)
        shapes = [tuple(int(x) for x in np.round(2 ** rng.uniform(0, 14, 3))) for _ in range(400)]
    else:
        drawn = sample_shapes(800, ShapeBounds.for_device(pred.spec.device_type == "cpu"), np.random.default_rng(99))
        shapes = [s for s in drawn if s not in train][:400]
    assert pred.artifact.scorer.cascade, "the committed model has a cascade"
    agree = sum(pred.predict_best(*s).config == full.predict_best(*s).config for s in shapes)
    assert agree >= 0.99 * len(shapes)


def test_rank_is_the_full_model_in_order(pred):
    q = pred.problem(300, 200, 100)
    configs, t = pred.rank(q)
    assert list(t) == sorted(t) and len(configs) == int(pred.feasible(q).sum())
    assert pred.predict(q).config == configs[0]


def test_a_mask_of_the_wrong_shape_or_selecting_nothing_is_refused(pred):
    """Regression: mask=[True] once made the C ranker read past the end of the array."""
    q = pred.problem(300, 200, 100)
    for r in (pred.ranker, RANKERS.get("numpy")(pred.ranker.features, pred.ranker.scorer, pred.envelope,
                                                pred.ranker.min_tile_caps)):
        with pytest.raises(ValueError, match="bool array of shape"):
            r.rank(q, [True])
        with pytest.raises(ValueError, match="selects no candidate"):
            r.rank(q, np.zeros(len(pred.configs), bool))
    big = np.ones(2 * len(pred.configs), bool)
    assert len(pred.rank(q, big[::2])[0]) == len(pred.configs)


def test_huge_top_k_does_not_wrap_in_c(pred):
    """Regression: top_k >= 2**31 wrapped to a negative int32 and picked a wrong config."""
    want = pred.predict_best(300, 200, 500)
    got = pred.predict_best(300, 200, 500, top_k=2**40)
    assert got.config == want.config and len(got.top_k) == int(pred.feasible(pred.problem(300, 200, 500)).sum())


def test_repeated_problem_is_served_from_the_cache(pred):
    a = pred.predict_best(123, 45, 67)
    assert pred.predict_best(123, 45, 67) is a


def test_bool_extent_is_refused_even_when_the_int_shape_is_cached(device_name):
    """Regression: True == 1 and hash(True) == hash(1), so a cache keyed by the
    raw arguments would have answered predict_best(True, 8, 8)."""
    predict_best(1, 8, 8, device=device_name)
    with pytest.raises(TypeError, match="M=True"):
        predict_best(True, 8, 8, device=device_name)
    with pytest.raises(TypeError, match="top_k=True"):
        predict_best(1, 8, 8, device=device_name, top_k=True)


@pytest.mark.parametrize("kw, exc, says", [
    (dict(measure_top_k=-1), ValueError, "measure_top_k=-1"),
    (dict(measure_top_k=1.5), TypeError, "measure_top_k=1.5"),
    (dict(measure_top_k=True), TypeError, "measure_top_k=True"),
    (dict(measure_top_k=None), TypeError, "measure_top_k=None"),
    (dict(backend="opencl"), TypeError, "backend='opencl'"),
    (dict(tuning_db=3), TypeError, "tuning_db=3"),
])
def test_bad_options_say_what_is_allowed_even_for_a_cached_problem(device_name, kw, exc, says):
    predict_best(8, 8, 8, device=device_name)
    with pytest.raises(exc, match=says):
        predict_best(8, 8, 8, device=device_name, **kw)


def test_the_c_struct_is_generated_from_python_and_its_layout_checked():
    import ctypes

    from costlearn.ranker import native_library, native_structs
    header = native_structs.c_header()
    for name, _ in native_structs.RankContext._fields_:
        assert f" {name}" in header or f"*{name};" in header, name
    native_structs.check_layout(native_library.library())

    class Shifted:                                     # a library built from another struct layout
        def costlearn_layout(self, out, n):
            real = (ctypes.c_int64 * n)()
            got = native_library.library().costlearn_layout(real, n)
            for i in range(n):
                out[i] = real[i] + (8 if i == 5 else 0)
            return got
    with pytest.raises(OSError, match="struct layout"):
        native_structs.check_layout(Shifted())


def test_the_query_and_outputs_codecs_write_and_read_the_context_fields_ctypes_names():
    """QUERY and OUTPUTS (one struct.pack_into / unpack_from a ranking in place
    of ctypes' conversions) must land on RankContext's fields, padding
    skipped: a wrong format ranks another problem, or reads a stale field."""
    from costlearn.ranker import native_structs
    rc = native_structs.RankContext()
    native_structs.QUERY.pack_into(rc, native_structs.RankContext.q_m.offset, 2**31 - 1, 3, 2**40, 2**63 + 5, 7, 14)
    assert (rc.q_m, rc.q_n, rc.q_k, rc.q_mask, rc.q_top, rc.q_mode) == (2**31 - 1, 3, 2**40, 2**63 + 5, 7, 14)
    values = {}
    for i, name in enumerate(native_structs.OUTPUT_FIELDS):
        values[name] = i + 11 if isinstance(getattr(rc, name), int) else i + 0.5
        setattr(rc, name, values[name])
    assert native_structs.OUTPUTS.unpack_from(rc, native_structs.RankContext.nearest.offset) == tuple(values.values())
    with pytest.raises(ValueError, match="out of order"):
        native_structs._fields_struct(("v_score", "nearest"))


_PREDICT = ("import sys, json, warnings; warnings.simplefilter('always'); "
            "from costlearn.serve.predictor import Predictor; from costlearn.ranker import native_library; "
            "p = Predictor(sys.argv[1]); print(p.ranker.name); "
            "print(json.dumps([p.predict_best(*s).config.config_id for s in [(1,64,64),(300,200,500),(7,9,11),"
            "(48,64,96),(9000,3,12000)]])); print(native_library.library_unavailable())")


def _installed_copy(folder):
    """A copy of the installed package (its built extensions included) in ``folder``, to change without touching
    the one the other tests use."""
    import shutil
    shutil.copytree(ROOT / "costlearn", folder / "costlearn", ignore=shutil.ignore_patterns("__pycache__"))
    return folder / "costlearn" / "ranker"


def _run(model_dir, path, **env):
    e = dict(os.environ, PYTHONPATH=str(path), **env)
    e.pop("COSTLEARN_NO_C", None)
    return subprocess.run([sys.executable, "-c", _PREDICT, str(model_dir)], env=e, capture_output=True, text=True,
                          cwd=path)                     # (-c puts the working folder first on the path)


def test_the_committed_c_header_is_the_one_python_generates():
    """costlearn_structs.h is built into the C code at install; a struct changed in Python and not in the header
    would build a library whose layout check refuses it (native_structs.write_header() writes it)."""
    from costlearn.ranker import native_structs
    assert (ROOT / "costlearn" / "ranker" / "costlearn_structs.h").read_text() == native_structs.c_header()


def test_every_c_file_beside_the_ranker_is_built_hashed_and_shipped():
    """The one extension is compiled from every C file beside the ranker, and its staleness check hashes each of
    them and the headers (_build.source_files); MANIFEST.in ships them all (the sdist, and the wheel's package
    data), so a C file added and not listed is found here."""
    import fnmatch
    files = _build.source_files("_native")
    here = ROOT / "costlearn" / "ranker"
    assert {p.name for p in here.glob("*.[ch]")} == set(files)
    assert set(_build.HEADERS) == {p.name for p in here.glob("*.h")} and _build.HEADER in _build.HEADERS
    shipped = [w for line in (ROOT / "MANIFEST.in").read_text().splitlines() if line.startswith("include ")
               for w in line.split()[1:]]
    assert [f for f in files if not any(fnmatch.fnmatch(f"costlearn/ranker/{f}", w) for w in shipped)] == []


def _needs_built_c():
    from costlearn.ranker import native_library
    if native_library.library() is None:
        pytest.skip(f"the install built no C code here: {native_library.library_unavailable()}")


def test_without_built_c_code_numpy_answers_the_same_and_no_compiler_runs(model_dir, tmp_path):
    """An install where no compiler worked has no extension: one warning naming why, the numpy ranker, the same
    configs; nothing is compiled (no compiler on PATH, nothing new in the cache)."""
    _needs_built_c()
    ok = _run(model_dir, ROOT).stdout.splitlines()
    ranker = _installed_copy(tmp_path)
    for built in ranker.glob("_*.so"):
        built.unlink()
    out = _run(model_dir, tmp_path, PATH=str(tmp_path / "no-bin"), COSTLEARN_CACHE=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert ok[0] == "native" and lines[0] == "numpy"
    assert "the install built no C ranker" in out.stderr and "the install built no C ranker" in lines[2]
    assert json.loads(lines[1]) == json.loads(ok[1])
    assert not [p for p in (tmp_path / "cache").glob("*") if not p.name.startswith("forest-checked")]


@pytest.mark.parametrize("changed", _build.source_files("_native"))
def test_a_build_older_than_the_c_source_beside_it_is_refused_not_run(model_dir, tmp_path, changed):
    """An editable install whose C changed since pip install (any of its sources or headers): the build reports the
    sha256 of what it was compiled from, which no longer matches, so it is not loaded (numpy answers) and the
    warning says how to rebuild."""
    _needs_built_c()
    ranker = _installed_copy(tmp_path)
    with open(ranker / changed, "a") as fh:
        fh.write("/* changed after the build */\n")
    out = _run(model_dir, tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "numpy" and "compiled from another source" in out.stderr and "pip install -e ." in lines[2]
    assert json.loads(lines[1]) == json.loads(_run(model_dir, ROOT).stdout.splitlines()[1])


def test_fast_math_in_cflags_is_taken_out_of_the_build(model_dir, tmp_path):
    """Regression: CC='cc -ffast-math' built a library that, loaded, set flush-to-zero for the whole process (gcc
    links crtfastmath) and gave other bits than numpy; the package build removes the unsafe flags, those that
    reorder floating point one by one and crtfastmath given to the linker included (an attack found those)."""
    import shutil
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    _needs_built_c()
    ranker = _installed_copy(tmp_path)
    for built in ranker.glob("_*.so"):
        built.unlink()
    shutil.copy(ROOT / "setup.py", tmp_path)
    crt = subprocess.run(["cc", "-print-file-name=crtfastmath.o"], capture_output=True, text=True).stdout.strip()
    env = dict(os.environ, CFLAGS="-ffast-math -Ofast -fassociative-math -fno-signed-zeros -fno-trapping-math",
               LDFLAGS="-ffast-math" + (f" {crt}" if os.path.isabs(crt) and os.path.exists(crt) else ""))
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp_path, env=env, check=True,
                   capture_output=True)
    script = _PREDICT + "; import sys as s; print(s.float_info.min / 2**10 > 0)"
    out = subprocess.run([sys.executable, "-c", script, str(model_dir)], capture_output=True, text=True, cwd=tmp_path,
                         env={k: v for k, v in dict(os.environ, PYTHONPATH=str(tmp_path)).items()
                              if k != "COSTLEARN_NO_C"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "native" and lines[-1] == "True"
    assert lines[1] == _run(model_dir, ROOT).stdout.splitlines()[1]


@pytest.mark.parametrize("keep", [10**12, 2**40 + 16])
def test_a_cascade_keeping_more_than_the_scorer_allows_is_refused_not_run(pred, keep):
    """Regression: a crafted scorer.npz whose cascade kept 2**40 candidates
    overflowed the C ranker's int and crashed the process."""
    from costlearn.model.scorer import MAX_KEEP, ScorerError
    sc = pred.ranker.scorer
    with pytest.raises(ScorerError, match=f"survivors decreasing in \\[5, {MAX_KEEP}\\]"):
        Scorer(sc.n_features, sc.forest, sc.sign, sc.column, sc.column_weight, sc.offsets,
               ((16, keep, 0.05), (64, 6, 0.05)))


def _forest_with(forest, **change):
    from costlearn.model.forest import FlatForest
    parts = dict(nodes=forest.nodes, roots=forest.roots, depths=forest.depths, base_score=forest.base_score,
                 n_features=forest.n_features)
    parts.update(change)
    return FlatForest(**parts)


def test_a_forest_declaring_a_tree_shallower_than_it_is_is_refused(pred):
    """Regression: depth 1 declared for a deeper tree made C stop the walk
    early (other scores than numpy's) while validate() accepted it."""
    from costlearn.model.forest import ForestError
    f = pred.ranker.scorer.forest
    d = f.depths.copy()
    d[-1] = 1
    with pytest.raises(ForestError, match="shallower than its deepest leaf"):
        _forest_with(f, depths=d).validate()


def test_a_forest_with_nan_leaves_is_refused(pred):
    """Regression: NaN leaf values gave NaN scores that C and numpy ordered
    differently."""
    from costlearn.model.forest import ForestError
    f = pred.ranker.scorer.forest
    nodes = f.nodes.copy()
    leaf = np.flatnonzero((nodes["flags"] & 1) == 0)
    nodes["value"][leaf[::50]] = np.nan
    with pytest.raises(ForestError, match="not finite"):
        _forest_with(f, nodes=nodes).validate()


def test_a_tree_deeper_than_the_walks_limit_is_refused():
    """Regression: a 70-level chain declared as depth 64 passed validate(),
    and both walks returned a threshold as if it were a leaf value."""
    from costlearn.model.forest import NODE_DTYPE, FlatForest, ForestError
    depth = 70
    nodes = np.zeros(2 * depth + 1, NODE_DTYPE)
    for i in range(depth):                   # node 2i splits into a leaf (2i+1) and the rest of the chain (2i+2)
        j = 2 * i
        nodes[j]["flags"], nodes[j]["child"], nodes[j]["value"] = 1, j + 1, 0.5
        nodes[j + 1]["child"], nodes[j + 1]["value"] = j + 1, 1.0
    nodes[-1]["child"], nodes[-1]["value"] = len(nodes) - 1, 7.0
    with pytest.raises(ForestError, match="deeper than 64 levels"):
        FlatForest(nodes, np.array([0], np.int32), np.array([64], np.int32), 0.0, 1).validate()


def test_a_model_of_several_layouts_ranks_each_layout_the_same_in_c_and_numpy(tmp_path):
    """Regression: the layout columns are per problem; the C ranker takes one
    template per layout, and must rank exactly as numpy and as the model."""
    from costlearn.features.base import LAYOUT_FEATURES
    from inductor_fixture import build_models
    folder = build_models(tmp_path) / "a100" / "triton_mm" / "float16"
    p = Predictor(folder)
    assert p.ranker.name == "native" and len(p.layouts) == 3
    ref = RANKERS.get("numpy")(p.ranker.features, p.ranker.scorer, p.envelope, p.ranker.min_tile_caps,
                               coverage=p.ranker.coverage, vendor=p.ranker.vendor)
    cols = [p.ranker.features.names.index(c) for c in LAYOUT_FEATURES]
    for layout in p.layouts:
        assert p.ranker.features.templates[layout][:, cols].tolist()[0] == [layout[0] == "T", layout[1] == "T"]
        for m, n, k in [(1, 4096, 4096), (512, 512, 512), (3000, 700, 9000)]:
            q = Problem(m, n, k, "float16", layout)
            for cascade in (True, False):
                assert _same(p.ranker.rank(q, top=5, cascade=cascade), ref.rank(q, top=5, cascade=cascade)), q
    a, b = (p.ranker.rank(Problem(512, 512, 512, "float16", lay), top=9, cascade=False).scores for lay in ("NN", "TN"))
    assert not np.array_equal(a, b)                                # the layout reaches the scores


def test_a_three_stage_cascade_gives_the_same_bits_in_c_and_numpy(pred, problems):
    """calibrate_cascade may add a late third stage (CASCADE_LATE_TREES) for
    deep scorers; both rankers must run it alike."""
    sc = pred.ranker.scorer
    n = sc.n_trees
    stages = ((min(8, n - 3), 16, 0.1), (min(32, n - 2), 8, 0.05), (n - 1, 6, 0.0))
    three = sc.with_cascade(stages)
    f, env, caps = pred.ranker.features, pred.envelope, pred.ranker.min_tile_caps
    a, b = RANKERS.get("native")(f, three, env, caps), RANKERS.get("numpy")(f, three, env, caps)
    for q in problems:
        assert _same(a.rank(q, top=5), b.rank(q, top=5)), q


def test_specialized_forest_gives_the_same_bits_without_the_fixed_columns():
    import xgboost as xgb
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3)).astype(np.float32)
    dev = np.where(np.arange(400) < 200, 3.0, 5.0).astype(np.float32)      # a device column: two devices
    y = X[:, 0] * np.where(dev > 4, 2.0, -1.0) + X[:, 1]
    full = np.hstack([X, dev[:, None]]).astype(np.float32)
    bst = xgb.train(dict(max_depth=4, eta=0.3), xgb.DMatrix(full, label=y), num_boost_round=30)
    forest = FlatForest.from_xgboost(bst)
    assert (forest.nodes["feature"][(forest.nodes["flags"] & 1) != 0] == 3).any()      # it does split on the device
    for value in (3.0, 5.0):
        Xd = np.ascontiguousarray(np.hstack([X, np.full((400, 1), value, np.float32)]))
        small = forest.specialize({3: value}, 3)
        assert small.n_features == 3 and small.n_trees == forest.n_trees
        np.testing.assert_array_equal(small.margin_numpy(np.ascontiguousarray(X)), forest.margin_numpy(Xd))
    with pytest.raises(Exception, match="must lie in"):
        forest.specialize({1: 0.0}, 3)


def test_the_c_walk_sends_every_leaf_to_the_sentinel_column_and_refuses_a_split_there(pred):
    """The walked copy of a forest (costlearn_sentinel_leaves): each leaf's feature is the sentinel column
    after the features, every other field and every internal node as stored; a split on that column or
    after it is refused, not walked; the copy is made once per forest."""
    from costlearn.ranker.native import walked_nodes
    from costlearn.ranker.native_library import library
    from costlearn.ranker.native_structs import MAX_FEATURES
    lib = library()
    if lib is None:
        pytest.skip("no C compiler here")
    f = pred.ranker.scorer.forest
    walked = walked_nodes(lib, f, f.n_features)
    leaf = (f.nodes["flags"] & 1) == 0
    assert leaf.any() and (walked["feature"][leaf] == f.n_features).all()
    assert (walked[~leaf] == f.nodes[~leaf]).all()
    for name in ("value", "child", "flags"):
        assert np.array_equal(walked[name], f.nodes[name])
    assert walked_nodes(lib, f, f.n_features) is walked
    nodes = f.nodes.copy()
    nodes["feature"][np.flatnonzero(~leaf)[0]] = f.n_features - 1
    with pytest.raises(ValueError, match="at or after its sentinel column"):
        walked_nodes(lib, _forest_with(f, nodes=nodes), f.n_features - 1)
    assert lib.costlearn_sentinel_leaves(f.nodes.ctypes.data, len(f.nodes), MAX_FEATURES + 1,
                                         walked.copy().ctypes.data) == -1


@pytest.mark.parametrize("name", ["native", "numpy"])
def test_rank_served_is_rank_with_the_served_options_from_the_problems_fields(model_dir, name):
    """A prediction ranks through Ranker.rank_served (the native ranker's without a Problem); it must be
    rank's ranking of the Problem with the candidate rule, the estimate and the decision, with and without the
    cascade, for every epilogue."""
    ranker = Predictor(model_dir, ranker=name).ranker
    rng = np.random.default_rng(23)
    for (m, n, k), epi in zip(np.round(2.0 ** rng.uniform(0, 14, size=(24, 3))).astype(int).tolist(),
                              list(EPILOGUES) * 6):
        q = Problem(m, n, k, "float32", "NN", epi)
        for cascade in (True, False):
            want = ranker.rank(q, None, top=6, cascade=cascade, estimate=True, decide=True)
            assert repr(ranker.rank_served(m, n, k, "NN", epi, 6, cascade)) == repr(want), (q, cascade)


def _cascade_walks_one_problem_at_a_time(cases, ends, total, stages):
    """The cascade search as it was (and as the rankers run a cascade): per problem, sort the live rows by
    (score, row), keep the first up to the keep-th's score plus the margin."""
    col = {t: j for j, t in enumerate(ends)}
    walks = miss1 = miss5 = 0
    for score, best, top in cases:
        live, done = np.arange(len(score)), 0
        for t, keep, margin in stages:
            if len(live) <= keep:
                continue
            walks += (t - done) * len(live)
            done = t
            s = score[live, col[t]]
            order = np.lexsort((live, s))
            live = live[order[:int(np.searchsorted(s[order], s[order[keep - 1]] + margin, side="right"))]]
        walks += (total - done) * len(live)
        kept = set(live.tolist())
        miss1 += best not in kept
        miss5 += not set(top) <= kept
    return walks, miss1, miss5


def test_the_cascade_search_over_all_problems_at_once_walks_and_misses_as_one_problem_at_a_time():
    """Training spent most of its time (72 of 90 s of a fixture model's) running each candidate cascade
    problem by problem in Python, and held every problem's whole score matrix (gigabytes for a deep scorer).
    CascadeSearch runs a cascade over all problems at once on the scores at the stage ends only: the same
    walks and misses for every cascade (ties, problems of fewer rows than a keep, stages skipped), and None
    exactly where the walks reach the budget."""
    from costlearn.ranker.cascade import CascadeSearch
    rng = np.random.default_rng(5)
    ends, total = [4, 8, 16, 32], 40
    cases = []
    for _ in range(300):
        rows = int(rng.integers(1, 40))
        steps = np.round(rng.normal(size=(rows, total)), 1)             # coarse: many ties between rows
        score = np.cumsum(steps, axis=1)
        full = np.lexsort((np.arange(rows), score[:, -1]))
        cases.append((score[:, [t - 1 for t in ends]], int(full[0]), full[:5].tolist()))
    search = CascadeSearch(cases, ends, total)
    assert search.walks_full == float(total * sum(len(s) for s, _, _ in cases))
    cascades = [[], [(8, 24, 0.0)], [(4, 60, 0.1)], [(4, 6, 0.0), (32, 2, 0.3)], [(8, 1, 0.0), (16, 8, 0.5)],
                [(4, 12, 0.2), (8, 6, 0.1), (32, 3, 0.0)], [(16, 5, 0.0), (32, 5, 0.0)]]
    for _ in range(40):
        n = int(rng.integers(1, 4))
        ts = sorted(rng.choice(ends, n, replace=False).tolist())
        cascades.append([(t, int(rng.integers(1, 30)), float(rng.choice([0.0, 0.1, 0.3, 1.0]))) for t in ts])
    for stages in cascades + cascades[::-1]:                           # again: the first stage's state reused
        want = _cascade_walks_one_problem_at_a_time(cases, ends, total, stages)
        assert search.evaluate(stages) == want, stages
        for budget in (want[0], want[0] + 1, want[0] - 1, want[0] / 2):
            assert search.evaluate(stages, budget) == (None if want[0] >= budget else want), (stages, budget)


def test_a_library_that_turns_subnormals_off_is_refused(tmp_path):
    """A build that slipped fast math past the package build (flush-to-zero set for the process as it loads) is
    refused with a message saying so, not served with other bits."""
    import shutil
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    here = ROOT / "costlearn" / "ranker"
    so = tmp_path / "_native_fast.so"
    subprocess.run(["cc", "-O2", "-ffast-math", "-shared", "-fPIC", "-I", str(here),
                    f'-DCOSTLEARN_SOURCE_SHA256="{_build.source_sha256("_native")}"', "-o", str(so),
                    *(str(here / source) for source in _build.EXTENSIONS["_native"]), "-lm"], check=True,
                   capture_output=True)
    code = ("import sys; from costlearn.ranker import native_library\n"
            "try:\n    native_library._open(sys.argv[1])\nexcept OSError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(so)], capture_output=True, text=True, cwd=tmp_path)
    assert "refused:" in out.stdout and "flush subnormal floats to zero" in out.stdout, out.stdout + out.stderr


def test_a_built_library_cut_short_is_refused_not_loaded(model_dir, tmp_path):
    """Regression (an attack): a built .so truncated (a copy killed midway) crashed the interpreter (SIGBUS) as it
    loaded; it is refused by its own headers' extent, and numpy answers the same."""
    _needs_built_c()
    ranker = _installed_copy(tmp_path)
    for built in ranker.glob("_*.so"):
        built.write_bytes(built.read_bytes()[:16384])
    out = _run(model_dir, tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "numpy" and "cut short" in out.stderr and "cut short" in lines[2]
    assert json.loads(lines[1]) == json.loads(_run(model_dir, ROOT).stdout.splitlines()[1])


@pytest.mark.parametrize("value", ["garbage", "x" * 100_000])
def test_an_unknown_costlearn_ranker_is_named_as_the_variable(monkeypatch, value):
    """COSTLEARN_RANKER=garbage said "unknown ranker 'garbage'", naming no variable (a 100,000-character value was
    printed whole)."""
    from costlearn.ranker import make_ranker
    monkeypatch.setenv("COSTLEARN_RANKER", value)
    with pytest.raises(ValueError, match=r"COSTLEARN_RANKER='.*; allowed: \['native', 'numpy'\]") as e:
        make_ranker(None, None, None, None)
    assert len(str(e.value)) < 200
