"""Tests of costlearn.interop.triton_autotune: the Triton autotune prune hook and
top_configs, on a small triton_mm model trained from a synthetic Inductor log.

The log is a test fixture, not a measurement: its times follow
``time_us = (5 + M*N*K / 25e6) * LAYOUT_FACTOR[layout] * (1 + 0.3 * j)`` for
the j-th config of FIXTURE_CONFIGS (so config 0 is the fastest everywhere and
the order is the list's order), and the vendor call ``extern_mm`` takes 1.15x
the base time (between configs 0 and 1).
"""
from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

from costlearn.families.triton_mm import TritonMMConfig, VendorCall
from costlearn.interop.triton_autotune import ConfigStandIn, prune_configs, tensor_dtype, tensor_layout, top_configs

from inductor_fixture import (DEVICE, FIXTURE_CONFIGS, LAYOUT_FACTOR, SHAPE_LAYOUTS, SHAPES,  # noqa: F401
                               VENDOR_FACTOR, build_models, strides)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A model store with an a100/triton_mm/float16 model (108 rows, 12 problems, layouts NN, NT, TN)."""
    return build_models(tmp_path_factory.mktemp("triton_hook"))


@pytest.fixture(scope="module")
def predictor(models):
    from costlearn.serve.predictor import load_predictor
    return load_predictor(DEVICE, "triton_mm", "float16", models)


class FakeDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


class FakeTensor:
    """Stands in for a torch.Tensor: a ``dtype`` whose str is torch's, and ``stride()``."""

    def __init__(self, dtype="torch.float16", strides=(1, 1)):
        self.dtype = FakeDtype(dtype)
        self._strides = tuple(strides)

    def stride(self, dim=None):
        return self._strides if dim is None else self._strides[dim]


class PlainConfig:
    """A stand-in for triton.Config written the tutorial's way (BLOCK_SIZE_M ...)."""

    def __init__(self, kwargs, num_warps, num_stages):
        self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages
        self.num_ctas, self.maxnreg, self.pre_hook = 1, None, None

    def __repr__(self):
        return f"PlainConfig({self.kwargs}, num_warps={self.num_warps}, num_stages={self.num_stages})"


def stand_in_configs(kind=ConfigStandIn, spelling=("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")):
    """The fixture's configs in reverse (slowest first), so ranking must reorder them."""
    out = []
    for bm, bn, bk, w, s in reversed(FIXTURE_CONFIGS):
        out.append(kind(dict(zip(spelling, (bm, bn, bk, 8))), num_warps=w, num_stages=s))
    return out


def call_args(m, n, k, layout="NN", dtype="torch.float16"):
    """Triton's named_args of a tutorial-style matmul call (a, b, c, M, N, K, strides)."""
    (a0, a1), (b0, b1) = strides(layout, m, n, k)
    a, b = FakeTensor(dtype, (a0, a1)), FakeTensor(dtype, (b0, b1))
    c = FakeTensor(dtype, (n, 1))
    return dict(a_ptr=a, b_ptr=b, c_ptr=c, M=m, N=n, K=k, stride_am=a0, stride_ak=a1, stride_bk=b0,
                stride_bn=b1, stride_cm=n, stride_cn=1)


def as_mm(cfg) -> TritonMMConfig:
    kw = cfg.kwargs
    return TritonMMConfig(kw.get("BLOCK_M", kw.get("BLOCK_SIZE_M")), kw.get("BLOCK_N", kw.get("BLOCK_SIZE_N")),
                          kw.get("BLOCK_K", kw.get("BLOCK_SIZE_K")), cfg.num_warps, cfg.num_stages,
                          kw.get("GROUP_M", kw.get("GROUP_SIZE_M", 8)))


def spy_layouts(monkeypatch, predictor) -> list:
    """Record the problems the hook scores (the shared Predictor's score_configs, wrapped)."""
    seen = []
    real = predictor.score_configs

    def spy(problem, configs):
        seen.append(problem)
        return real(problem, configs)
    monkeypatch.setattr(predictor, "score_configs", spy)
    return seen


# -- prune hook ----------------------------------------------------------------

@pytest.mark.parametrize("kind,spelling", [(ConfigStandIn, ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")),
                                           (PlainConfig, ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K",
                                                          "GROUP_SIZE_M"))])
def test_hook_keeps_top_k_same_objects_in_predicted_order(models, predictor, kind, spelling):
    configs = stand_in_configs(kind, spelling)
    hook = prune_configs(3, device=DEVICE, models_dir=models)
    for (m, n, k), lay in [((1024, 1024, 1024), "NN"), ((700, 300, 2000), "NN"), ((2048, 512, 768), "TN")]:
        got = hook(configs, call_args(m, n, k, lay))
        assert len(got) == 3
        assert all(any(g is c for c in configs) for g in got)
        times = predictor.score_configs(predictor.problem(m, n, k, lay), [as_mm(c) for c in configs])
        want = [configs[i] for i in np.argsort(times, kind="stable")[:3]]
        assert [id(g) for g in got] == [id(w) for w in want]


def test_hook_learns_the_fixture_best(models):
    configs = stand_in_configs()
    hook = prune_configs(1, device=DEVICE, models_dir=models)
    for (m, n, k), lay in zip(SHAPES, SHAPE_LAYOUTS):
        (best,) = hook(configs, call_args(m, n, k, lay))
        assert (best.kwargs["BLOCK_M"], best.kwargs["BLOCK_N"], best.kwargs["BLOCK_K"], best.num_warps,
                best.num_stages) == FIXTURE_CONFIGS[0]


def test_hook_top_k_above_config_count_returns_all(models):
    configs = stand_in_configs()[:3]
    got = prune_configs(10, device=DEVICE, models_dir=models)(configs, call_args(512, 512, 512))
    assert sorted(map(id, got)) == sorted(map(id, configs))
    assert prune_configs(2, device=DEVICE, models_dir=models)([], call_args(512, 512, 512)) == []


def test_hook_leaves_configs_untouched_and_ranks_infeasible_last(models):
    configs = stand_in_configs()
    hook_fn = object()
    too_big = ConfigStandIn(dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, SPLIT_K=1), num_warps=8,
                            num_stages=5, num_ctas=2, maxnreg=128, pre_hook=hook_fn)   # smem > A100's
    before = dict(too_big.kwargs)
    got = prune_configs(len(configs) + 1, device=DEVICE, models_dir=models)([too_big] + configs,
                                                                           call_args(1024, 1024, 1024))
    assert got[-1] is too_big
    assert too_big.kwargs == before and too_big.pre_hook is hook_fn and too_big.num_ctas == 2 \
        and too_big.maxnreg == 128


def test_hook_reads_keyword_arguments(models, predictor, monkeypatch):
    # Triton passes arguments given by keyword as **kwargs; a kernel argument named "configs" must not clash.
    seen = spy_layouts(monkeypatch, predictor)
    args = call_args(1024, 2048, 512, "NT")
    kw = {name: args.pop(name) for name in ("M", "N", "K", "c_ptr")}
    got = prune_configs(2, device=DEVICE, models_dir=models)(stand_in_configs(), args, configs=3, **kw)
    assert len(got) == 2
    assert (seen[-1].m, seen[-1].n, seen[-1].k, seen[-1].layout) == (1024, 2048, 512, "NT")


def test_hook_shape_and_tensor_argument_names(models, predictor, monkeypatch):
    seen = spy_layouts(monkeypatch, predictor)
    args = call_args(640, 384, 896, "TN")
    renamed = dict(c=args["c_ptr"], a=args["a_ptr"], b=args["b_ptr"], m=640, n=384, k=896)
    hook = prune_configs(2, device=DEVICE, models_dir=models, shape_args=("m", "n", "k"), tensor_args=("a", "b"))
    hook(stand_in_configs(), renamed)
    assert (seen[-1].m, seen[-1].n, seen[-1].k, seen[-1].layout) == (640, 384, 896, "TN")
    with pytest.raises(ValueError, match=r"no argument 'M'.*a_ptr"):
        prune_configs(2, device=DEVICE, models_dir=models)(stand_in_configs(), {"a_ptr": args["a_ptr"], "N": 1})
    with pytest.raises(TypeError, match=r"M=2.5"):
        prune_configs(2, device=DEVICE, models_dir=models)(stand_in_configs(), {**args, "M": 2.5})


def test_hook_empty_problem_returns_configs_unranked(models):
    configs = stand_in_configs()
    got = prune_configs(3, device=DEVICE, models_dir=models)(configs, call_args(0, 512, 512))
    assert [id(g) for g in got] == [id(c) for c in configs[:3]]


def test_the_hook_keeps_the_users_first_config_first_on_out_of_distribution_problems(models, predictor):
    """Regression (an attack): on a problem out of distribution that the floor does not send to the vendor
    ((2**30, 16, 16), (1, 4096, 4096)), the hook put the model's pick first, not the config listed first that
    README and its docstring promise. Out of distribution now keeps the user's first config first, the rest in the
    model's order; in distribution the model's pick still comes first."""
    configs = stand_in_configs()                              # the slowest first: the model would pick another
    mapped = [as_mm(c) for c in configs]
    hook = prune_configs(3, device=DEVICE, dtype="float16", models_dir=models)
    for (m, n, k), lay in [((2**30, 16, 16), "NN"), ((1, 4096, 4096), "NN"), ((3, 2**30, 5), "NN"),
                           ((2**31 - 1, 1, 1), "NT"), ((1, 1, 1), "TN"), ((50176, 570, 95), "NT"),
                           ((64, 64, 64), "NN")]:
        problem = predictor.problem(m, n, k, lay)
        times = predictor.score_configs(problem, mapped)
        reasons, _, _ = predictor.problem_reasons(problem)
        assert reasons and predictor.predict(problem).ood and int(np.argmin(times)) != 0, (m, n, k, lay)
        assert predictor.choose_among(problem, mapped, times) == (0, "first_listed", tuple(reasons))
        got = hook(configs, call_args(m, n, k, lay))
        rest = [configs[i] for i in np.argsort(times, kind="stable") if i != 0][:2]
        assert [id(g) for g in got] == [id(configs[0])] + [id(c) for c in rest], (m, n, k, lay)
    problem = predictor.problem(1024, 1024, 1024, "NN")              # in distribution: the model's pick
    assert not predictor.problem_reasons(problem)[0]
    assert hook(configs, call_args(1024, 1024, 1024))[0] is not configs[0]


# -- layout and dtype detection --------------------------------------------------

def test_tensor_layout_from_strides():
    row_a, col_a = FakeTensor(strides=(512, 1)), FakeTensor(strides=(1, 1024))
    row_b, col_b = FakeTensor(strides=(2048, 1)), FakeTensor(strides=(1, 512))
    assert tensor_layout(row_a, row_b) == "NN"
    assert tensor_layout(col_a, row_b) == "TN"
    assert tensor_layout(row_a, col_b) == "NT"
    assert tensor_layout(col_a, col_b) == "TT"
    assert tensor_layout(FakeTensor(strides=(1024, 2)), row_b) is None      # a strided view
    assert tensor_layout(FakeTensor(strides=(8, 512, 1)), row_b) == "NN"    # batched: the last two dims


def test_hook_detects_layout_from_strides(models, predictor, monkeypatch):
    seen = spy_layouts(monkeypatch, predictor)
    hook = prune_configs(2, device=DEVICE, models_dir=models)
    for lay in ("NN", "NT", "TN"):
        hook(stand_in_configs(), call_args(1024, 512, 2048, lay))
        assert seen[-1].layout == lay
    args = call_args(1024, 512, 2048, "NN")
    args["a_ptr"] = FakeTensor(strides=(4096, 2))                          # neither row- nor column-major
    hook(stand_in_configs(), args)
    assert seen[-1].layout == predictor.layouts[0]
    with pytest.warns(RuntimeWarning, match=r"layout TT.*trained on layouts"):
        hook(stand_in_configs(), call_args(1024, 512, 2048, "TT"))       # not served: first layout, warned
    assert seen[-1].layout == predictor.layouts[0]
    fixed = prune_configs(2, device=DEVICE, models_dir=models, layout="NT")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed(stand_in_configs(), call_args(1024, 512, 2048, "TT"))      # an explicit layout wins, silently
    assert seen[-1].layout == "NT"
    with pytest.raises(ValueError, match=r"layout='TT'.*trained on layouts"):
        prune_configs(2, device=DEVICE, models_dir=models, layout="TT")(stand_in_configs(), call_args(64, 64, 64))


def test_tensor_dtype():
    assert tensor_dtype(FakeTensor("torch.float16")) == "float16"
    assert tensor_dtype(FakeTensor("torch.bfloat16")) == "bfloat16"
    assert tensor_dtype(FakeTensor("torch.float32")) == "float32"
    with pytest.raises(ValueError, match=r"torch\.int8.*allowed.*torch\.float16.*tfloat32"):
        tensor_dtype(FakeTensor("torch.int8"))


def test_hook_detects_dtype(models, predictor, monkeypatch):
    seen = spy_layouts(monkeypatch, predictor)
    hook = prune_configs(2, device=DEVICE, models_dir=models)
    hook(stand_in_configs(), call_args(512, 512, 512, dtype="torch.float16"))
    assert seen[-1].dtype == "float16"
    # bfloat16 tensors ask for the bfloat16 model, which this store lacks.
    with pytest.raises(ValueError, match=r"dtype='bfloat16'.*models present.*float16"):
        hook(stand_in_configs(), call_args(512, 512, 512, dtype="torch.bfloat16"))
    with pytest.raises(ValueError, match=r"dtype='tfloat32'"):
        prune_configs(2, device=DEVICE, models_dir=models, dtype="tfloat32")(stand_in_configs(),
                                                                               call_args(512, 512, 512))
    forced = prune_configs(2, device=DEVICE, models_dir=models, dtype="float16")
    forced(stand_in_configs(), call_args(512, 512, 512, dtype="torch.float32"))   # dtype= wins over the tensors
    assert seen[-1].dtype == "float16"


def test_hook_unsupported_tensor_dtype(models):
    hook = prune_configs(2, device=DEVICE, models_dir=models)
    with pytest.raises(ValueError, match=r"tensor dtype torch\.int8.*allowed"):
        hook(stand_in_configs(), call_args(512, 512, 512, dtype="torch.int8"))
    no_tensors = {"M": 512, "N": 512, "K": 512}
    with pytest.raises(ValueError, match=r"no tensor argument to read the dtype from.*dtype="):
        hook(stand_in_configs(), no_tensors)


# -- config mapping ------------------------------------------------------------

def test_config_missing_block_k_names_what_was_looked_for(models):
    bad = ConfigStandIn(dict(BLOCK_M=64, BLOCK_N=64, GROUP_M=8), num_warps=4, num_stages=3)
    hook = prune_configs(2, device=DEVICE, models_dir=models)
    with pytest.raises(ValueError) as e:
        hook(stand_in_configs() + [bad], call_args(512, 512, 512))
    msg = str(e.value)
    assert f"config #{len(FIXTURE_CONFIGS)}" in msg and "BLOCK_K" in msg and "BLOCK_SIZE_K" in msg \
        and "param_names" in msg


def test_config_with_values_no_triton_mm_config_takes(models):
    hook = prune_configs(2, device=DEVICE, models_dir=models)
    odd = ConfigStandIn(dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=8), num_warps=4, num_stages=3)
    with pytest.raises(ValueError, match=r"config #0 .*block_k=8"):
        hook([odd], call_args(512, 512, 512))


def test_param_names_custom_spelling_and_no_group(models, predictor):
    configs = [ConfigStandIn(dict(TILE_M=bm, TILE_N=bn, TILE_K=bk), num_warps=w, num_stages=s)
               for bm, bn, bk, w, s in FIXTURE_CONFIGS]
    hook = prune_configs(2, device=DEVICE, models_dir=models,
                         param_names=dict(block_m="TILE_M", block_n=["TILE_N"], block_k="TILE_K", group_m=None))
    got = hook(configs[::-1], call_args(1024, 1024, 1024))
    times = predictor.score_configs(predictor.problem(1024, 1024, 1024, "NN"),
                                    [TritonMMConfig(*c) for c in FIXTURE_CONFIGS])      # group_m 8 by default
    assert [id(g) for g in got] == [id(configs[i]) for i in np.argsort(times, kind="stable")[:2]]


def test_bad_arguments_fail_when_the_hook_is_built():
    with pytest.raises(ValueError, match="top_k"):
        prune_configs(0, device=DEVICE)
    with pytest.raises(TypeError, match="top_k"):
        prune_configs(2.0, device=DEVICE)
    with pytest.raises(ValueError, match=r"dtype='fp16'.*float16"):
        prune_configs(2, device=DEVICE, dtype="fp16")
    with pytest.raises(ValueError, match=r"layout='XY'.*NN"):
        prune_configs(2, device=DEVICE, layout="XY")
    with pytest.raises(ValueError, match=r"param_names key 'block_x'.*block_m"):
        prune_configs(2, device=DEVICE, param_names={"block_x": "BX"})
    with pytest.raises(ValueError, match=r"param_names\['block_k'\]=None"):
        prune_configs(2, device=DEVICE, param_names={"block_k": None})
    with pytest.raises(TypeError, match="shape_args"):
        prune_configs(2, device=DEVICE, shape_args="MNK")
    with pytest.raises(TypeError, match="tensor_args"):
        prune_configs(2, device=DEVICE, tensor_args=("a",))
    with pytest.raises(TypeError, match="device"):
        prune_configs(2, device=80)


def test_predictor_loaded_once(models, tmp_path, monkeypatch):
    import costlearn.serve.predictor as predictor
    store = tmp_path / "store"
    shutil.copytree(models, store)                          # a store this process has not loaded yet
    built = []
    real = predictor.Predictor

    class Counting(real):
        def __init__(self, *a, **kw):
            built.append(a)
            super().__init__(*a, **kw)
    monkeypatch.setattr(predictor, "Predictor", Counting)
    hook = prune_configs(2, device=DEVICE, models_dir=store)
    assert built == []                                      # nothing is loaded when the hook is built
    for m in (128, 256, 512, 1024):
        hook(stand_in_configs(), call_args(m, 512, 512))
    assert len(built) == 1


# -- top_configs -------------------------------------------------------------------

def test_top_configs(models, predictor):
    got = top_configs(1024, 1024, 1024, device=DEVICE, dtype="float16", top_k=4, models_dir=models)
    assert len(got) == 4
    for c in got:
        assert set(c.kwargs) == {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"}
        assert isinstance(c.num_warps, int) and isinstance(c.num_stages, int)
    want = [c for c, _ in predictor.predict(predictor.problem(1024, 1024, 1024, "NN"), 5).top_k
            if not isinstance(c, VendorCall)][:4]
    assert [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.kwargs["GROUP_M"], c.num_warps,
             c.num_stages) for c in got] == [(w.block_m, w.block_n, w.block_k, w.group_m, w.num_warps, w.num_stages)
                                             for w in want]
    # The fixture's vendor call ranks second by the formula: it is skipped, and the fastest config comes first.
    assert (got[0].kwargs["BLOCK_M"], got[0].kwargs["BLOCK_N"], got[0].kwargs["BLOCK_K"], got[0].num_warps,
            got[0].num_stages) == FIXTURE_CONFIGS[0]
    every = top_configs(1024, 1024, 1024, device=DEVICE, dtype="float16", top_k=50, models_dir=models)
    ranked = predictor.candidate_mask(predictor.problem(1024, 1024, 1024, "NN"))
    assert len(every) == int(ranked.sum()) - 1 >= len(FIXTURE_CONFIGS)    # all Triton candidates, never the vendor


def test_top_configs_spelling_and_errors(models):
    tut = top_configs(512, 256, 1024, device=DEVICE, dtype="float16", layout="TN", top_k=2, models_dir=models,
                      param_names=dict(block_m="BLOCK_SIZE_M", block_n="BLOCK_SIZE_N", block_k="BLOCK_SIZE_K",
                                       group_m="GROUP_SIZE_M"))
    assert [set(c.kwargs) for c in tut] == [{"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M"}] * 2
    nogroup = top_configs(512, 256, 1024, device=DEVICE, dtype="float16", top_k=1, models_dir=models,
                          param_names={"group_m": None})
    assert set(nogroup[0].kwargs) == {"BLOCK_M", "BLOCK_N", "BLOCK_K"}
    with pytest.raises(ValueError, match=r"layout='TT'.*trained on layouts"):
        top_configs(512, 256, 1024, device=DEVICE, dtype="float16", layout="TT", models_dir=models)
    with pytest.raises(ValueError, match=r"M=0"):
        top_configs(0, 256, 1024, device=DEVICE, dtype="float16", models_dir=models)
    with pytest.raises(ValueError, match=r"no model for device='a100'.*bfloat16"):
        top_configs(512, 256, 1024, device=DEVICE, dtype="bfloat16", models_dir=models)
    with pytest.raises(ValueError, match=r"dtype='half'"):
        top_configs(512, 256, 1024, device=DEVICE, dtype="half", models_dir=models)


def test_top_configs_stand_in_without_triton(models):
    try:
        import triton  # noqa: F401
    except ImportError:
        got = top_configs(512, 512, 512, device=DEVICE, dtype="float16", top_k=2, models_dir=models)
        assert all(type(c) is ConfigStandIn for c in got)
        c = got[0]
        assert c.all_kwargs() == {**c.kwargs, "num_warps": c.num_warps, "num_ctas": 1, "num_stages": c.num_stages}
        assert "ConfigStandIn(" in repr(c)
    else:
        pytest.skip("triton is installed: top_configs returns triton.Config")


# -- with Triton -------------------------------------------------------------------

def test_real_triton_configs(models, predictor):
    triton = pytest.importorskip("triton")
    configs = [triton.Config(dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8), num_warps=w,
                             num_stages=s) for bm, bn, bk, w, s in reversed(FIXTURE_CONFIGS)]
    got = prune_configs(3, device=DEVICE, models_dir=models)(configs, call_args(1024, 1024, 1024))
    times = predictor.score_configs(predictor.problem(1024, 1024, 1024, "NN"), [as_mm(c) for c in configs])
    assert [id(g) for g in got] == [id(configs[i]) for i in np.argsort(times, kind="stable")[:3]]
    tops = top_configs(1024, 1024, 1024, device=DEVICE, dtype="float16", top_k=3, models_dir=models)
    assert len(tops) == 3 and all(isinstance(c, triton.Config) for c in tops)


def test_a_negative_extent_is_refused_not_returned_unranked(models):
    """Regression: M=-5 returned the configs unranked, like an empty problem."""
    hook = prune_configs(2, device=DEVICE, dtype="float16", layout="NN", models_dir=models)
    cfgs = [ConfigStandIn(dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32), 4, 3)] * 3
    with pytest.raises(ValueError, match="negative"):
        hook(cfgs, dict(M=-5, N=64, K=64))
    assert len(hook(cfgs, dict(M=0, N=64, K=64))) == 2


def test_hook_launches_the_fleet_s_measured_winner_alone(models, predictor, tmp_path):
    """prune_configs(tuning_db=...): a measured winner for the problem on the model's device class, among the
    kernel's configs, is returned alone; a problem not measured is ranked as without a database."""
    from costlearn.core.problem import Problem
    from costlearn.serve.fleet import Measurement
    from costlearn.serve.tuning_db import TuningDB
    configs = stand_in_configs()
    db = TuningDB(tmp_path / "t.sqlite", create=True)
    winner = configs[-1]
    db.record(Problem(512, 512, 512, "float16"), "triton_mm", predictor.spec.slug,
              predictor.artifact.family.template_hash,
              [Measurement(as_mm(winner).config_id, 0.9, 1.0, 1.1, 5, "h1", "0123456789")], source="fleet")
    hook = prune_configs(3, device=DEVICE, models_dir=models, tuning_db=db)
    assert hook(configs, call_args(512, 512, 512)) == [winner]
    plain = prune_configs(3, device=DEVICE, models_dir=models)
    assert hook(configs, call_args(1024, 512, 512)) == plain(configs, call_args(1024, 512, 512))
