"""`costlearn train` learns from a tuning database's measurements once imported: alone (the fleet's triton_mm
tunings, the vendor call among the candidates) and beside rows costlearn collected (gemm on the committed device);
the rows of the current kernel template count, those of an old template are stale like any other row."""
from __future__ import annotations

import json

import pytest

from costlearn import __version__
from costlearn.collect.dataset import write_part
from costlearn.collect.loop import write_device_json
from costlearn.core.device import DeviceSpec
from costlearn.core.problem import Problem
from costlearn.families import VENDOR_CONFIG_ID, get_family
from costlearn.families.triton_mm import TritonMMConfig
from costlearn.interop import InteropError, import_tuning_db
from costlearn.learn.train import train
from costlearn.model.xgb import XGBParams
from costlearn.serve.fleet import Measurement
from costlearn.serve.predictor import Predictor
from costlearn.serve.tuning_db import TuningDB
from inductor_fixture import FIXTURE_CONFIGS, LAYOUT_FACTOR, SHAPE_LAYOUTS, SHAPES, VENDOR_FACTOR

FAST = XGBParams(n_estimators=60, learning_rate=0.3, max_depth=4, early_stopping_rounds=20)
TRITON = get_family("triton_mm")


def fleet_tuning(m, n, k, layout, tid, host):
    """A tuning of every fixture config and the vendor call, timed as the Inductor fixture's formula says
    (config 0 fastest, the vendor between configs 0 and 1)."""
    base = (5 + m * n * k / 25e6) * LAYOUT_FACTOR[layout]
    times = {TritonMMConfig(bm, bn, bk, w, s).config_id: base * (1 + 0.3 * j)
             for j, (bm, bn, bk, w, s) in enumerate(FIXTURE_CONFIGS)}
    times[VENDOR_CONFIG_ID] = base * VENDOR_FACTOR
    return [Measurement(c, t * 0.98, t, t * 1.02, 30, host, tid, {"sm_clock_mhz": 1410.0}, {"costlearn": __version__},
                        "2025-03-01T10:00:00+00:00", 0.003) for c, t in times.items()]


def test_a_fleet_s_measurements_alone_train_a_triton_mm_model_with_the_vendor_call(tmp_path):
    db = TuningDB(tmp_path / "tuning.sqlite", create=True)
    for i, ((m, n, k), lay) in enumerate(zip(SHAPES, SHAPE_LAYOUTS)):
        db.record(Problem(m, n, k, "float16", lay), "triton_mm", "a100", TRITON.template_hash,
                  fleet_tuning(m, n, k, lay, f"t{i}", f"gpu-{i % 3}"), source="test")
    # another costlearn version's tuning of the current kernel counts; an old kernel template's is stale
    db.record(Problem(640, 640, 640, "float16"), "triton_mm", "a100", TRITON.template_hash,
              fleet_tuning(640, 640, 640, "NN", "old-version", "gpu-9"), source="test", costlearn_version="0.0.1")
    db.record(Problem(704, 704, 704, "float16"), "triton_mm", "a100", "0ld0template",
              fleet_tuning(704, 704, 704, "NN", "old-template", "gpu-9"), source="test")
    db.close()
    per_tuning = len(FIXTURE_CONFIGS) + 1
    rep = import_tuning_db(tmp_path / "tuning.sqlite", device_class="a100", data_root=tmp_path / "data")
    assert rep.rows_added == (len(SHAPES) + 2) * per_tuning
    res = train(tmp_path / "data" / "a100", tmp_path / "models", family="triton_mm", dtype="float16", holdout=False,
                settings=dict(params=FAST))
    assert (res.rows, res.shapes) == ((len(SHAPES) + 1) * per_tuning, len(SHAPES) + 1)
    training = json.loads(res.path.read_text())["training"]
    assert training["stale_rows_dropped"] == per_tuning and training["sources"] == ["tuning.sqlite"]
    assert training["template_hashes"] == [TRITON.template_hash]
    assert "old-version" in training["run_ids"] and "old-template" not in training["run_ids"]
    p = Predictor(res.path.parent)
    assert VENDOR_CONFIG_ID in [c.config_id for c in p.configs]
    best = p.predict(p.problem(*SHAPES[7])).config.config_id
    assert best in (TritonMMConfig(*FIXTURE_CONFIGS[0]).config_id, VENDOR_CONFIG_ID)


def test_a_fleet_s_measurements_train_beside_rows_costlearn_collected(dataset_dir, dataset_rows, tmp_path):
    """The committed (PoCL, gemm) device: a few of its collected problems, and the fleet's tunings of others."""
    spec = DeviceSpec.from_file(dataset_dir / "device.json")
    gemm = get_family("gemm")
    rows = dataset_rows[dataset_rows["epilogue"] == "none"]
    problems = rows[["m", "n", "k"]].drop_duplicates().head(8)
    collected = rows.merge(problems, on=["m", "n", "k"])
    data = tmp_path / "data" / spec.slug
    write_device_json(spec, data)
    write_part(collected, data)
    fleet = rows.merge(rows[["m", "n", "k"]].drop_duplicates().iloc[20:26], on=["m", "n", "k"])
    groups = list(fleet.groupby(["m", "n", "k"]))
    db = TuningDB(tmp_path / "tuning.sqlite", create=True)
    for i, ((m, n, k), grp) in enumerate(groups):
        ms = [Measurement(r.config_id, r.time_us * 0.99, r.time_us, r.time_us * 1.01, 10, "cpu-host", f"t{i}", {}, {},
                          "2025-03-01T10:00:00+00:00", 0.01) for r in grp.itertuples()]
        db.record(Problem(int(m), int(n), int(k)), "gemm", spec.slug, gemm.template_hash, ms, source="test")
        if i == 0:                          # the same problem under an old kernel template: stale
            db.record(Problem(int(m), int(n), int(k)), "gemm", spec.slug, "0ld0template", ms, source="test")
    db.close()
    with pytest.raises(InteropError, match="not a preset"):          # no device.json of it there
        import_tuning_db(tmp_path / "tuning.sqlite", device_class=spec.slug, data_root=tmp_path / "elsewhere")
    rep = import_tuning_db(tmp_path / "tuning.sqlite", device_class=spec.slug,   # the collection's device.json
                           data_root=tmp_path / "data")
    old = len(groups[0][1])
    assert rep.folder == data and rep.rows_added == len(fleet) + old
    res = train(data, tmp_path / "models", family="gemm", dtype="float32", holdout=False, settings=dict(params=FAST))
    training = json.loads(res.path.read_text())["training"]
    assert (res.rows, res.shapes) == (len(collected) + len(fleet), 8 + len(groups))
    assert training["stale_rows_dropped"] == old and training["sources"] == ["", "tuning.sqlite"]
