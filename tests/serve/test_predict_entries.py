"""Regressions of the device a model serves (its sidecar's, not its folder's name) and of predict's entries
against each other (a top_k beyond 64 bits)."""
import numpy as np

import costlearn
from costlearn.serve.predict import Predictor, predict_best


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


def test_a_top_k_beyond_64_bits_is_answered_the_same_on_every_entry(device_name, model_dir, capsys, tmp_path):
    """Regression (an attack): a top_k of 2**63 raised "Served.predict(...): not a checked problem" where 2**62
    answered. Every entry (predict_best, cold and cached, predict_many of tuples and of Problems, the Predictor's
    methods, either ranker, with running_on, through a tuning database, the CLI) gives every candidate the
    candidate rule ranks, as a top_k of 2**62 does."""
    import json
    from costlearn.cli import main
    from costlearn.core.problem import Problem
    from costlearn.serve.predictor import load_predictor
    dev = device_name
    pred = load_predictor(dev, "gemm", "float32")
    twin = Predictor(model_dir, ranker="numpy")
    here = pred.spec
    for i, top_k in enumerate((2**63, 2**64 + 3, np.uint64(2**63), 2**200)):
        m = 97 + i                                                      # unseen by this process: a cold call first
        want = pred.predict_shape(m, 64, 64, "NN", "none", 2**62)
        assert len(want.top_k) > 5
        q = Problem(m, 64, 64)
        got = [predict_best(m, 64, 64, device=dev, top_k=top_k), predict_best(m, 64, 64, device=dev, top_k=top_k),
               costlearn.predict_many([(m, 64, 64)], device=dev, top_k=top_k)[0],
               costlearn.predict_many([q], device=dev, top_k=top_k)[0],
               pred.predict(q, top_k), pred.predict_many([q], top_k)[0],
               pred.predict_shapes([(m, 64, 64, "NN", "none")], top_k)[0],
               pred.predict_best(m, 64, 64, top_k=top_k), twin.predict(q, top_k)]
        assert all(repr(g) == repr(want) for g in got)                 # (repr: a NaN ratio is not == itself)
        ran = [predict_best(m, 64, 64, device=dev, top_k=top_k, running_on=here),
               costlearn.predict_many([(m, 64, 64)], device=dev, top_k=top_k, running_on=here)[0],
               pred.predict(q, top_k, here), twin.predict(q, top_k, here),
               predict_best(m, 64, 64, device=dev, top_k=top_k, tuning_db=tmp_path / "t.sqlite")]
        assert all(r.top_k == want.top_k and r.config == want.config for r in ran)
    assert main(["predict", "98x64x64", "--model", dev, "--json", "--top-k", str(2**63)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(e["config_id"], e["time_us"]) for e in out["top_k"]] == \
        [(c.config_id, t) for c, t in pred.predict_shape(98, 64, 64, "NN", "none", 2**62).top_k]

