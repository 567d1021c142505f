"""studies/ragged.py: each operand's vector width from its leading dimension, the classes' cliffs and the vendor's
ratio from dataset rows, and the study run end to end on a zip of a synthetic Inductor log."""
import zipfile

import numpy as np
import pandas as pd
import pytest

from conftest import import_script
from inductor_fixture import write_log


@pytest.fixture(scope="module")
def study():
    return import_script("studies.ragged")


def test_vector_width_is_the_largest_power_of_two_of_the_leading_dimension_capped_at_16_bytes(study):
    assert study.vector_width([117, 6, 12, 8, 4096, 4096], [2, 2, 2, 2, 2, 4]).tolist() == [1, 2, 4, 8, 8, 4]


def test_each_operand_reads_its_leading_dimension_from_the_layout(study):
    # A's leading dimension is K in N?, M in T?; B's is N in ?N, K in ?T
    a, b = study.classes([15, 15, 15, 15], [6, 6, 6, 6], [117, 117, 117, 117], ["NN", "NT", "TN", "TT"],
                         ["float16"] * 4)
    assert a.tolist() == [1, 1, 1, 1] and b.tolist() == [2, 1, 2, 1]
    a, b = study.classes([12] * 4, [6] * 4, [16] * 4, ["NN", "NT", "TN", "TT"], ["float32"] * 4)
    assert a.tolist() == [4, 4, 4, 4] and b.tolist() == [2, 4, 2, 4]


def _rows(times: dict, m=64, n=64, k=117, layout="NT"):
    return pd.DataFrame([dict(source_file="log.txt", dtype="float16", m=m, n=n, k=k, layout=layout, config_id=c,
                              time_us=t) for c, ts in times.items() for t in np.atleast_1d(ts)])


def test_a_problem_s_cliffs_and_best_tile_over_the_vendor_come_from_median_times(study):
    rows = pd.concat([_rows({"a": [1.0, 9.0, 1.0], "b": 40.0, "c": 2.0, "vendor": 2.0}),
                      _rows({"a": 1.0, "vendor": 0.5}, k=1)])           # K = 1: left out
    per = study.class_problems(rows)
    assert len(per) == 1
    got = per.iloc[0]
    assert (got["tiles"], got["cliffs"], got["width_a"], got["width_b"]) == (3, 1, 1, 1)
    assert got["tile_lr"] == pytest.approx(-1.0) and got["vendor_regret"] == pytest.approx(1.0)
    line = study.class_table(per, "a100")[0]
    assert line.startswith("| a100 | log.txt | float16 | 1 | 1 | 1 | 33.33% | 0.50 | 100.00% |")


def test_a_problem_without_a_vendor_time_has_no_ratio_and_no_vendor_regret(study):
    per = study.class_problems(_rows({"a": 1.0, "b": 2.0}))
    assert np.isnan(per.iloc[0]["tile_lr"]) and np.isnan(per.iloc[0]["vendor_regret"])
    assert "| n/a | n/a |" in study.class_table(per, "a100")[0]


def test_the_study_runs_on_a_zip_of_inductor_logs_and_scores_a_split_by_class(study, tmp_path):
    log = tmp_path / "mm.txt"
    write_log(log, [(256, 256, 117), (512, 512, 512)], ["NT", "NN"])
    with zipfile.ZipFile(tmp_path / "logs.zip", "w") as z:
        z.write(log, "mm.txt")
    per = pd.DataFrame(dict(m=[256, 512], n=[256, 512], k=[117, 512], dtype="float16", layout=["NT", "NN"],
                            pick=["vendor", "m64n64k32_w4_s3_g8"], top1_regret=[0.1, 0.0], model_regret=[0.3, 0.0],
                            vendor_regret=[0.1, 0.2]))
    per.to_csv(tmp_path / "per.csv", index=False)
    report = tmp_path / "r.md"
    assert study.main(["--log", f"a100={tmp_path / 'logs.zip'}", "--per-problem", f"split={tmp_path / 'per.csv'}",
                       "--work", str(tmp_path / "work"), "--report", str(report)]) == 0
    text = report.read_text()
    assert "| a100 | mm.txt | float16 | 1 | 1 | 1 | 0.00% |" in text
    assert "| a100 | mm.txt | float16 | 8 | 8 | 1 | 0.00% |" in text
    assert "| split | float16 | 1 | 1 | 1 | 0 | 10.00% | 30.00% | 10.00% |" in text


@pytest.mark.parametrize("argv, why", [
    (["--log", "a100"], "--log 'a100': give NAME=PATH"),
    (["--log", "a100=x.zip", "--per-problem", "=p.csv"], "--per-problem '=p.csv': give NAME=PATH"),
])
def test_a_flag_without_name_and_path_is_named(study, argv, why):
    with pytest.raises(SystemExit, match=why):
        study.main(argv)


def test_a_file_that_is_no_per_problem_file_is_named(study, tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit, match=r"no column .*per_problem.csv"):
        study.read_per_problem(tmp_path / "x.csv")


def test_a_log_that_is_no_zip_is_named(study, tmp_path):
    (tmp_path / "x.zip").write_text("not a zip")
    with pytest.raises(SystemExit, match=r"--log a100=.*x.zip: File is not a zip file"):
        study.main(["--log", f"a100={tmp_path / 'x.zip'}", "--work", str(tmp_path / "w"),
                    "--report", str(tmp_path / "r.md")])
