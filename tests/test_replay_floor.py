"""studies/replay_floor.py on hand-made per-problem rows: the perfect floor takes the better of the model's pick and
cuBLAS, and the floor told by the tunings decides each problem from earlier problems only."""
import numpy as np
import pandas as pd
import pytest

from conftest import import_script


@pytest.fixture(scope="module")
def study():
    return import_script("studies.replay_floor")


def _rows(pure, vendor, chosen, shapes=None):
    n = len(pure)
    shapes = shapes or [(64 * (i + 1), 256, 512) for i in range(n)]
    return pd.DataFrame(dict(position=np.arange(1, n + 1), layout="NN", m=[s[0] for s in shapes],
                             n=[s[1] for s in shapes], k=[s[2] for s in shapes], pure_chosen_by=chosen,
                             pure=pure, vendor=vendor))


def test_the_perfect_floor_keeps_the_better_of_the_pick_and_cublas_where_the_model_picked(study):
    df = _rows([0.0, 0.0, 0.5, 0.1, 0.2, 0.3], [0.0, 0.0, 0.1, 0.4, 0.2, 0.3],
               ["predicted", "predicted", "predicted", "predicted", "vendor_floor", "vendor_floor"])
    f = study.figures(df, radius=2.0, neighbours=5)
    assert f["problems"] == 3 and f["picked"] == 1 and f["vendor_better"] == 0
    assert f["perfect"] == pytest.approx(np.expm1(np.log1p([0.1, 0.2, 0.3]).mean()))
    assert f["pure"] == pytest.approx(np.expm1(np.log1p([0.1, 0.2, 0.3]).mean()))


def test_the_told_floor_turns_a_pick_to_cublas_where_earlier_picks_near_it_lost_and_never_looks_ahead(study):
    # the first half: the model's picks lost to cuBLAS near 1,000-sized problems, won near 64
    shapes = [(1000, 1000, 1000), (1024, 1000, 1000), (64, 64, 64), (1000, 1024, 1000), (64, 64, 72), (70, 64, 64)]
    df = _rows([0.5, 0.4, 0.0, 0.3, 0.2, 0.0], [0.0, 0.0, 0.3, 0.0, 0.0, 0.3], ["predicted"] * 6, shapes)
    told, flips, right = study.told_floor(df, radius=1.0, neighbours=2)
    # problem 4 (near the losses) goes to cuBLAS (right); problem 5 (near 64) keeps its pick, as does 6
    assert told.tolist() == [0.0, 0.2, 0.0] and (flips, right) == (1, 1)
    later = df.copy()
    later.loc[5, ["pure", "vendor"]] = [9.0, 0.0]                 # the last problem changes: no earlier decision does
    assert study.told_floor(later, radius=1.0, neighbours=2)[0][:2].tolist() == told[:2].tolist()


HEAD = "position,layout,m,n,k,pure_chosen_by,pure,vendor\n"


@pytest.mark.parametrize("text, why", [
    ("a,b\n1,2\n", r"no column .*fleet_replay --per-problem"),
    ("", "No columns to parse"),
    (HEAD, "no problem of the stream's second half has a timed pure answer"),
    (HEAD + "1,NN,abc,2,3,predicted,0.1,0.2\n", "column m holds 'abc' .*at least 1"),
    (HEAD + "1,NN,0,2,3,predicted,0.1,0.2\n", "column m holds '0' "),
    (HEAD + "1,NN,1,2,3,predicted,abc,0.2\n", "column pure holds 'abc'.*a regret is a number >= 0"),
    (HEAD + "1,NN,1,2,3,predicted,-1,0.2\n", "column pure holds '-1'"),
    (HEAD + "1,NN,1,2,3,predicted,,0.2\n2,NN,1,2,3,predicted,,0.2\n", "no problem of the stream's second half"),
])
def test_a_file_that_is_no_per_problem_file_is_named_not_a_traceback_or_nan(study, tmp_path, text, why):
    """Regression (an attack): an empty or header-only file, text or 0 in an extent, text or a negative regret
    were tracebacks or a row of nan% / -100%."""
    (tmp_path / "x.csv").write_text(text)
    with pytest.raises(SystemExit, match=f"x.csv: .*{why}"):
        study.read(tmp_path / "x.csv")
    with pytest.raises(SystemExit, match="No such file"):
        study.read(tmp_path / "missing.csv")


def test_the_worst_problem_and_the_unaligned_picks_are_told_apart(study):
    """The second table: the worst problem and the pure figure without it; the picks on problems whose K or N is not
    a multiple of --align, their regret and cuBLAS's, and the half with them turned to cuBLAS."""
    shapes = [(64, 64, 64)] * 3 + [(64, 64, 64), (64, 64, 185), (64, 100, 64), (64, 64, 64)]
    df = _rows([0.0, 0.0, 0.0, 0.1, 2.0, 0.5, 0.2], [0.0, 0.0, 0.0, 0.3, 0.4, 0.1, 0.0],
               ["predicted"] * 6 + ["vendor_floor"], shapes)
    f = study.figures(df, radius=2.0, neighbours=5, align=8)
    mean = lambda x: np.expm1(np.log1p(x).mean())                              # noqa: E731
    assert f["worst"] == "64x64x185 NN" and f["worst_regret"] == 2.0
    assert f["without_worst"] == pytest.approx(mean([0.1, 0.5, 0.2]))
    assert f["unaligned"] == 2                                   # K = 185 and N = 100; the vendor's pick not counted
    assert f["unaligned_pure"] == pytest.approx(mean([2.0, 0.5]))
    assert f["unaligned_vendor"] == pytest.approx(mean([0.4, 0.1]))
    assert f["unaligned_to_vendor"] == pytest.approx(mean([0.1, 0.4, 0.1, 0.2]))
    assert study.figures(df, radius=2.0, neighbours=5, align=4)["unaligned"] == 1     # 100 is a multiple of 4
