"""The problems compilers asked as the collection's prior (costlearn.serve.asked, `collect --shapes-from-db`): this
device class's predicted entries, least certain first, measured ones left out, each with its epilogue."""
from __future__ import annotations

import shutil

import pandas as pd
import pytest

from costlearn import __version__
from costlearn.cli import main
from costlearn.cli.collect import asked_shapes
from costlearn.collect.backends.replay import ReplayBackend
from costlearn.collect.loop import collect
from costlearn.core.problem import Problem
from costlearn.families.gemm import TEMPLATE_HASH, GemmConfig
from costlearn.model import artifact
from costlearn.serve.asked import asked_problems
from costlearn.serve.predictor import clear_cache
from costlearn.serve.tuning_db import TuningDB, TuningEntry

CFG = GemmConfig(16, 32, 8, 2, 4)


def _db(path, entries) -> TuningDB:
    """A tuning database file holding ``entries``: (problem, device, chosen_by), written in that order (each a
    second later)."""
    db = TuningDB(path, create=True)
    for i, (problem, device, how) in enumerate(entries):
        db.put(TuningEntry(problem, "gemm", device, TEMPLATE_HASH, __version__, CFG, how, 10.0 + i,
                           {CFG.config_id: 10.0 + i}, "test", f"2026-01-01T00:00:{i:02d}+00:00"))
    db.close()
    return path


@pytest.fixture
def fleet(tmp_path, model_dir, dataset_rows):
    """(database, device, the problems it asks in the database's order, a problem the dataset measured)."""
    clear_cache()
    device = model_dir.parents[1].name
    trained = tuple(int(v) for v in dataset_rows[["m", "n", "k"]].iloc[0])
    in_data = Problem(*trained, "float32", "NN", str(dataset_rows["epilogue"].iloc[0]))
    asks = [Problem(300, 5, 700), Problem(*trained, "float32", "NN", "bias_gelu"), Problem(2048, 2048, 2048),
            Problem(40, 1000, 3, "float32", "NN", "bias")]
    entries = [(asks[0], device, "predicted"), (Problem(64, 64, 64), "other-gpu", "predicted"),
               (asks[1], device, "predicted"), (Problem(512, 8, 8), device, "measured"),
               (Problem(9, 9, 9, "float16"), device, "predicted"), (asks[2], device, "predicted"),
               (in_data, device, "predicted"), (asks[3], device, "predicted")]
    if in_data == asks[1]:
        pytest.skip("the committed first row has epilogue bias_gelu")
    yield _db(tmp_path / "t.sqlite", entries), device, asks, in_data
    clear_cache()


def test_this_devices_predicted_problems_least_certain_first_measured_ones_left_out(fleet, model_dir, dataset_dir):
    db, device, asks, in_data = fleet
    got = asked_problems(db, device, "gemm", "float32", data_dir=dataset_dir, models_dir=model_dir.parents[2])
    env = artifact.load(model_dir).envelope
    far = [env.nearest_index(*p.shape)[1] for p in asks]
    want = [p for _, _, p in sorted(zip([-d for d in far], range(len(asks)), asks))]
    assert got.problems == want and got.distances_log2 == sorted(far, reverse=True)
    assert got.problems[0] == Problem(2048, 2048, 2048) and got.distances_log2[-1] < 1e-9   # a trained shape: last
    assert got.problems[-1].epilogue == "bias_gelu"                      # another epilogue of a trained shape
    assert (got.asked, got.measured, got.left_out) == (6, 1, {"dtype float16": 1})
    assert got.model == model_dir and got.target == str(db) and in_data not in got.problems


def test_without_a_model_the_database_order_oldest_first(fleet, tmp_path):
    db, device, asks, in_data = fleet
    got = asked_problems(db, device, "gemm", "float32", models_dir=tmp_path / "no-models")
    assert got.problems == [asks[0], asks[1], asks[2], in_data, asks[3]] and got.model is None
    only_none = asked_problems(db, device, "gemm", "float32", epilogues=("none",), models_dir=tmp_path / "none")
    assert only_none.left_out == {"dtype float16": 1, "epilogue bias": 1, "epilogue bias_gelu": 1}



def test_a_damaged_model_orders_nothing_and_refuses_no_collection(fleet, model_dir, tmp_path, monkeypatch, capsys):
    """Regression: a model in the store whose sidecar does not load made `collect --shapes-from-db` fail (an
    ArtifactError), refusing the very collection that would retrain it; the problems come in the database's order,
    and the line says why."""
    db, device, asks, in_data = fleet
    store = tmp_path / "models"
    shutil.copytree(model_dir.parents[2], store)
    side = store / device / "gemm" / "float32" / "model.json"
    side.write_bytes(side.read_bytes()[:-50])                         # cut short: not JSON
    got = asked_problems(db, device, "gemm", "float32", models_dir=store)
    assert got.problems == [asks[0], asks[1], asks[2], in_data, asks[3]] and got.model is None
    assert got.distances_log2 == [] and got.unordered.startswith(f"unreadable model sidecar {side}")
    monkeypatch.setenv("COSTLEARN_MODELS", str(store))
    clear_cache()
    assert asked_shapes(db, device, "gemm", "float32", ("none", "bias", "bias_relu", "bias_gelu"), None, ()) == \
        got.problems
    assert (f"measuring 5 of them first, oldest first (the gemm/float32 model of {device} does not load: "
            f"unreadable model sidecar {side}") in capsys.readouterr().err

def test_an_empty_database_or_none_of_this_device_is_one_line_naming_both(tmp_path, fleet):
    db, device, *_ = fleet
    empty = _db(tmp_path / "empty.sqlite", [])
    with pytest.raises(ValueError, match=f"the tuning database {empty} is empty: no problem compilers asked of "
                                         f"{device}$"):
        asked_problems(empty, device, "gemm", "float32")
    with pytest.raises(ValueError, match=f"the tuning database {db} holds no gemm entry of h100 "
                                         r"\(8 entries, of device classes "):
        asked_problems(db, "h100", "gemm", "float32")


def test_a_database_whose_asked_problems_are_all_measured_is_no_error(tmp_path, fleet, capsys):
    """Regression (a fresh-clone user): where the fleet had measured every problem compilers asked, `collect
    --shapes-from-db` stopped with "holds no predicted gemm entry ... that is not measured", so an idle host's
    collection failed in the fleet's steady state; it goes on with the strategy's shapes and says so."""
    _, device, *_ = fleet
    p, q = Problem(300, 5, 700), Problem(64, 64, 64)
    db = _db(tmp_path / "done.sqlite", [(p, device, "predicted"), (p, device, "measured"), (q, device, "measured")])
    got = asked_problems(db, device, "gemm", "float32")
    assert (got.problems, got.asked, got.answered) == ([], 0, 2)
    mine = [Problem(8, 8, 8)]
    assert asked_shapes(db, device, "gemm", "float32", ("none",), None, mine) == mine
    assert (f"tuning database {db}: every gemm problem compilers asked of {device} is measured there (2); the "
            "collection measures its strategy's shapes") in capsys.readouterr().err


def test_collect_shapes_from_db_through_the_command_line(fleet, dataset_dir, tmp_path, monkeypatch, capsys):
    """The parser's --shapes-from-db [TARGET] reaches the collection as the prior's first problems."""
    db, device, asks, in_data = fleet
    seen = {}

    class Stop(Exception):
        pass

    def fake_collect(backend, out, **kw):
        seen.update(kw, out=out)
        raise Stop
    monkeypatch.setattr("costlearn.cli.collect.device_backend", lambda *a: ReplayBackend(dataset_dir))
    monkeypatch.setattr("costlearn.collect.loop.collect", fake_collect)
    monkeypatch.setenv("COSTLEARN_TUNING_DB", str(db))
    with pytest.raises(Stop):                                             # the default database
        main(["collect", "--shapes-from-db", "--data", str(tmp_path / "d"), "--shapes", "7x7x7", "--recheck", "0"])
    assert seen["strategy"] == "prior" and seen["shapes"][:5] == asked_problems(db, device, "gemm", "float32").problems
    assert seen["shapes"][5:] == [(7, 7, 7)] and seen["out"] == tmp_path / "d" / device
    err = capsys.readouterr().err
    assert (f"tuning database {db}: 6 gemm problems compilers asked of {device}; measuring 5 of them first, least "
            "certain first (farthest from ") in err
    assert "left out 1 of dtype float16 (a collection measures float32 NN, epilogues none bias bias_relu bias_gelu)" \
        in err
    (tmp_path / "no-models").mkdir()                                      # --models names the store that orders
    with pytest.raises(Stop):
        main(["collect", "--shapes-from-db", "--data", str(tmp_path / "d"), "--recheck", "0", "--models",
              str(tmp_path / "no-models")])
    assert "oldest first (no gemm/float32 model of" in capsys.readouterr().err
    for argv, says in [(["--shapes-from-db", str(db), "--strategy", "random"], "--shapes-from-db: the problems "
                        "compilers asked are the prior's (--strategy prior), not the random strategy's"),
                       (["--shapes-from-db", str(tmp_path / "empty.sqlite")], "no tuning database at ")]:
        assert main(["collect", *argv, "--data", str(tmp_path / "d")]) == 2
        assert says in capsys.readouterr().err


def test_a_replay_collection_measures_the_asked_problems_first_each_with_its_epilogue(dataset_dir, dataset_rows,
                                                                                       tmp_path):
    recorded = dataset_rows[["m", "n", "k", "epilogue"]].drop_duplicates().iloc[[5, 40, 90]]
    asks = [Problem(int(m), int(n), int(k), "float32", "NN", str(e)) for m, n, k, e in
            recorded.itertuples(index=False, name=None)]
    db = _db(tmp_path / "t.sqlite", [(p, "dev", "predicted") for p in asks])
    be = ReplayBackend(dataset_dir)
    got = asked_problems(db, "dev", "gemm", "float32", models_dir=tmp_path / "none")
    res = collect(be, tmp_path / "d", strategy="prior", shapes=got.problems, max_problems=len(asks), progress=False,
                  budget_s=600, epilogues=("none", "bias", "bias_relu", "bias_gelu"), configs_per_shape=4)
    measured = [pd.read_parquet(part).iloc[0] for part in res.parts]
    assert [Problem(int(r.m), int(r.n), int(r.k), "float32", "NN", r.epilogue) for r in measured] == asks
