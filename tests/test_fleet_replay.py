"""studies/fleet_replay.py on the synthetic Inductor log: the fleet's figures,
its measurement budget and what its retrains learn from."""
import json

import pytest

from conftest import import_script
from inductor_fixture import SHAPE_LAYOUTS, SHAPES, write_log

pytestmark = pytest.mark.slow          # it trains the fixture's model several times

STREAM_SHAPES = [(640, 768, 512), (1280, 1024, 768), (320, 2048, 1536), (896, 384, 2048), (2560, 1536, 640),
                 (1792, 896, 1024)]
STREAM_LAYOUTS = ["NN", "NN", "NT", "NT", "TN", "TN"]


@pytest.fixture(scope="module")
def study():
    return import_script("studies.fleet_replay")


@pytest.fixture(scope="module")
def replayed(study, tmp_path_factory):
    """The replay of a fleet trained on the fixture's shapes, streaming two logs: six new problems, then a log of
    two of them again and one more."""
    tmp = tmp_path_factory.mktemp("fleet")
    write_log(tmp / "train.txt", SHAPES, SHAPE_LAYOUTS)
    write_log(tmp / "stream1.txt", STREAM_SHAPES, STREAM_LAYOUTS)
    write_log(tmp / "stream2.txt", STREAM_SHAPES[:2] + [(1536, 640, 896)], ["NN", "NN", "NT"])
    out = tmp / "replay.json"
    assert study.main(["--train", str(tmp / "train.txt"), "--stream", f"{tmp / 'stream1.txt'},{tmp / 'stream2.txt'}",
                       "--device", "a100", "--top-k", "1", "--retrain-every", "4", "--work", str(tmp / "work"),
                       "--json", str(out), "--per-problem", str(tmp / "per_problem.csv")]) == 0
    return json.loads(out.read_text()), tmp


def test_the_json_has_the_figures_the_issue_names_per_window_and_log(replayed):
    res, _ = replayed
    for w in res["windows"] + [res["second_half"]]:
        assert set(study_fields()) <= set(w)
    assert [(w["log"], w["first"], w["last"]) for w in res["windows"]] == [
        ("stream1.txt", 1, 4), ("stream1.txt", 5, 6), ("stream2.txt", 7, 8), ("stream2.txt", 9, 9)]
    assert (res["second_half"]["first"], res["second_half"]["last"], res["second_half"]["problems"]) == (5, 9, 5)
    assert res["retrains"] == 2 and res["top_k"] == 1 and res["retrain_every"] == 4


def test_the_second_half_is_split_by_triton_s_alignment_and_its_parts_add_up(study, replayed):
    res, _ = replayed
    split, h = res["second_half_by_alignment"], res["second_half"]
    assert split["aligned"] == h and split["ragged"]["problems"] == 0    # the fixture's extents are multiples of 16
    assert split["ragged"]["pure"] is None
    made = [study.Answered.from_record(dict(
        log="l", m=m, n=n, k=k, dtype="float16", layout="NT", epilogue="none", pure_config="c",
        pure_chosen_by="predicted", pure=pure, measured=0.0, vendor=0.25, measurements=2, unmeasurable=0))
        for (m, n, k), pure in [((64, 4096, 64), 0.0), ((64, 64, 61), 1.0), ((48, 72, 64), 0.5), ((16, 16, 16), 0.0)]]
    split = study.by_alignment(made, "l", 1, 4)
    assert (split["aligned"]["problems"], split["ragged"]["problems"]) == (2, 2)      # K = 61, N = 72: the rest
    assert split["aligned"]["pure"] == 0 and split["ragged"]["pure"] == pytest.approx((2.0 * 1.5) ** 0.5 - 1)
    assert split["aligned"]["measurements"] + split["ragged"]["measurements"] == 8


def study_fields():
    return ("log", "first", "last", "problems", "pure", "measured", "vendor", "measurements")


def test_measured_answers_never_lose_to_cublas_and_spend_at_most_k_plus_one(replayed):
    res, _ = replayed
    for w in res["windows"]:
        assert w["measured"] <= w["vendor"] + 1e-12, w
        assert w["measurements"] <= 2 * w["problems"], w           # K + 1 = 2 configs a problem
    # On the fixture the fastest config is timed on every problem, the vendor 1.15x it: measured is exact.
    assert all(w["measured"] == 0 for w in res["windows"])
    assert all(abs(w["vendor"] - 0.15) < 1e-4 for w in res["windows"])


def test_a_problem_the_database_already_holds_spends_no_measurement(replayed):
    res, _ = replayed
    again = [w for w in res["windows"] if w["log"] == "stream2.txt"]
    assert again[0]["problems"] == 2 and again[0]["measurements"] == 0        # both measured in stream1
    assert again[1]["measurements"] > 0


def test_each_retrain_learns_the_measurements_of_the_database(replayed):
    res, tmp = replayed
    from costlearn.collect.dataset import load
    rows, _ = load(next((tmp / "work").glob("*")) / "train" / "data" / "a100")
    fleet = rows[rows["source_format"] == "tuning-db"]
    # Retrained after problems 4 and 8: the measurements of the first 8 (two spent nothing) are training rows.
    assert fleet[["m", "n", "k"]].drop_duplicates().shape[0] == 6
    assert len(fleet) == res["windows"][0]["measurements"] + res["windows"][1]["measurements"]


def test_each_problems_answers_are_written_in_stream_order(replayed):
    import pandas as pd
    res, tmp = replayed
    per = pd.read_csv(tmp / "per_problem.csv")
    assert per["position"].tolist() == list(range(1, 10)) and per["log"].iloc[-1] == "stream2.txt"
    assert (per["measured"] <= per["vendor"] + 1e-12).all() and (per["measurements"] <= 2).all()
    assert per["measurements"].sum() == sum(w["measurements"] for w in res["windows"])


def test_a_report_is_written_from_replays_json_without_replaying(study, replayed):
    res, tmp = replayed
    out = tmp / "report.md"
    assert study.main(["--report-from", str(tmp / "replay.json"), "--report", str(out)]) == 0
    text = out.read_text()
    h = res["second_half"]
    assert f"| train.txt at 1 | 1 | 4 | 2 | {study.pct(h['pure'])} | {study.pct(h['measured'])} | " \
        f"{study.pct(h['vendor'])} | {h['measurements'] / h['problems']:.2f} | 0 of 4 |" in text
    assert text.count("#### Train train.txt at 1") == 1
    assert f"| {study.pct(h['pure'])} (5) / n/a (0) |" in text                  # every fixture problem is aligned
    assert "| second half, M, N, K multiples of 16 | 5 | 5-9 |" in text and "| second half, the rest | 0 |" in text
    older = {key: v for key, v in res.items() if key != "second_half_by_alignment"}
    (tmp / "older.json").write_text(json.dumps(older))                       # a replay's figures from before it
    assert study.main(["--report-from", str(tmp / "older.json"), "--report", str(out)]) == 0
    assert "| 0 of 4 | - |" in out.read_text() and "second half, the rest" not in out.read_text()
    with pytest.raises(SystemExit):
        study.main(["--train", "x.txt"])                                 # a replay needs its flags, named


def replay_args(tmp, work, *extra):
    return ["--train", str(tmp / "train.txt"), "--stream", f"{tmp / 'stream1.txt'},{tmp / 'stream2.txt'}",
            "--device", "a100", "--top-k", "1", "--retrain-every", "4", "--work", str(work), *extra]


def figures(res):
    """A replay's figures but the seconds its retrains took."""
    return {k: v for k, v in res.items() if k != "train_s"}


def finished_copy(tmp, name):
    """A copy of the unbroken replay's folder (``replayed``'s), its journal and its lines."""
    import shutil
    work = tmp / name
    shutil.copytree(tmp / "work", work)
    journal = work / "float16-share1-k1-n4" / "answers.jsonl"
    return work, journal, journal.read_text().splitlines(keepends=True)


def assert_resumes_to_the_unbroken_figures(study, tmp, work, res):
    out = work.with_suffix(".json")
    assert study.main(replay_args(tmp, work, "--resume", "--json", str(out))) == 0
    assert figures(json.loads(out.read_text())) == figures(res)


def test_a_replay_killed_mid_stream_resumes_to_the_figures_of_an_unbroken_one(study, replayed):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    res, tmp = replayed
    work = tmp / "killed"
    journal = work / "float16-share1-k1-n4" / "answers.jsonl"
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "studies.fleet_replay", *replay_args(tmp, work)], cwd=root,
                            env=dict(os.environ, PYTHONPATH=str(root)), stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.is_file() and '"position": 5' in journal.read_text():    # answered past the retrain before 5
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    assert proc.wait() == -signal.SIGKILL, "the replay ended before it could be stopped mid-stream"
    assert_resumes_to_the_unbroken_figures(study, tmp, work, res)


def test_a_problem_measured_by_the_answer_a_stop_interrupted_counts_its_measurements(study, replayed):
    res, tmp = replayed
    work, journal, lines = finished_copy(tmp, "cut")
    # The stop came after the last problem was measured into the database, while its answer was being journalled.
    journal.write_text("".join(lines[:-1]) + lines[-1][:20])
    assert_resumes_to_the_unbroken_figures(study, tmp, work, res)
    assert journal.read_text() == "".join(lines)         # the torn line cut off, the answer journalled whole


def test_resume_refuses_a_journal_of_other_settings(study, replayed):
    _, tmp = replayed
    work, _, _ = finished_copy(tmp, "other")
    (work / "float16-share1-k1-n4" / "run.json").write_text(json.dumps({"train": "another.txt"}))
    with pytest.raises(SystemExit, match="other settings"):
        study.main(replay_args(tmp, work, "--resume"))


def test_resume_refuses_a_journal_damaged_before_its_last_line_and_leaves_it(study, replayed):
    _, tmp = replayed
    work, journal, lines = finished_copy(tmp, "damaged")
    damaged = "".join(lines[:3] + ['{"position": 3, "log": \n'] + lines[4:])
    journal.write_text(damaged)
    with pytest.raises(SystemExit, match="line 4 is damaged"):
        study.main(replay_args(tmp, work, "--resume"))
    assert journal.read_text() == damaged


class Stopped(BaseException):
    """A stop while measuring, as kill -9 would leave it: nothing after it runs."""


def test_a_replay_stopped_while_measuring_takes_over_its_own_lease_when_resumed(study, replayed, monkeypatch):
    from costlearn.serve import tuning
    res, tmp = replayed
    work = tmp / "leased"
    measured = tuning.Tuner._measured

    def stop_at_the_sixth(self, p, key, *args):
        if (key[0].m, key[0].n, key[0].k) == STREAM_SHAPES[5]:       # the sixth problem, after the first retrain
            raise Stopped
        return measured(self, p, key, *args)
    monkeypatch.setattr(tuning.Tuner, "_measured", stop_at_the_sixth)
    monkeypatch.setattr(tuning, "_free", lambda *a: None)        # killed: the lease is never freed
    with pytest.raises(Stopped):
        study.main(replay_args(tmp, work))
    monkeypatch.undo()
    assert_resumes_to_the_unbroken_figures(study, tmp, work, res)


def test_a_second_replay_of_the_same_folder_at_once_is_refused(study, replayed):
    from costlearn.core.locks import FolderLock
    _, tmp = replayed
    work = tmp / "busy"
    with FolderLock(work, "a fleet replay", name=".float16-share1-k1-n4.lock"):     # the first replay's lock
        with pytest.raises(SystemExit, match="a fleet replay holds"):
            study.main(replay_args(tmp, work, "--resume"))


def test_resume_refuses_a_stream_log_changed_under_the_same_path(study, replayed):
    _, tmp = replayed
    work = tmp / "changed"
    for name in ("train.txt", "stream1.txt", "stream2.txt"):
        (tmp / "changed-logs").mkdir(exist_ok=True)
        (tmp / "changed-logs" / name).write_text((tmp / name).read_text())
    assert study.main(replay_args(tmp / "changed-logs", work)) == 0
    log = tmp / "changed-logs" / "stream1.txt"
    log.write_text(log.read_text().replace("extern_mm,", "extern_mm,1"))      # every vendor time 10 ms longer
    with pytest.raises(SystemExit, match="other settings"):
        study.main(replay_args(tmp / "changed-logs", work, "--resume"))


def test_resume_of_a_folder_without_its_journal_starts_over(study, replayed, capsys):
    res, tmp = replayed
    work, journal, _ = finished_copy(tmp, "nojournal")
    journal.unlink()
    assert_resumes_to_the_unbroken_figures(study, tmp, work, res)
    assert "holds no answer of this replay; starting it" in capsys.readouterr().err
