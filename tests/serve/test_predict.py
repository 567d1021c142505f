import re

import numpy as np
import pytest

import costlearn
from costlearn.core.device import preset
from costlearn.serve.predict import Predictor, predict_best
from conftest import ROOT


@pytest.fixture(scope="module")
def dev(device_name):
    return device_name


def test_keyword_order_and_numpy_ints_do_not_change_the_answer(dev, model_dir):
    a = predict_best(37, 200, 300, device=dev, models_dir=model_dir.parents[2])
    b = predict_best(K=300, N=200, M=37, device=dev, models_dir=model_dir.parents[2])
    c = predict_best(np.int64(37), np.int32(200), np.uint16(300), device=dev, models_dir=model_dir.parents[2])
    assert a == b == c
    assert a.config == a.top_k[0][0] and a.time_us == a.top_k[0][1] > 0
    assert [t for _, t in a.top_k] == sorted(t for _, t in a.top_k)


def test_package_level_predict_best_uses_the_repo_models(dev):
    p = costlearn.predict_best(1, 512, 512, device=dev)
    assert p.config.block_m == 1          # batch-1 gets a batch-1 tile
    assert p.device == dev


@pytest.mark.parametrize("args, exc, says", [
    ((0, 1, 1), ValueError, "M=0"), ((1, -5, 1), ValueError, "N=-5"), ((1, 1, 2.0), TypeError, "K=2.0"),
    ((True, 1, 1), TypeError, "M=True"), (("64", 1, 1), TypeError, "M='64'"),
])
def test_bad_shapes_raise_naming_the_value(dev, args, exc, says):
    with pytest.raises(exc, match=says):
        predict_best(*args, device=dev)


def test_unknown_dtype_and_device_say_what_is_allowed(dev):
    with pytest.raises(ValueError, match="float32"):
        predict_best(8, 8, 8, dtype="bfloat16", device=dev)
    with pytest.raises(ValueError, match="layout='NT'.*supports \\['NN'\\]"):
        predict_best(8, 8, 8, layout="NT", device=dev)
    with pytest.raises(ValueError, match="kernel family 'conv'"):
        predict_best(8, 8, 8, family="conv", device=dev)
    with pytest.raises(ValueError, match=dev):
        predict_best(8, 8, 8, device="tpu-v9")
    with pytest.raises(TypeError, match="device"):
        predict_best(8, 8, 8, device=3)


def test_ood_reasons_name_the_numbers(dev, model_dir):
    pred = Predictor(model_dir)
    env = pred.artifact.sidecar["envelope"]
    inside = tuple(env["shapes"][0])
    assert not pred.predict_best(*inside).ood
    p = pred.predict_best(1, 1, 10 * env["max"]["K"])
    assert p.ood and any(f"K={10 * env['max']['K']} above the trained maximum {env['max']['K']}" in r
                         for r in p.ood_reasons)
    q = pred.predict_best(*inside, running_on=preset("a100"))
    assert q.ood and any("running on NVIDIA A100" in r for r in q.ood_reasons)


def test_top_k_validation(dev):
    with pytest.raises(ValueError, match="top_k=0"):
        predict_best(8, 8, 8, device=dev, top_k=0)


def test_top_k_and_running_on_types(dev):
    with pytest.raises(TypeError, match="top_k=1.0"):
        predict_best(8, 8, 8, device=dev, top_k=1.0)
    with pytest.raises(TypeError, match="running_on='h200'"):
        predict_best(8, 8, 8, device=dev, running_on="h200")
    with pytest.raises(TypeError, match="models_dir=5"):
        predict_best(8, 8, 8, device=dev, models_dir=5)


def test_tiny_shapes_never_get_a_tile_larger_than_the_problem_silently(dev, model_dir):
    """Regression: (2, 2, 2) and (1, 8, 100) once got BM=16 / BM=8 tiles with ood=False."""
    pred = Predictor(model_dir)
    for shape in [(2, 2, 2), (1, 8, 100), (1, 1, 1), (2, 9, 5)]:
        p = pred.predict_best(*shape)
        fits = p.config.block_m <= max(1, 1 << (shape[0] - 1).bit_length())
        assert fits or (p.ood and any("no candidate" in r for r in p.ood_reasons)), (shape, p)


def _model_copy(model_dir, root):
    import shutil
    new = root / model_dir.parents[1].name / model_dir.parent.name / model_dir.name
    shutil.copytree(model_dir, new)
    return new


@pytest.mark.parametrize("change, says", [
    (dict(shapes=[]), "shapes of shape"), (dict(shapes=[[0, 4, 4]]), r"\[0, 4, 4\] has an extent below 1"),
    (dict(density_threshold_log2="nan"), "density_threshold_log2=nan"), (dict(min=None), "TypeError"),
    (dict(min=dict(M=2**40, N=1, K=1)), r"need 1 <= min <= max for \['M'\]")])
def test_a_malformed_envelope_is_an_artifact_error(model_dir, tmp_path, change, says):
    """Regression: an envelope with no shapes, a zero extent or a NaN
    threshold loaded and then crashed (or flagged nothing) at predict time."""
    import json
    from costlearn.model.artifact_layout import ArtifactError
    folder = _model_copy(model_dir, tmp_path)
    side = json.loads((folder / "model.json").read_text())
    side["envelope"].update(change)
    (folder / "model.json").write_text(json.dumps(side))
    with pytest.raises(ArtifactError, match="envelope") as e:
        Predictor(folder)
    assert re.search(says, str(e.value)), str(e.value)


def test_a_relative_model_folder_names_its_device(model_dir, monkeypatch):
    """Regression: Predictor('.') inside the model folder named its device
    after the empty parents of '.'."""
    monkeypatch.chdir(model_dir)
    p = Predictor(".")
    assert p.device == model_dir.parents[1].name
    assert p.predict_best(64, 64, 64).device == model_dir.parents[1].name


@pytest.mark.filterwarnings("ignore:costlearn. no device named:RuntimeWarning")   # (the record of this machine's device
# that another test may have left in the session's cache names another device than the model's: not tested here)
def test_costlearn_models_set_later_takes_effect_after_clear_cache(model_dir, tmp_path, monkeypatch):
    """Regression: setting $COSTLEARN_MODELS after a first prediction kept
    serving the old store, undocumented; it is read at the first call and
    after clear_cache()."""
    from costlearn.model import artifact_layout
    from costlearn.serve import predict as P
    monkeypatch.delenv("COSTLEARN_MODELS", raising=False)
    P.clear_cache()
    try:
        first = P.predict_best(64, 64, 64)
        assert P.default_store() == artifact_layout.models_root().absolute()
        (tmp_path / "empty").mkdir()
        monkeypatch.setenv("COSTLEARN_MODELS", str(tmp_path / "empty"))
        assert P.predict_best(64, 64, 64) == first              # read once: documented
        P.clear_cache()
        assert P.default_store() == tmp_path / "empty"
        with pytest.raises(ValueError, match="no gemm/float32 model"):
            P.predict_best(64, 64, 64)
    finally:
        monkeypatch.delenv("COSTLEARN_MODELS", raising=False)
        P.clear_cache()


def test_names_of_one_model_folder_share_one_predictor(model_dir):
    from costlearn.serve.predictor import load_predictor
    dev = model_dir.parents[1].name
    assert load_predictor(dev, models_dir=model_dir.parents[2]) is load_predictor(None, models_dir=model_dir.parents[2])


@pytest.mark.filterwarnings("ignore:costlearn. no device named:RuntimeWarning")   # (the record of this machine's device
# that another test may have left in the session's cache names another device than the model's: not tested here)
def test_a_linked_model_folder_is_named_where_it_is_linked(model_dir, tmp_path):
    """Regression: the device name came from the link's target
    (``runs/run42`` named the device ``tmp...``)."""
    import shutil
    from costlearn.serve.predictor import load_predictor
    target = tmp_path / "runs" / "run42"
    shutil.copytree(model_dir, target)
    link = tmp_path / "store" / "my-gpu" / "gemm" / "float32"
    link.parent.mkdir(parents=True)
    link.symlink_to(target, target_is_directory=True)
    p = load_predictor(None, models_dir=tmp_path / "store")
    assert p.device == "my-gpu" and p.predict_best(64, 64, 64).device == "my-gpu"


def test_a_load_racing_clear_cache_does_not_cache_the_old_store(model_dir, tmp_path, monkeypatch):
    """Regression: a load that resolved its folder before another thread's
    clear_cache() cached the old store's predictor under the default key."""
    import threading
    import time
    from costlearn.serve import predict as P
    from costlearn.model import store
    monkeypatch.delenv("COSTLEARN_MODELS", raising=False)
    P.clear_cache()
    real = store.resolve_model
    started = threading.Event()

    def slow(*args):
        folder = real(*args)
        started.set()
        time.sleep(0.3)
        return folder
    monkeypatch.setattr(store, "resolve_model", slow)          # the model store resolves, the predictor loads
    outcome = []

    def load():
        try:
            outcome.append(P.load_predictor())
        except ValueError as e:
            outcome.append(e)
    try:
        t = threading.Thread(target=load)
        t.start()
        started.wait(5)
        monkeypatch.setenv("COSTLEARN_MODELS", str(tmp_path))
        P.clear_cache()
        t.join(10)
        assert len(outcome) == 1 and "no gemm/float32 model" in str(outcome[0])   # it resolved again, in the new store
        monkeypatch.setattr(P, "resolve_model", real)
        with pytest.raises(ValueError, match="no gemm/float32 model"):
            P.predict_best(64, 64, 64)
    finally:
        monkeypatch.delenv("COSTLEARN_MODELS", raising=False)
        P.clear_cache()


@pytest.mark.parametrize("what", ["missing", "file"])
def test_a_models_dir_that_is_not_a_folder_says_so(tmp_path, what):
    """Regression: a mistyped --models said 'no gemm/float32 model ...
    (models present: none)', never that the folder does not exist."""
    path = tmp_path / "nope"
    if what == "file":
        path.write_text("x")
    with pytest.raises(ValueError, match="is not a folder" + (r" \(it does not exist\)" if what == "missing" else "")):
        predict_best(8, 8, 8, models_dir=path)


@pytest.mark.parametrize("kw", [dict(measure_top_k=None), dict(measure_top_k=0.0), dict(measure_top_k=False),
                                dict(measure_top_k=""), dict(backend="opencl"), dict(backend=42)])
def test_result_cache_does_not_let_bad_options_through(device_name, kw):
    predict_best(48, 64, 96, device=device_name)
    with pytest.raises(TypeError):
        predict_best(48, 64, 96, device=device_name, **kw)


def test_relative_models_dir_is_not_cached_across_chdir(device_name, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    predict_best(48, 64, 96, device=device_name, models_dir="models")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()                  # another, empty store of the same relative name
    with pytest.raises(ValueError, match="no model"):
        predict_best(48, 64, 96, device=device_name, models_dir="models")


def test_a_repeated_problem_is_answered_without_the_store_relative_paths_and_path_objects_too(
        dev, model_dir, monkeypatch):
    """The repeated-problem path looks the predictor up by the store's key: an absolute path, the
    default store, and (regression) a relative path or a pathlib.Path once loaded under those names. A relative
    path went through load_predictor on every call (its key names the working folder, which a string never
    equalled): with models_dir="out/models" as the README writes it, a repeated problem took 7 us against 0.4
    for an absolute path."""
    import costlearn.serve.predict as api
    from pathlib import Path
    ask = predict_best
    api.clear_cache()                                        # no names loaded by another test
    store = str(model_dir.parents[2].resolve())
    first = ask(48, 72, 96, device=dev, models_dir=store)
    default = ask(48, 72, 96, device=dev)
    calls = []
    real = api.load_predictor
    monkeypatch.setattr(api, "load_predictor", lambda *a: calls.append(a) or real(*a))
    assert ask(48, 72, 96, device=dev, models_dir=store) is first
    assert ask(48, 72, 96, device=dev) is default
    assert calls == []
    monkeypatch.chdir(model_dir.parents[3])
    relative = model_dir.parents[2].name
    assert ask(48, 72, 96, device=dev, models_dir=relative) == first     # new names: loaded (found by folder)
    assert len(calls) == 1
    again = ask(48, 72, 96, device=dev, models_dir=relative)
    assert again == first and ask(48, 72, 96, device=dev, models_dir=relative) is again
    assert ask(48, 72, 96, device=dev, models_dir=Path(relative)) is again           # the same key
    assert ask(49, 72, 96, device=dev, models_dir=Path(relative)).m == 49            # unseen: the loaded one
    assert ask(48, 72, 96, device=dev, models_dir=Path(store)) is first
    assert len(calls) == 1
    monkeypatch.chdir(model_dir.parents[2])                  # the same relative name, another (missing) store
    with pytest.raises(ValueError, match="not a folder"):
        ask(48, 72, 96, device=dev, models_dir=relative)
    for bad in ("", b"models", 3):                           # no key: the Python function's own error
        with pytest.raises(TypeError, match="models_dir"):
            ask(48, 72, 96, device=dev, models_dir=bad)


def test_a_chdir_while_a_relative_store_loads_does_not_register_another_stores_model(
        dev, model_dir, tmp_path, monkeypatch):
    """Regression (an attack): LoadedModels.load keyed a relative models_dir by the working folder,
    then resolved the relative path again; another thread's chdir between the two registered store A's model
    under store B's key, and B answered with A's model from then on. The folder is now the key's."""
    import os
    import costlearn.model.store as st
    import costlearn.serve.predict as api
    ask = predict_best
    api.clear_cache()
    relative = model_dir.parents[2].name
    (tmp_path / relative).mkdir()                            # store B: the same relative name, no model
    real = st.resolve_model

    def chdir_then_resolve(*args, **kw):
        os.chdir(model_dir.parents[3])                       # another thread's chdir, landing mid-load
        return real(*args, **kw)
    monkeypatch.setattr(st, "resolve_model", chdir_then_resolve)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="no model"):
        ask(48, 72, 96, device=dev, models_dir=relative)
    monkeypatch.setattr(st, "resolve_model", real)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="no model"):
        ask(48, 72, 96, device=dev, models_dir=relative)


def test_a_str_subclass_equal_to_every_path_does_not_name_another_store(dev, model_dir, tmp_path):
    """Regression (an attack): the loaded models were keyed by models_dir itself, so a str subclass
    whose __eq__ is always true and whose hash is another store's found that store's model. Keys are str now."""
    import costlearn.serve.predict as api
    ask = predict_best
    api.clear_cache()
    loaded = str(model_dir.parents[2].resolve())
    ask(48, 72, 96, device=dev, models_dir=loaded)

    class Liar(str):
        def __eq__(self, other):
            return True

        def __hash__(self):
            return hash(loaded)
    (tmp_path / "models").mkdir()
    with pytest.raises(ValueError, match="no model"):
        ask(48, 72, 96, device=dev, models_dir=Liar(str(tmp_path / "models")))


def test_a_copied_predictor_given_another_floor_leaves_the_served_answers_alone(dev):
    """Regression (an attack on the answer cache): the floor setter
    emptied the answer cache in place, so a shallow copy of the served
    Predictor given another floor filled the served one's cache with
    answers of that floor."""
    import copy
    from costlearn.model.vendor_floor import VendorFloor, plain_floor
    from costlearn.serve.predictor import load_predictor
    before = predict_best(8, 512, 4096, device=dev)
    study = copy.copy(load_predictor(dev, "gemm", "float32"))
    floor = plain_floor()
    floor["margin_log2"] = 10.0
    study.floor = VendorFloor(floor)
    assert study.predict_best(8, 512, 4096).margin_log2 == 10.0
    after = predict_best(8, 512, 4096, device=dev)
    assert after is before and after.margin_log2 == before.margin_log2 != 10.0


def test_an_epilogue_is_part_of_the_problem_asked_cached_and_answered(dev, model_dir):
    """The committed model knows the four epilogues: each is answered and
    carried in the Prediction; the repeated-problem cache keeps them apart;
    the same shape without an epilogue is answered as before."""
    from costlearn.core.problem import EPILOGUES
    pred = Predictor(model_dir)
    assert pred.epilogues == EPILOGUES
    plain = predict_best(48, 300, 20, device=dev)
    got = {e: predict_best(48, 300, 20, device=dev, epilogue=e) for e in EPILOGUES}
    assert {e: p.epilogue for e, p in got.items()} == {e: e for e in EPILOGUES}
    assert got["none"] is plain and got["bias_gelu"].problem.epilogue == "bias_gelu"
    assert [p.epilogue for p in costlearn.predict_many([(48, 300, 20, "NN", "bias_relu"), (48, 300, 20)],
                                                        device=dev)] == ["bias_relu", "none"]
    assert pred.predict_best(48, 300, 20, epilogue="bias").config == got["bias"].config


def test_an_unknown_or_untrained_epilogue_is_refused_naming_it(dev, model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"epilogue='silu'; allowed: \['none', 'bias', 'bias_relu', 'bias_gelu'\]"):
        predict_best(4, 4, 4, device=dev, epilogue="silu")
    import json
    import shutil
    folder = tmp_path / "m"
    shutil.copytree(model_dir, folder)
    side = json.loads((folder / "model.json").read_text())
    side["epilogues"] = ["none"]                          # a model trained without epilogues
    (folder / "model.json").write_text(json.dumps(side))
    pred = Predictor(folder)
    with pytest.raises(ValueError, match="epilogue='bias': the .* was trained on epilogues \\['none'\\]; collect"):
        pred.predict_best(4, 4, 4, epilogue="bias")
    with pytest.raises(ValueError, match="serves dtype 'float32', layouts \\['NN'\\], epilogues \\['none'\\]; "
                                         "collect rows with it \\(`costlearn collect --epilogues bias_relu`\\)"):
        pred.predict_many([costlearn.Problem(4, 4, 4, epilogue="bias_relu")])


@pytest.mark.parametrize("bad", [["bias"], {"e": 1}])
def test_an_unhashable_epilogue_or_layout_is_a_clear_error_not_a_cache_crash(dev, bad):
    """Regression: the repeated-problem cache looked the value up as a dict
    key first, so a list raised 'unhashable type'."""
    predict_best(4, 4, 4, device=dev)
    with pytest.raises(ValueError, match="epilogue="):
        predict_best(4, 4, 4, device=dev, epilogue=bad)
    with pytest.raises(ValueError, match="layout="):
        predict_best(4, 4, 4, device=dev, layout=bad)
    with pytest.raises(ValueError, match="epilogue="):
        Predictor(costlearn.serve.predictor.load_predictor(dev).artifact.path).predict_best(4, 4, 4, epilogue=bad)


def test_predict_shape_answers_and_refuses_as_predict_of_the_problem(model_dir):
    """predict_best answers an unseen problem through Predictor.predict_shape, which builds no Problem
    where the answer needs none; its answers (in and out of the envelope, every epilogue, any top k) and its
    errors must be predict's of the Problem: the answers those of the policy's path (a device to run on given)
    and of the numpy ranker's (which leaves every decision to Python)."""
    from costlearn.core.problem import Problem
    rng = np.random.default_rng(7)
    fast, ref, twin = Predictor(model_dir), Predictor(model_dir), Predictor(model_dir, ranker="numpy")
    shapes = [tuple(int(v) for v in row) for row in np.round(2.0 ** rng.uniform(0, 15, size=(40, 3)))]
    for (m, n, k), epi, top in zip(shapes, ["none", "bias", "bias_relu", "bias_gelu"] * 10, [1, 2, 5, 9] * 10):
        q = Problem(m, n, k, ref.dtype, "NN", epi)
        want = repr(ref.predict(q, top, running_on=ref.spec))          # (reprs: a NaN ratio equals no NaN)
        assert repr(fast.predict_shape(m, n, k, "NN", epi, top)) == want == repr(twin.predict(q, top)), q
        assert fast.predict_shape(m, n, k, "NN", epi, top) is fast.predict_shape(m, n, k, "NN", epi, top)
        assert repr(ref.predict(q, top)) == want
    for args in [(0, 8, 8, "NN", "none", 5), (8, 8, 2**31, "NN", "none", 5), (8.0, 8, 8, "NN", "none", 5),
                 (True, 8, 8, "NN", "none", 5), (8, 8, 8, "XX", "none", 5), (8, 8, 8, "NN", "silu", 5),
                 (8, 8, 8, "TT", "none", 5), (8, 8, 8, "NN", "none", 0), (8, 8, 8, "NN", "none", 2.0),
                 (8, 8, 8, ["NN"], "none", 5)]:
        with pytest.raises((TypeError, ValueError)) as want:
            ref.predict(Problem(*args[:3], ref.dtype, *args[3:5]), args[5])
        with pytest.raises(want.type, match=re.escape(str(want.value))):
            fast.predict_shape(*args)


def test_a_repeated_answer_is_forgotten_with_its_predictors_answers_and_floor(dev):
    """predict_best answers a repeated problem from its predictor's answer cache; what empties it (clear_results,
    a new floor, clear_cache) must, or a study that sets a floor would read answers of the old one. A float extent
    equal to a cached int is still refused."""
    from costlearn.model.vendor_floor import VendorFloor, plain_floor
    from costlearn.serve.predictor import clear_cache, load_predictor
    first = predict_best(24, 640, 4096, device=dev)
    assert predict_best(24, 640, 4096, device=dev) is first
    assert load_predictor(dev, "gemm", "float32").cached((24, 640, 4096, "NN", 5, "none")) is first
    with pytest.raises(TypeError, match="M=24.0"):
        predict_best(24.0, 640, 4096, device=dev)
    served = load_predictor(dev, "gemm", "float32")
    served.clear_results()
    again = predict_best(24, 640, 4096, device=dev)
    assert again == first and again is not first
    old = served.floor
    floor = plain_floor()
    floor["margin_log2"] = 10.0
    try:
        served.floor = VendorFloor(floor)
        assert predict_best(24, 640, 4096, device=dev).margin_log2 == 10.0
    finally:
        served.floor = old
    assert predict_best(24, 640, 4096, device=dev).margin_log2 == first.margin_log2 != 10.0
    clear_cache()
    again = predict_best(24, 640, 4096, device=dev)
    assert again == first and again is not first


def test_predict_shapes_names_the_bad_shape_as_predict_many_does(model_dir):
    """Predictor.predict_shapes (costlearn.predict_many's path) refuses what predict_many of the Problems
    refuses, naming the position; a shape that is not a 5-tuple is named too."""
    pred = Predictor(model_dir)
    good = (8, 64, 64, "NN", "none")
    assert pred.predict_shapes(iter([good, good])) == [pred.predict_shape(*good)] * 2
    for shapes, exc, says in [([good, (8, 0, 64, "NN", "none")], ValueError, r"shapes\[1\]: N=0"),
                              ([(8.0, 64, 64, "NN", "none")], TypeError, r"shapes\[0\]: M=8.0"),
                              ([good, (8, 64, 64, "TT", "none")], ValueError, r"shapes\[1\].*layouts \['NN'\]"),
                              (None, TypeError, r"shapes=None; must be a sequence"),
                              ([(8, 64, 64)], TypeError, r"shapes\[0\]=\(8, 64, 64\); must be an \(m, n, k"),
                              ([good], ValueError, "top_k=0")]:
        with pytest.raises(exc, match=says):
            pred.predict_shapes(shapes, top_k=0 if says == "top_k=0" else 5)


class _EqualToAll:
    """Hashes as ``value`` and equals anything: an argument a cache lookup matches that is no valid one."""

    def __init__(self, value):
        self.value = value

    def __hash__(self):
        return hash(self.value)

    def __eq__(self, other):
        return True


def test_an_argument_that_only_equals_a_cached_one_is_refused_as_when_nothing_is_cached(dev, model_dir):
    """Regression (an attack): the answer cache checked only the extents' and top_k's types on a hit,
    so a layout, epilogue, device or store that merely compared equal to a cached one was answered, and a dtype or
    family that did was answered for an unseen problem: each must be refused as without the cache."""
    store = str(model_dir.parents[2].resolve())
    predict_best(24, 48, 72, device=dev, models_dir=store)
    for kw in [dict(layout=_EqualToAll("NN")), dict(epilogue=_EqualToAll("none")), dict(device=_EqualToAll(dev)),
               dict(models_dir=_EqualToAll(store)), dict(dtype=_EqualToAll("float32")),
               dict(family=_EqualToAll("gemm"))]:
        args = dict(device=dev, models_dir=store) | kw
        for shape in [(24, 48, 72), (25, 48, 72)]:               # cached, and unseen
            with pytest.raises((TypeError, ValueError)):
                predict_best(*shape, **args)


def _answers_of(served, cls):
    """``cls`` (an Answers subclass) for ``served`` under its floor."""
    return cls(served, served.ranker, served.ood, served.vendor_policy, served.floor.margin_log2)


@pytest.mark.parametrize("forget", ["floor", "clear_cache"])
def test_an_answer_computed_across_a_forget_is_not_kept(dev, forget):
    """Regression (an attack on the served path): an unseen problem's answer was stored after another thread had
    forgotten the answers meanwhile (a new floor, clear_cache), so an answer of the old floor, or of a model since
    forgotten, outlived the forget. The forget lands between the ranking and the store."""
    from costlearn.serve.answer import Answers
    from costlearn.serve.predictor import load_predictor
    served = load_predictor(dev, "gemm", "float32")
    shape = (31, 37, 41)

    class Racing(Answers):
        def finish(self, *args, **kw):                          # ranked, then forgotten, then worded and stored
            if forget == "floor":
                served.floor = served.floor                     # a new floor (the same values): new answers
            else:
                costlearn.serve.predictor.clear_cache()
            return super().finish(*args, **kw)
    served.use_answers(_answers_of(served, Racing))
    try:
        predict_best(*shape, device=dev)
    finally:
        served.floor = served.floor                             # its own answers again
    now = load_predictor(dev, "gemm", "float32")
    assert now.cached(shape + ("NN", 5, "none")) is None
    assert predict_best(*shape, device=dev) == served.predict_shape(*shape, "NN")


def test_an_answer_a_new_floor_overtook_is_not_kept_in_the_new_floors_results(dev):
    """Regression: a floor set while another thread answered a problem (ranked under the old floor, worded and
    decided under the new) left that answer in the new floor's results, to be served from then on. Now an answer
    is made by one floor's Answers from start to end and kept only by them."""
    from costlearn.serve.answer import Answers
    from costlearn.serve.predictor import load_predictor
    served = load_predictor(dev, "gemm", "float32")
    shape = (29, 37, 43)

    class Overtaken(Answers):
        def answer(self, *args, **kw):
            served.floor = served.floor                         # a new floor (the same values) meanwhile
            return super().answer(*args, **kw)
    old = _answers_of(served, Overtaken)
    served.use_answers(old)
    try:
        served.predict_shape(*shape, "NN", "none", 5)
    finally:
        served.floor = served.floor
    assert old.cached(shape + ("NN", 5, "none")) is not None           # kept by the answers it was made by
    assert served.cached(shape + ("NN", 5, "none")) is None             # not by the new floor's
    assert served.predict_shape(*shape, "NN", "none", 5) == served.predict(served.problem(*shape), 5)


def test_threads_served_at_once_get_the_answers_of_one(dev):
    """The ranker ranks in each thread's own context with the GIL released (ctypes' call): four threads asking
    the same unseen problems at once, the cache emptied under them, get one thread's answers."""
    import threading
    from costlearn.serve.predictor import load_predictor
    rng = np.random.default_rng(23)
    shapes = [tuple(int(v) for v in np.exp(rng.uniform(0, np.log(16384), 3)).astype(int).clip(1)) for _ in range(300)]
    served = load_predictor(dev, "gemm", "float32")
    served.clear_results()
    want = [predict_best(*s, device=dev) for s in shapes]
    served.clear_results()
    wrong = []

    def ask(offset):
        for i in range(len(shapes)):
            j = (i + offset) % len(shapes)
            if predict_best(*shapes[j], device=dev) != want[j]:
                wrong.append(shapes[j])
            if i % 100 == 99:
                served.clear_results()
    threads = [threading.Thread(target=ask, args=(o * 75,)) for o in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_a_top_k_beyond_64_bits_is_answered_with_every_candidate(dev):
    """Regression (an attack): a top_k of 2**63 or more was refused ("not a checked problem") where a top_k of
    2**62 was answered; it is answered, with every candidate ranked."""
    from costlearn.serve.predictor import load_predictor
    pred = load_predictor(dev, "gemm", "float32")
    for top_k in (2**63, 2**80):
        got = predict_best(64, 64, 64, device=dev, top_k=top_k)
        assert got == pred.predict_shape(64, 64, 64, "NN", "none", top_k) and len(got.top_k) > 5


class _Lying(str):
    """Hashes as ``other`` and equals anything."""

    def __new__(cls, text, other):
        obj = super().__new__(cls, text)
        obj.other = other
        return obj

    def __hash__(self):
        return hash(self.other)

    def __eq__(self, other):
        return True


def test_a_str_subclass_device_or_layout_never_answers_for_another(dev, model_dir, tmp_path):
    """Regression (an attack): a device given as a str subclass was kept in the loaded models' key, so one hashing
    as another device's name and equal to anything made a later plain call of that device get this model's
    answers; a layout such was cached and served to a plain "NN" call with its own text. Both are now their
    text."""
    import shutil
    from costlearn.core.problem import Problem
    from costlearn.model.store import ModelKey
    key = ModelKey.of(_Lying(dev, "other"), _Lying("gemm", "x"), "float32")
    assert all(type(v) is str for v in key) and key == (dev, "gemm", "float32")
    q = Problem(8, 8, 8, "float32", _Lying("NN", "NN"))
    assert type(q.layout) is str and q.layout == "NN"
    with pytest.raises(ValueError, match="layout='XY'"):
        Problem(8, 8, 8, "float32", _Lying("XY", "NN"))
    store = tmp_path / "store"
    shutil.copytree(model_dir, store / dev / "gemm" / "float32")
    shutil.copytree(model_dir, store / "devb" / "gemm" / "float32")
    mine = predict_best(8, 8, 8, device=_Lying(dev, "devb"), models_dir=str(store))
    assert predict_best(8, 8, 8, device="devb", models_dir=str(store)).device == "devb" != mine.device


@pytest.mark.skipif(not hasattr(__import__("signal"), "setitimer"), reason="POSIX interval timers")
def test_a_signal_handler_that_predicts_never_mixes_into_the_answer_it_interrupts(dev):
    """Regression (an attack): a signal handler predicting on the same thread reused the thread's ranking context
    between the ranking and the reading of its outputs, so 4 % of the interrupted answers carried the handler's
    problem's config and times, and stayed cached. A re-entered call gets a context of its own."""
    import signal
    from costlearn.serve.predictor import Predictor, load_predictor
    served = load_predictor(dev, "gemm", "float32")
    rng = np.random.default_rng(41)
    shapes = [tuple(int(v) for v in np.exp(rng.uniform(0, np.log(16384), 3)).astype(int).clip(1)) for _ in range(3000)]
    twin = Predictor(served.artifact.path)
    want = [twin.predict_shape(*s, "NN") for s in shapes]
    fired = []

    def handler(signum, frame):
        s = (int(rng.integers(1, 9000)), int(rng.integers(1, 9000)), int(rng.integers(1, 9000)))
        fired.append(predict_best(*s, device=dev))
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
    try:
        got = [predict_best(*s, device=dev) for s in shapes]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        served.floor = served.floor
    assert len(fired) > 50
    assert [i for i, (a, b) in enumerate(zip(got, want)) if a != b] == []


def test_a_missing_store_from_the_environment_is_named_as_such(tmp_path, monkeypatch):
    """Regression: a $COSTLEARN_MODELS naming no folder was reported as "models_dir ... is not a folder", though no
    models_dir was given: the message names the variable."""
    from costlearn.serve import predict as P
    monkeypatch.setenv("COSTLEARN_MODELS", str(tmp_path / "no-such-models"))
    P.clear_cache()
    try:
        with pytest.raises(ValueError, match=r"^\$COSTLEARN_MODELS '.*no-such-models' is not a folder"):
            P.predict_best(64, 64, 64)
        with pytest.raises(ValueError, match=r"^models_dir '.*elsewhere' is not a folder"):
            P.predict_best(64, 64, 64, models_dir=tmp_path / "elsewhere")
        # the same missing folder given explicitly is named as given (it was named as the variable)
        with pytest.raises(ValueError, match=r"^models_dir '.*no-such-models' is not a folder"):
            P.predict_best(64, 64, 64, models_dir=tmp_path / "no-such-models")
    finally:
        monkeypatch.delenv("COSTLEARN_MODELS", raising=False)
        P.clear_cache()


def test_the_api_says_when_the_only_model_is_another_devices(model_dir, tmp_path, monkeypatch):
    """Regression: `predict_best` with no device named answered from the store's only model, another machine's,
    without a word (the command line prints a note). A RuntimeWarning says so, once per model in the process; a
    device named, or no device recorded in the user cache, says nothing."""
    import json
    import warnings
    from costlearn.serve import predict as P
    from costlearn.serve import predictor
    monkeypatch.setenv("COSTLEARN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(predictor, "_SAID_ANOTHER_DEVICE", set())
    store = model_dir.parents[2]
    P.clear_cache()
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            P.predict_best(64, 64, 64, models_dir=store)                 # nothing recorded: nothing said
        assert not said
        (tmp_path / "cache").mkdir(exist_ok=True)
        (tmp_path / "cache" / "local_device.json").write_text(json.dumps({"slug": "other-gpu", "name": "Other GPU"}))
        P.clear_cache()
        monkeypatch.setattr(predictor, "_SAID_ANOTHER_DEVICE", set())
        with pytest.warns(RuntimeWarning, match=r"only gemm/float32 model answers, .*this machine's device is "
                                                r"Other GPU \(other-gpu"):
            P.predict_best(64, 64, 64, models_dir=store)
        P.clear_cache()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            P.predict_best(64, 64, 128, models_dir=store)                # once per model in the process
            P.predict_best(64, 64, 64, device=model_dir.parents[1].name, models_dir=store)   # a device named
        assert not said
    finally:
        P.clear_cache()


def test_a_hostile_record_of_this_machines_device_is_no_record(model_dir, tmp_path, monkeypatch):
    """The device note reads the user cache's local_device.json at a model's first load: a FIFO there (whose opening
    would wait for a writer), a folder, text that is not JSON or a JSON list is no record, and the answer comes."""
    import os
    import signal
    from costlearn.core.keyed_cache import recorded_local_device
    from costlearn.serve import predict as P
    from costlearn.serve import predictor
    monkeypatch.setenv("COSTLEARN_CACHE", str(tmp_path))
    record = tmp_path / "local_device.json"
    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("waited on the record"))   # not an OSError
    try:
        for make in (lambda: os.mkfifo(record), lambda: record.mkdir(), lambda: record.write_text("{not json"),
                     lambda: record.write_text('["a", "list"]'), lambda: record.write_text("[" * 200_000),
                     lambda: record.write_text('{"slug": "x"}')):          # nested past the recursion limit; no name
            make()
            signal.alarm(5)
            assert recorded_local_device() is None
            monkeypatch.setattr(predictor, "_SAID_ANOTHER_DEVICE", set())
            P.clear_cache()
            assert P.predict_best(64, 64, 64, models_dir=model_dir.parents[2]).config is not None
            signal.alarm(0)
            os.rmdir(record) if record.is_dir() else record.unlink()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        P.clear_cache()
