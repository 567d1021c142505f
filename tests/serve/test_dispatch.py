"""costlearn dispatch: the selector's Python module and C header agree with
the fitted Dispatch, launch only fitting configs, and bad ranges are refused."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess

import numpy as np
import pytest

from costlearn.serve.dispatch import evaluate_dispatch, fit_dispatch, parse_range
from costlearn.serve.predictor import Predictor
from costlearn.collect.space import tile_fits_problem

RANGES = {"M": (1, 256), "N": (64, 512), "K": (64, 512)}


@pytest.fixture(scope="module")
def fitted(model_dir):
    pred = Predictor(model_dir)
    return pred, fit_dispatch(pred, RANGES, max_configs=3, samples=400)


def _probe(n=400, seed=5):
    rng = np.random.default_rng(seed)
    return [tuple(int(rng.integers(lo, hi + 1)) for lo, hi in RANGES.values()) for _ in range(n)]


def test_selector_is_small_and_beats_one_config_for_all(fitted):
    _, d = fitted
    assert 1 <= len(d.configs) <= 3
    q = d.predicted
    assert q["subset_geomean"] <= q["selector_geomean"] <= q["single_best_geomean"]


def test_selector_only_launches_configs_that_fit(fitted):
    pred, d = fitted
    for m, n, k in _probe():
        c = d.select(m, n, k)
        assert tile_fits_problem(c.block_m, c.block_n, c.block_k, m, n, k, pred.ranker.min_tile_caps)


def test_emitted_python_and_c_agree_with_the_dispatch(fitted, tmp_path):
    _, d = fitted
    py, h, js = d.write(tmp_path, "pick")
    spec = importlib.util.spec_from_file_location("pick", py)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    probe = _probe()
    want = [d.select_index(*s) for s in probe]
    assert [mod.pick(*s) for s in probe] == want
    assert [c["config_id"] for c in mod.CONFIGS] == [c.config_id for c in d.configs]
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "t.c"
    src.write_text('#include "pick.h"\n#include <stdio.h>\nint main(void) { long long m, n, k;\n'
                   '  while (scanf("%lld %lld %lld", &m, &n, &k) == 3) printf("%d\\n", pick(m, n, k));\n'
                   "  return 0; }\n")
    subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-I", str(tmp_path), "-o", str(tmp_path / "t"), str(src)],
                   check=True)
    out = subprocess.run([str(tmp_path / "t")], input="\n".join(f"{m} {n} {k}" for m, n, k in probe),
                         capture_output=True, text=True, check=True).stdout.split()
    assert [int(v) for v in out] == want


def test_evaluation_scores_measured_shapes_in_range(fitted, dataset_dir):
    from costlearn.collect.dataset import load, valid_rows
    pred, d = fitted
    rows = valid_rows(load(dataset_dir / "eval")[0])
    ev = evaluate_dispatch(d, pred, rows)
    assert len(ev) >= 1
    assert all(RANGES["M"][0] <= m <= RANGES["M"][1] for m in ev["m"])
    assert (ev[["selector_regret", "model_regret", "single_regret"]].dropna() >= 0).all().all()


@pytest.mark.parametrize("text", ["0:10", "10:5", "a:b", "1:2:3", "", "-4"])
def test_bad_ranges_say_what_is_allowed(text):
    with pytest.raises(ValueError, match="LO:HI"):
        parse_range(text, "M")


@pytest.mark.parametrize("text", ["\u0663:64", "1:\u0666\u0664", "9" * 5000, "1:" + "9" * 100_000])
def test_a_range_of_unicode_digits_or_thousands_of_digits_is_refused_cut(text):
    """`dispatch --m \u0663:64` (an Arabic-Indic 3) was taken as M 3..64; 5,000 digits were a bare "Exceeds the
    limit (4300 digits)" naming no flag; the range was repeated whole."""
    with pytest.raises(ValueError, match="M range .*; expected LO:HI") as e:
        parse_range(text, "M")
    assert len(str(e.value)) < 200


def test_a_long_selector_name_is_refused_cut():
    from costlearn.serve.dispatch import check_name
    with pytest.raises(ValueError, match=r"name='x+\.\.\.; must be an ASCII identifier") as e:
        check_name("x" * 5000 + "-")
    assert len(str(e.value)) < 300


def test_bad_settings_are_refused(fitted):
    pred, _ = fitted
    with pytest.raises(ValueError, match="max_configs=9"):
        fit_dispatch(pred, RANGES, max_configs=9)
    with pytest.raises(ValueError, match="cover every shape"):
        fit_dispatch(pred, {"M": (1, 1024), "N": (1, 1024), "K": (1, 1024)}, max_configs=1, samples=200)


@pytest.mark.parametrize("name", ["select-tile", "bad name", "9lives", "class", "int", "../../escape", ""])
def test_dispatch_name_must_be_an_identifier(model_dir, tmp_path, name):
    from costlearn.cli import main
    rc = main(["dispatch", "--m", "1:64", "--n", "64:128", "--k", "64:128", "--samples", "50",
               "--out", str(tmp_path / "d"), "--name", name])
    assert rc == 2 and not (tmp_path / "d").exists()


def test_dispatch_reads_and_measures_under_data(model_dir, dataset_dir, tmp_path, capsys):
    """Regression: `dispatch` had no --data, and --measure wrote its fresh shapes to data/<device>/dispatch-eval of
    the current folder (the source tree's, from a fresh clone), whatever the other commands were given. They go to
    <data>/<device>/dispatch-eval now; --data naming another device's dataset folder is refused."""
    import json
    from costlearn.cli import main
    device = model_dir.parents[1].name
    args = ["dispatch", "--m", "1:64", "--n", "64:128", "--k", "64:128", "--samples", "50", "--out",
            str(tmp_path / "d"), "--models", str(model_dir.parents[2])]
    assert main(args + ["--data", str(tmp_path / "out" / "data")]) == 0
    assert f"no measurements in {tmp_path / 'out' / 'data' / device / 'dispatch-eval'}" in capsys.readouterr().out
    other = tmp_path / "other"
    other.mkdir()
    (other / "device.json").write_text(json.dumps({**json.loads((dataset_dir / "device.json").read_text()),
                                                   "name": "another device"}))
    assert main(args + ["--data", str(other)]) == 2
    assert "--data '" in capsys.readouterr().err
    (tmp_path / "a file").write_text("x")
    assert main(args + ["--data", str(tmp_path / "a file"), "--measure", "1"]) == 2       # before the fit
    assert "--data" in capsys.readouterr().err
