"""Collection strategies: random, prior and active shapes; replay
collections choose among the recorded problems only; active rounds resume."""
import functools
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT
from costlearn.collect.dataset import KEY_COLUMNS, load
from costlearn.collect.sampler import ShapeBounds, sample_shapes
from costlearn.collect.active_shapes import ActiveSettings
from costlearn.collect.shape_streams import PriorShapes, RandomShapes, nearest_unused
from costlearn.collect.strategy import shape_stream
from costlearn.learn.active import EnsembleDisagreement, active_settings

GPU = ShapeBounds.for_device(False)
SMALL = active_settings(first_round=4, round_share=0.5, candidates=40, members=2, trees=8)


def _take(it, n):
    out = []
    for s in it:
        out.append(s)
        if len(out) == n:
            break
    return out


def _round_dims(shapes) -> float:
    """Share of shapes whose N and K are both multiples of 8 (real layers' widths)."""
    return float(np.mean([n % 8 == 0 and k % 8 == 0 for _, n, k in shapes]))


def test_prior_shapes_are_real_models_within_the_bounds_and_distinct():
    shapes = _take(PriorShapes(GPU, 0), 400)
    assert len(set(shapes)) == 400
    assert all(1 <= x <= GPU.max_extent for s in shapes for x in s)
    # A real layer's widths are mostly multiples of 8 (a quarter is log-uniform coverage; token counts such as
    # ViT's 197 and some vocabularies are not); a log-uniform pair rarely is (1/64).
    assert _round_dims(shapes) > 0.45 > 0.1 > _round_dims(sample_shapes(400, GPU, np.random.default_rng(0)))
    assert shapes == _take(PriorShapes(GPU, 0), 400) != _take(PriorShapes(GPU, 1), 400)


def test_prior_starts_with_the_users_shapes_then_draws_their_other_token_counts():
    mine = [(128, 768, 768), (4096, 4096, 1024)]
    shapes = _take(PriorShapes(GPU, 0, user_shapes=mine), 300)
    assert shapes[:2] == mine
    others = shapes[2:]
    assert any(s[1:] == (768, 768) and s[0] != 128 for s in others)
    assert any(s[1:] == (4096, 1024) and s[0] != 4096 for s in others)


def test_a_users_shape_outside_the_bounds_is_named_and_not_measured_and_the_warning_says_what_is_drawn():
    """The warning's last clause once trailed off ("... inside the bounds are"); it states what the stream does."""
    cpu = ShapeBounds.for_device(True)
    with pytest.warns(UserWarning, match=r"1 of the 2 shapes given lie outside .* \(first: 256x512x1024; raise "
                      r"--max-extent or --max-flops to measure them\); their other token counts inside the "
                      r"bounds are still drawn$"):
        prior = PriorShapes(cpu, 0, user_shapes=[(8, 64, 64), (256, 512, 1024)])    # 2MNK over the bound
    shapes = _take(prior, 300)
    assert shapes[0] == (8, 64, 64) and (256, 512, 1024) not in shapes
    assert all(2 * m * n * k <= cpu.max_flops for m, n, k in shapes)
    assert any(s[1:] == (512, 1024) and s[0] < 256 for s in shapes)     # its other token counts, as the warning says


def test_a_given_problem_keeps_its_epilogue_and_its_other_token_counts_are_drawn_as_shapes(dataset_dir, tmp_path):
    """The problems compilers asked (collect --shapes-from-db) reach the prior as Problems."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    from costlearn.collect.plan import plan_problems
    from costlearn.core.problem import Problem
    asked = [Problem(128, 768, 768, "float32", "NN", "bias_gelu"), (64, 64, 64)]
    shapes = _take(PriorShapes(GPU, 0, user_shapes=asked), 300)
    assert shapes[:2] == asked
    assert any(s[1:] == (768, 768) and s[0] != 128 for s in shapes[2:] if not isinstance(s, Problem))
    assert list(plan_problems(shapes[:1], "float32", "NN", ("none", "bias"), 0, drawn=True)) == asked[:1]
    near = list(PriorShapes(GPU, 0, user_shapes=asked[:1], candidates=[(1, 2, 3), (100, 700, 800)]))
    assert near == [Problem(100, 700, 800, "float32", "NN", "bias_gelu"), (1, 2, 3)]     # the nearest candidate
    be = ReplayBackend(dataset_dir)
    for strategy, epilogues, says in [("active", ("bias_gelu",), "the active strategy chooses among shapes"),
                                      ("prior", ("none",), r"this collection measures float32 NN with epilogues "
                                                         r"\['none'\]")]:
        with pytest.raises(ValueError, match=says):
            collect(be, tmp_path / "d", strategy=strategy, shapes=asked, epilogues=epilogues, progress=False,
                    active=SMALL)


def test_over_candidates_every_strategy_proposes_each_candidate_once():
    cands = sample_shapes(60, GPU, np.random.default_rng(3))
    for stream in (RandomShapes(GPU, 0, cands), PriorShapes(GPU, 0, candidates=cands)):
        got = list(stream)
        assert sorted(got) == sorted(cands)
    # prior picks the candidate nearest a real layer first: a transformer-like one, not the skinny extremes
    logs = np.log2(np.asarray(cands, np.float64))
    used = np.zeros(len(cands), bool)
    assert cands[nearest_unused((1024, 4096, 1024), logs, used)] == min(
        cands, key=lambda s: sum((np.log2(s) - np.log2((1024, 4096, 1024))) ** 2))
    assert nearest_unused((1, 1, 1), logs, np.ones(len(cands), bool)) is None


def test_shape_stream_names_what_it_allows():
    with pytest.raises(ValueError, match=r"strategy='greedy'; allowed: \['random', 'prior', 'active'\]"):
        shape_stream("greedy", GPU, 0)
    with pytest.raises(ValueError, match="user shapes are the prior's"):
        shape_stream("random", GPU, 0, user_shapes=[(1, 2, 3)])
    with pytest.raises(ValueError, match="active strategy needs"):
        shape_stream("active", GPU, 0)
    with pytest.raises(ValueError, match=r"strategy='active' needs active=ActiveSettings\(ensemble=...\)"):
        shape_stream("active", GPU, 0, measured=list, candidate_rows=list, spec=object(), settings=ActiveSettings())
    with pytest.raises(ValueError, match="round_share=0"):
        ActiveSettings(round_share=0)


def test_ensemble_disagreement_is_zero_with_one_candidate_and_positive_where_members_differ(dataset_rows,
                                                                                             dataset_spec):
    rows = dataset_rows[dataset_rows["epilogue"] == "none"]
    ens = EnsembleDisagreement(dataset_spec, SMALL, 0).fit(rows)
    cand = rows[["m", "n", "k", "dtype", "layout", "epilogue", "family", "config_id"]]
    shapes = cand[["m", "n", "k"]].drop_duplicates().head(30)
    cand = cand.merge(shapes)
    score = ens.score(cand)
    assert len(score) == 30 and (score >= 0).all() and (score > 0).any()
    assert set(score.index) == {(m, n, k, "NN") for m, n, k in shapes.itertuples(index=False, name=None)}
    one = cand.drop_duplicates(["m", "n", "k"])                     # one config a problem: nothing to disagree on
    assert (ens.score(one) == 0).all()


def test_a_bootstrap_member_that_draws_one_problem_is_redrawn_not_a_crash(dataset_rows, dataset_spec):
    """Regression: with 3 problems measured (the PoCL study's smoke run), a
    member's bootstrap drew one problem 3 times and its fit raised "need rows
    from at least 2 problems", ending the collection."""
    rows = dataset_rows[dataset_rows["epilogue"] == "none"]
    two = rows.merge(rows[["m", "n", "k"]].drop_duplicates().head(2))
    settings = active_settings(members=12, trees=4)              # 2 problems: half the draws are one problem twice
    ens = EnsembleDisagreement(dataset_spec, settings, 0).fit(two)
    assert len(ens.members_) == 12
    with pytest.raises(ValueError, match="on 1 measured problems; it needs 2"):
        EnsembleDisagreement(dataset_spec, settings, 0).fit(rows.merge(rows[["m", "n", "k"]].head(1)))
    with pytest.raises(ValueError, match="first_round=1"):
        ActiveSettings(first_round=1)


class _SizeEnsemble:
    """A stand-in ensemble: the larger a problem, the (slightly) less sure it
    is, and a config's predicted time is its flops at 1 TFLOP/s."""

    def __init__(self, spec, settings, seed):
        pass

    def fit(self, rows):
        return self

    def time_us(self, cand):
        return 2e-6 * (cand["m"] * cand["n"] * cand["k"]).to_numpy(np.float64)

    def score(self, cand):
        first = cand.drop_duplicates(["m", "n", "k", "layout"])
        flops = 2.0 * first["m"] * first["n"] * first["k"]
        index = pd.MultiIndex.from_frame(first[["m", "n", "k", "layout"]])
        return pd.Series(1 + 1e-3 * np.log2(flops.to_numpy()), index=index)


def test_active_per_second_chooses_the_unsure_problems_it_can_afford(dataset_rows):
    """On a PoCL run, active per problem spent its 180 s on three of the
    largest, least known problems (19 problems against random's 62). Per
    second it weighs a problem's score against its measuring seconds."""
    from costlearn.collect.protocol import Protocol
    from costlearn.collect.plan import measuring_seconds
    from costlearn.collect.active_shapes import ActiveShapes
    cands = [(1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)]
    measured = dataset_rows.head(40).assign(m=8, n=8, k=8, compile_s=0.25, n_samples=7)
    measured.loc[measured.index[20:], "m"] = 16                                  # two problems measured

    def candidate_rows(shapes):
        return pd.DataFrame([(*x, c) for x in shapes for c in ("a", "b", "c")],
                            columns=["m", "n", "k", "config_id"]).assign(layout="NN")

    protocol = Protocol()
    cost_s = functools.partial(measuring_seconds, protocol=protocol, problem_overhead_s=1.0)
    seconds = cost_s(candidate_rows(cands).assign(time_us=_SizeEnsemble(0, 0, 0).time_us(candidate_rows(cands))),
                     measured)
    t = 2e-6 * 4096.0 ** 3
    assert seconds[(4096, 4096, 4096, "NN")] == pytest.approx(1.0 + 3 * (0.25 + protocol.launch_us(t, 7) / 1e6))
    assert seconds[(1024, 1024, 1024, "NN")] == pytest.approx(1.0 + 3 * (0.25 + 9 * 2e-6 * 1024.0 ** 3 / 1e6))
    settings = ActiveSettings(first_round=2, min_distance=0.0, ensemble=_SizeEnsemble)
    for cost, want in ((None, cands[-2:]), (cost_s, cands[:2])):
        active = ActiveShapes(GPU, 0, lambda: measured, candidate_rows, object(), settings, cands, "NN", cost)
        assert sorted(_take(active, 2)) == want


def test_active_chooses_per_second_under_a_time_budget_and_per_problem_under_max_problems(dataset_dir, tmp_path,
                                                                                           monkeypatch):
    from costlearn.collect import plan
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    calls, real = [], plan.measuring_seconds
    monkeypatch.setattr(plan, "measuring_seconds", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    be = ReplayBackend(dataset_dir)
    shapes = sorted({key[:3] for key in be.recorded("gemm", "float32", "NN") if key[3] == "none"})[:10]
    collect(be, tmp_path / "problems", strategy="active", max_problems=8, progress=False, active=SMALL)
    assert calls == []
    res = collect(be, tmp_path / "seconds", strategy="active", shapes=shapes, budget_s=600, progress=False,
                  active=SMALL)
    assert res.problems_done == 10 and calls


def test_a_replay_collection_asks_only_for_recorded_problems_and_configs(dataset_dir, dataset_rows, tmp_path):
    """A replay measures only what its log holds, so a strategy can
    be scored on real logs; log-uniform shapes it never recorded came back as
    error rows."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    be = ReplayBackend(dataset_dir)
    recorded = be.recorded("gemm", "float32", "NN")
    for strategy in ("random", "prior", "active"):
        res = collect(be, tmp_path / strategy, strategy=strategy, max_problems=10, progress=False, budget_s=600,
                      active=SMALL)
        df, _ = load(tmp_path / strategy)
        assert res.problems_done == 10 and (df["status"] == "ok").all()
        assert all(c in recorded[(m, n, k, e)] for m, n, k, e, c in
                   df[["m", "n", "k", "epilogue", "config_id"]].itertuples(index=False, name=None))


def test_active_rounds_choose_unmeasured_problems_and_a_resumed_run_goes_on(dataset_dir, tmp_path):
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    be = ReplayBackend(dataset_dir)
    collect(be, tmp_path, strategy="active", max_problems=9, progress=False, active=SMALL)
    again = collect(be, tmp_path, strategy="active", max_problems=6, progress=False, active=SMALL)
    df, _ = load(tmp_path)
    assert again.skipped == 0 and again.problems_done == 6
    assert len(df[["m", "n", "k"]].drop_duplicates()) == 15
    assert not df.duplicated(list(KEY_COLUMNS)).any()


_ACTIVE = r"""
import sys
sys.path.insert(0, {root!r})
from costlearn.collect.backends.replay import ReplayBackend
from costlearn.collect.loop import collect
from costlearn.learn.active import active_settings
collect(ReplayBackend(sys.argv[1]), sys.argv[2], strategy="active", max_problems=int(sys.argv[3]), progress=False,
        active=active_settings(first_round=4, round_share=0.5, candidates=40, members=2, trees=8))
"""


def test_kill_9_in_an_active_round_loses_nothing_and_the_rerun_measures_nothing_twice(dataset_dir, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", _ACTIVE.format(root=str(ROOT)), str(dataset_dir), str(tmp_path)]
    proc = subprocess.Popen(cmd + ["400"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, parts = time.monotonic() + 240, []
    while time.monotonic() < deadline and len(parts) < 7:          # past the first round (4), in the next
        parts = list(tmp_path.glob("part-*.parquet"))
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(parts) >= 7, "the active collector wrote nothing within 240 s"
    first, rep = load(tmp_path, strict=True)
    assert not rep.corrupt
    n_first = len(first[["m", "n", "k", "epilogue"]].drop_duplicates())
    subprocess.run(cmd + ["5"], env=env, check=True, timeout=300, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    both, _ = load(tmp_path, strict=True)
    assert not both.duplicated(list(KEY_COLUMNS)).any()
    assert len(both[["m", "n", "k", "epilogue"]].drop_duplicates()) == n_first + 5


def test_replayed_rows_keep_the_recordings_kernel_template_and_a_rerun_resumes(dataset_dir, dataset_rows, tmp_path):
    """Regression: a replay of an imported log wrote its rows with this code's
    kernel template, so its rows claimed another kernel than the one timed
    and could not sit beside the log's own (`transfer` refused them)."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.loop import collect
    recording = dataset_rows[dataset_rows["epilogue"] == "none"].assign(template_hash="0123456789ab")
    be = ReplayBackend(recording, ReplayBackend(dataset_dir).spec)
    first = collect(be, tmp_path, max_problems=3, progress=False)
    df, _ = load(tmp_path)
    assert first.rows_written == len(df) > 0 and set(df["template_hash"]) == {"0123456789ab"}
    again = collect(be, tmp_path, shapes=sorted(set(map(tuple, df[["m", "n", "k"]].to_numpy().tolist()))),
                    progress=False)
    assert again.rows_written == 0 and again.skipped == len(df)
