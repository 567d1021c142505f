"""studies/sampling.py's bookkeeping: the committed per-point scores and the folders it grows."""
import numpy as np
import pandas as pd
import pytest

from conftest import import_script


@pytest.fixture(scope="module")
def study():
    return import_script("studies.sampling")


RECOVERED = "recovered from an earlier report"


def test_a_replayed_point_replaces_only_the_recovered_rows_it_stands_for(study, tmp_path):
    """Regression: the study's per-point scores lived under out/ only, and a fresh checkout lost them all (the
    report's tables could be neither regenerated nor extended). They are kept beside the report now, with rows
    recovered from the report's mean/min/max (seed unknown) standing in until the point is replayed."""
    path = tmp_path / "r_points.csv"
    done = pd.DataFrame([dict(strategy=s, seed=np.nan, budget=400, top1=t, provenance=RECOVERED)
                         for s in ("random", "prior") for t in (0.05, 0.06, 0.07)]
                        + [dict(strategy="all", seed=0, budget=918, top1=0.055, provenance=RECOVERED)])
    done = study.add_score(done, dict(strategy="random", seed=1, budget=400, top1=0.04), path, ["strategy", "budget"])
    assert sorted(done.loc[done["strategy"] == "random", "top1"]) == [0.04]      # the three stand-ins are gone
    assert len(done[done["strategy"] == "prior"]) == 3 and len(done[done["strategy"] == "all"]) == 1
    assert done["provenance"].iloc[-1] == study.PROVENANCE
    assert study.is_done(done, strategy="random", seed=1, budget=400)
    assert not study.is_done(done, strategy="prior", seed=0, budget=400)        # a stand-in is no seed's point
    pd.testing.assert_frame_equal(pd.read_csv(path), done.reset_index(drop=True), check_dtype=False)
    # A recovered row of a known seed gives way to that seed only.
    done = study.add_score(done, dict(strategy="all", seed=1, budget=918, top1=0.05), path, ["strategy", "budget"])
    assert len(done[done["strategy"] == "all"]) == 2
    done = study.add_score(done, dict(strategy="all", seed=0, budget=918, top1=0.05), path, ["strategy", "budget"])
    assert list(done.loc[done["strategy"] == "all", "seed"]) == [1, 0]
    assert set(done.loc[done["provenance"].eq(RECOVERED), "strategy"]) == {"prior"}


def test_seeds_are_named_only_where_every_row_has_one(study):
    rows = lambda seeds: pd.DataFrame(dict(strategy="random", budget=400, seed=seeds, top1=0.05))  # noqa: E731
    assert study.seeds_of(rows([0, 1, 2])) == (3, "seeds 0, 1, 2")
    assert study.seeds_of(rows([np.nan] * 3)) == (3, "3 seeds")
    assert study.seeds_of(rows([np.nan, np.nan, 2])) == (3, "3 seeds")
    assert study.seeds_of(rows([0])) == (1, "seed 0")


def test_growing_a_folder_that_holds_more_than_the_budget_is_refused(study, tmp_path, monkeypatch):
    """Regression: a folder replayed to 800 problems and then asked for 50 was trained as it was, and the
    800-problem model's score filed under 50."""
    held = pd.DataFrame(dict(m=[64, 128, 256], n=64, k=64, layout="NN"))
    monkeypatch.setattr(study, "load", lambda folder: (held, None))
    monkeypatch.setattr(study, "collect", lambda *a, **k: pytest.fail("nothing is to be collected"))
    with pytest.raises(SystemExit, match="holds 3 NN problems, more than this budget's 2"):
        study.grow(None, tmp_path, "random", 0, {"NN": 2}, 1)
    assert study.grow(None, tmp_path, "random", 0, {"NN": 3}, 1) >= 0        # exactly the budget: nothing to do


def test_a_run_of_some_budgets_reports_every_budget_the_scores_hold(study, tmp_path):
    """Regression: the report kept only the budgets of the run that wrote it, so replaying the 800-problem points
    alone dropped the 50-400 rows from reports/sampling_study.md."""
    import argparse
    rows = [dict(strategy=s, seed=seed, budget=b, top1=0.05 + b / 1e5, prune=0.06, model_regret=0.07,
                 vendor_only=0.09, provenance="replayed") for s in ("random", "active") for seed in (0, 1)
            for b in (400, 800)]
    rows.append(dict(strategy="all", seed=0, budget=918, top1=0.055, prune=0.06, model_regret=0.075,
                     vendor_only=0.095, provenance="replayed"))
    report = tmp_path / "study.md"
    pd.DataFrame(rows).to_csv(study.scores_path(report, "points"), index=False)
    study.write_report(argparse.Namespace(report=report, budgets=[800]), n_all=918, n_test=10)
    text = report.read_text()
    assert "| 400 | 5.40% [5.40%-5.40%] | 5.40% [5.40%-5.40%] |" in text
    assert "| 800 | 5.80% [5.80%-5.80%] |" in text and "| 918 (all) | 5.50% |" in text
    assert "- 400, 800, 918 problems: replayed." in text and "Leave one real log out" not in text
