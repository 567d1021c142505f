"""costlearn.learn.transfer and the multi-device model: carrying a model from one
device to another (zero-shot and from a few destination problems), the
destination's feasibility rules, the zero-shot flag, and the folded forest
the transferred model serves."""
import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from costlearn.cli import main
from costlearn.model.vendor_floor import VendorFloor
from costlearn.interop import import_file
from costlearn.model import artifact, artifact_layout, get_model
from costlearn.model.xgb import XGBParams
from costlearn.serve.predictor import Predictor
from costlearn.learn.train import train
from costlearn.learn.transfer import MIN_DESTINATION_PROBLEMS, ZERO_SHOT_MARGIN_LOG2, transfer
from inductor_fixture import FIXTURE_CONFIGS, HEADER, build_models, write_log

FAST = XGBParams(n_estimators=60, learning_rate=0.3, max_depth=4, early_stopping_rounds=20)
H100_SHAPES = [(256 * (1 + i % 5), 128 * (2 + i % 7), 64 * (3 + i % 11)) for i in range(MIN_DESTINATION_PROBLEMS + 2)]
# Feasible on an H100 (7 copies of 32 KiB panels in 227 KiB) but not on an A100 (6 copies in 163 KiB).
HOPPER_ONLY = (128, 128, 64, 8, 7)
HOPPER_ONLY_ID = "m128n128k64_w8_s7_g8"


def _write_device_log(path, shapes, configs, capability, smem):
    write_log(path, shapes=shapes, layouts=["NN"] * len(shapes), configs=configs)
    lines = path.read_text().splitlines()
    lines[0] = json.dumps(dict(HEADER, device_capa=capability, shared_memory=smem))
    path.write_text("\n".join(lines) + "\n")


def _h100_data(tmp, shapes=H100_SHAPES, configs=FIXTURE_CONFIGS):
    log = tmp / "h100_mm.txt"
    _write_device_log(log, shapes, configs, [9, 0], 232448)
    import_file("inductor", log, device="h100", data_root=tmp / "data")
    return tmp / "data" / "h100"


def _digest(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("transfer")
    return tmp, build_models(tmp)


def test_zero_shot_transfer_serves_the_destination_flags_every_answer_and_leaves_the_source(source, tmp_path):
    tmp, models = source
    src = artifact_layout.model_folder(models, "a100", "triton_mm", "float16")
    before = _digest(src)
    res = transfer(models, "a100", "h100", params=FAST)
    assert [(r.family, r.dtype, r.zero_shot, r.destination_rows) for r in res] == [("triton_mm", "float16", True, 0)]
    assert _digest(src) == before
    side = json.loads(res[0].path.read_text())
    assert side["transfer"]["source_device"] == "a100" and side["transfer"]["destination_problems"] == 0
    assert side["device"]["name"] == "NVIDIA H100 80GB HBM3"
    p = Predictor(res[0].path.parent)
    assert p.floor.margin_log2 == ZERO_SHOT_MARGIN_LOG2 and not p.floor.calibrated
    pred = p.predict(p.problem(1024, 1024, 1024))
    assert pred.ood and any("zero-shot transfer from a100" in r for r in pred.ood_reasons)
    assert pred.device == "h100"
    from costlearn import predict_best
    served = predict_best(1024, 1024, 1024, "float16", "h100", family="triton_mm", models_dir=models)
    assert served.config == pred.config and served.ood_reasons == pred.ood_reasons
    # the served scorer (device descriptors folded away, roofline column added) is the model
    art = artifact.load(res[0].path.parent)
    X = art.candidate_features().numpy(1024, 2048, 512, None, "NN")
    rows = pd.DataFrame(dict(m=1024, n=2048, k=512, dtype="float16", layout="NN", family="triton_mm",
                             config_id=[c.config_id for c in art.configs]))
    np.testing.assert_allclose(art.scorer.full_numpy(X, np.arange(len(X))), np.log2(art.model().predict(rows)),
                               atol=1e-3)


def test_transfer_from_destination_problems_is_not_zero_shot_and_calibrates_on_them(source, tmp_path):
    tmp, models_src = source
    models = tmp_path / "models"
    import shutil
    shutil.copytree(models_src, models)
    data = _h100_data(tmp_path)
    res = transfer(models, "a100", "h100", data_dir=data, params=FAST)[0]
    assert not res.zero_shot and res.destination_problems == len(H100_SHAPES)
    assert res.holdout["xgboost_devices"]["shapes"] == len(H100_SHAPES)
    assert "destination problems" in res.floor["calibration"]["heldout"]
    p = Predictor(res.path.parent)
    assert VendorFloor(res.floor).calibrated
    pred = p.predict(p.problem(1024, 1024, 1024))
    assert not any("zero-shot" in r for r in pred.ood_reasons)
    # the fixture's order holds on both devices: config 0 is fastest everywhere
    assert p.predict(p.problem(*H100_SHAPES[3])).config.config_id in ("m64n64k32_w4_s3_g8", "vendor")


def test_transfer_never_offers_a_config_the_destination_cannot_run(tmp_path):
    data = _h100_data(tmp_path, shapes=H100_SHAPES[:10], configs=FIXTURE_CONFIGS + [HOPPER_ONLY])
    train(data, tmp_path / "models", family="triton_mm", dtype="float16", holdout=False, settings=dict(params=FAST))
    src = Predictor(artifact_layout.model_folder(tmp_path / "models", "h100", "triton_mm", "float16"))
    assert HOPPER_ONLY_ID in [c.config_id for c in src.configs]
    res = transfer(tmp_path / "models", "h100", "a100", params=FAST)[0]
    side = json.loads(res.path.read_text())
    assert side["transfer"]["infeasible_on_destination"] == 1
    p = Predictor(res.path.parent)
    assert HOPPER_ONLY_ID not in [c.config_id for c in p.configs]
    assert all(p.predict(p.problem(*s)).config.config_id != HOPPER_ONLY_ID for s in H100_SHAPES)


def test_transfer_refuses_bad_requests_naming_the_value(source, tmp_path):
    tmp, models = source
    with pytest.raises(ValueError, match="both 'a100'"):
        transfer(models, "a100", "a100")
    with pytest.raises(ValueError, match="holds no model of device 'v100'"):
        transfer(models, "v100", "h100")
    with pytest.raises(ValueError, match=f"--models names the store \\(--models {models} --from a100\\)"):
        transfer(models / "a100", "a100", "h100")              # regression: a device folder given as the store
    with pytest.raises(ValueError, match="is not a folder"):
        transfer(tmp_path / "nope", "a100", "h100")
    with pytest.raises(ValueError, match="not a preset \\(\\['a100', 'h100', 'h200'\\]\\)"):
        transfer(models, "a100", "mi300")
    with pytest.raises(ValueError, match="destination_share=5 .*must be in \\(0, 1\\]"):
        transfer(models, "a100", "h100", destination_share=5)
    own = tmp_path / "models"
    import shutil
    shutil.copytree(models, own / "x", dirs_exist_ok=True)
    shutil.copytree(own / "x" / "a100", own / "a100")
    shutil.copytree(own / "x" / "a100", own / "h100")        # a model of the h100's own rows, as far as it says
    with pytest.raises(ValueError, match="not made by transfer.*pass --replace"):
        transfer(own, "a100", "h100", params=FAST)


def test_cli_transfer_zero_shot_says_so(source, tmp_path, capsys):
    tmp, models = source
    import shutil
    shutil.copytree(models, tmp_path / "m")
    # device names as a user may spell them: the folders are lower-case
    assert main(["transfer", "--from", "A100", "--to", "H100", "--models", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "zero-shot" in out and "a100 -> h100" in out
    assert main(["transfer", "--from", "a100", "--to", "h100", "--models", str(tmp_path / "m"),
                 "--data", str(tmp_path / "nope")]) == 2
    assert "(CLI: --data) is not a folder" in capsys.readouterr().err


def test_multidevice_model_refuses_rows_of_a_device_it_has_no_spec_for(source):
    from costlearn.collect.dataset import load, valid_rows
    from costlearn.core.device import preset
    tmp, _ = source
    rows = valid_rows(load(tmp / "data" / "a100")[0])
    mdl = get_model("xgboost_devices", params=FAST)
    with pytest.raises(ValueError, match="rows measured on 'a100'.*give its DeviceSpec"):
        mdl.fit(rows, preset("h100"))
    with pytest.raises(ValueError, match="destination_share=2"):
        get_model("xgboost_devices", destination_share=2).fit(rows, preset("a100"))


def test_transfer_names_the_destination_rows_it_does_not_use(source, tmp_path):
    """Regression: transfer skipped the H100 log's tfloat32 rows without a word (the source had no tfloat32
    model)."""
    import shutil
    tmp, models_src = source
    shutil.copytree(models_src, tmp_path / "models")
    data = _h100_data(tmp_path)
    log = tmp_path / "h100_tf32.txt"
    _write_device_log(log, H100_SHAPES[:3], FIXTURE_CONFIGS, [9, 0], 232448)
    log.write_text(log.read_text().replace("torch.float16", "torch.float32").replace("not_float_32", "True"))
    import_file("inductor", log, device="h100", data_root=tmp_path / "data")
    said = []
    res = transfer(tmp_path / "models", "a100", "h100", data_dir=data, params=FAST, progress=said.append)
    assert [r.dtype for r in res] == ["float16"]
    assert any(line.startswith("triton_mm/tfloat32: 27 rows of") and "not used: the a100 store has no "
               "triton_mm/tfloat32 model to carry" in line for line in said), said


@pytest.mark.parametrize("strategy", ["random", "prior", "active"])
def test_transfer_chooses_its_destination_problems_from_a_pool(source, tmp_path, strategy):
    """`transfer --data POOL --problems K --strategy S` learns from
    K problems of a destination log chosen by S, and says which."""
    import shutil
    from costlearn.collect.active_shapes import ActiveSettings
    tmp, models_src = source
    models = tmp_path / "models"
    shutil.copytree(models_src, models)
    data = _h100_data(tmp_path)
    small = ActiveSettings(first_round=2, members=2, trees=8, candidates=10, round_share=0.5)
    res = transfer(models, "a100", "h100", data_dir=data, params=FAST, problems=8, strategy=strategy, active=small)[0]
    pool = {(m, n, k, "NN") for m, n, k in H100_SHAPES}
    assert res.destination_problems == 8 and len(set(res.chosen)) == 8 and set(res.chosen) <= pool
    side = json.loads(res.path.read_text())
    assert side["transfer"]["destination_problems"] == 8 and side["training"]["shapes"] > 8   # the source's too
    again = transfer(models, "a100", "h100", data_dir=data, params=FAST, problems=8, strategy=strategy,
                     active=small)[0]
    assert again.chosen == res.chosen                                               # seeded: the same choice
    with pytest.raises(ValueError, match=r"strategy='best'; allowed"):
        transfer(models, "a100", "h100", data_dir=data, params=FAST, problems=8, strategy="best")


def test_cli_transfer_takes_k_problems_of_a_pool_by_a_strategy(source, tmp_path, capsys):
    tmp, models = source
    import shutil
    shutil.copytree(models, tmp_path / "m")
    data = _h100_data(tmp_path)
    assert main(["transfer", "--from", "a100", "--to", "h100", "--models", str(tmp_path / "m"), "--data", str(data),
                 "--problems", "4", "--strategy", "prior"]) == 0
    captured = capsys.readouterr()
    assert f"chose 4 of the {len(H100_SHAPES)} h100 problems (prior)" in captured.err
    assert "rows over 4 problems" in captured.out
