"""Regressions of what predict serves: the device a model serves is its sidecar's, not its folder's name."""
import costlearn
from costlearn.serve.predict import predict_best


def test_a_model_in_a_folder_named_for_another_device_is_flagged_by_its_sidecar(model_dir, tmp_path):
    """Regression (an attack): a model stored under a folder named for another device (this machine's model under
    h100/, an H100's under this machine's folder name) was served as that device's with ood=False; every answer
    now says which device its sidecar records, and the answers of a folder named for it are unchanged."""
    import json
    import shutil
    from costlearn.core.device import preset
    from costlearn.model.artifact import load as load_artifact
    spec = load_artifact(model_dir).spec
    store = tmp_path / "store"
    for dev in ("h100", spec.slug):
        shutil.copytree(model_dir, store / dev / "gemm" / "float32")
    swapped = store / spec.slug / "gemm" / "float32" / "model.json"
    swapped.write_text(json.dumps(dict(json.loads(swapped.read_text()), device=preset("h100").to_dict())))
    for dev, recorded in (("h100", spec), (spec.slug, preset("h100"))):
        for p in (predict_best(64, 64, 64, device=dev, models_dir=store),
                  costlearn.predict_many([(64, 64, 64)], device=dev, models_dir=store)[0]):
            assert p.device == dev and p.ood
            assert f"the {dev} model's sidecar records training on {recorded.name} ({recorded.slug}), not {dev}: " \
                "its times are that device's" in p.ood_reasons
    own = predict_best(64, 64, 64, device=spec.slug, models_dir=model_dir.parents[2])
    assert not own.ood and own.device == spec.slug
