import json
import re
import subprocess
import sys
import time

import pytest

from costlearn.cli import main
from costlearn.serve.predictor import Predictor


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("collect", "train", "predict", "evaluate", "run", "dispatch", "tuning-db", "compact", "features",
                "space"):
        assert cmd in out


def test_predict_command(capsys, model_dir):
    assert main(["predict", "1", "256", "256", "--model", model_dir.parents[1].name, "--top-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "M=1 N=256 K=256" in out and " 2. " in out


def test_predict_command_bad_shape_is_an_error_not_a_traceback(capsys, model_dir):
    assert main(["predict", "0", "1", "1", "--model", model_dir.parents[1].name]) == 2
    assert "M=0" in capsys.readouterr().err


def test_predict_command_names_the_bad_shape_among_several(capsys, model_dir):
    """Regression (found by a new user): `predict 8 768 768 1x0x5` said only "N=0", and a layout the family
    cannot serve came back worded for the Python API ("problems[0]: ...")."""
    assert main(["predict", "8", "768", "768", "1x0x5", "--model", model_dir.parents[1].name]) == 2
    assert "shape 1x0x5: N=0" in capsys.readouterr().err
    assert main(["predict", "8", "768", "768", "--layout", "NT", "--model", model_dir.parents[1].name]) == 2
    err = capsys.readouterr().err
    assert "shape 8x768x768: layout='NT'" in err and "problems[" not in err


def test_predict_command_answers_several_shapes_in_order(capsys, model_dir):
    assert main(["predict", "8", "768", "768", "64x64x64", "8", "768", "768", "--model",
                 model_dir.parents[1].name, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["m"], r["n"], r["k"]) for r in rows] == [(8, 768, 768), (64, 64, 64), (8, 768, 768)]
    assert rows[0] == rows[2]
    assert {r["model"] for r in rows} == {Predictor(model_dir).source}         # which model answered


def test_import_without_cupy_or_pyopencl():
    code = ("import sys; sys.modules['cupy'] = None; sys.modules['pyopencl'] = None\n"
            "import costlearn, costlearn.serve.predict, costlearn.collect.loop, costlearn.learn.evaluate\n"
            "from costlearn.collect.backends import get_backend, BackendUnavailable\n"
            "try:\n    get_backend('cuda')\nexcept BackendUnavailable as e:\n    print('HINT', e)\n"
            "try:\n    get_backend('quantum')\nexcept ValueError as e:\n    print('UNKNOWN', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HINT" in out.stdout and "pip install" in out.stdout
    assert "UNKNOWN" in out.stdout and "opencl" in out.stdout


@pytest.mark.parametrize("argv, says", [
    (["predict", "1", "2", "3", "4"], "shapes '1 2 3 4': 1 number(s) left over"),
    (["train", "--data", "/nonexistent/costlearn"], "no such folder"),
    (["compact", "/nonexistent/costlearn"], "does not exist"),
    (["space", "--preset", ""], "unknown device preset"),
])
def test_cli_errors_are_one_line_and_exit_2(capsys, argv, says):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["collect", "--budget", "nan"], ["collect", "--budget", "inf"],
                                  ["collect", "--pool", "0"], ["evaluate", "--random-shapes", "-1"],
                                  ["predict", "1", "1", "1", "--top-k", "0"], ["collect", "--target-rse", "1.5"],
                                  ["collect", "--max-rounds", "0"], ["recheck", "--random-shapes", "0"]])
def test_cli_refuses_bad_numbers_before_doing_anything(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert argv[-1] in err and f"argument {argv[-2]}" in err            # named by the flag the user typed


def test_predict_checks_every_triple_before_printing(capsys, model_dir):
    assert main(["predict", "1", "1", "1", "0", "1", "1", "--model", model_dir.parents[1].name]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "M=0" in captured.err


def test_collection_runs_without_xgboost():
    """The GPU machines have no xgboost: collection, compaction and the GPU
    scripts must not import it."""
    code = ("import sys; sys.modules['xgboost'] = None\n"
            "import costlearn.collect.loop, costlearn.collect.dataset, costlearn.cli\n"
            "from costlearn.cli.common import parse_shapes\n"
            "print(parse_shapes(['1,4096,4096']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "(1, 4096, 4096)" in out.stdout


@pytest.mark.parametrize("bad, says", [("1,2", "M,N,K"), ("1,x,3", "MxNxK"), ("0,1,1", "M=0")])
def test_collect_shapes_option_rejects_bad_shapes(capsys, bad, says):
    assert main(["collect", "--device", "opencl", "--shapes", bad, "--budget", "1"]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.opencl
@pytest.mark.slow
def test_costlearn_run_end_to_end(tmp_path, capsys):
    """Regression: `costlearn run` (scripts/run_main.sh) crashed at its predict
    step once predict gained --measure-top-k and --tuning-db, which `run` did
    not set."""
    from conftest import HAS_OPENCL
    if not HAS_OPENCL:
        pytest.skip("no OpenCL device")
    # Fixed shapes and a generous budget: the rows collected do not depend on
    # how long compilation takes on a cold cache (a 10 s budget once left too
    # few rows for `train` on a loaded machine).
    shapes = ["64,64,64", "96,80,72", "128,64,96", "72,120,64", "100,100,100", "64,128,80", "80,96,128",
              "120,72,88", "90,110,70", "128,128,64", "112,88,104", "76,68,116"]
    rc = main(["run", "--device", "opencl", "--budget", "300", "--pool", "6", "--shapes", *shapes,
               "--eval-random-shapes", "0", "--eval-budget", "20", "--data", str(tmp_path / "data"),
               "--models", str(tmp_path / "models")])
    cap = capsys.readouterr()
    out = cap.out
    assert rc == 0, out[-3000:] + cap.err[-2000:]
    assert "== predict" in out and "M=1 N=1024 K=1024" in out and "== done in" in out
    assert "| xgboost |" in out


@pytest.mark.parametrize("command", ["collect", "run"])
def test_a_dtype_the_family_does_not_run_is_refused_before_a_device_is_opened(capsys, tmp_path, command):
    """Regression: `collect --dtype float16` opened the device and printed
    its plan before refusing; with --device cuda and no GPU the user was told
    about CUDA instead of the dtype."""
    assert main([command, "--device", "cuda", "--dtype", "float16", "--data", str(tmp_path / "d"),
                 "--budget", "1"]) == 2
    captured = capsys.readouterr()
    assert "dtype='float16': the 'gemm' family supports ['float32']" in captured.err
    assert "device:" not in captured.err and not (tmp_path / "d").exists()


def test_a_setting_the_model_does_not_take_names_what_it_takes(capsys, tmp_path, dataset_dir):
    """Regression: `train --model roofline --feature-set raw` said
    'RooflineModel() takes no arguments'."""
    assert main(["train", "--data", str(dataset_dir), "--models", str(tmp_path), "--learner", "roofline",
                 "--feature-set", "raw"]) == 2
    err = capsys.readouterr().err
    assert "model 'roofline' takes no setting 'feature_set' (CLI: --feature-set); it has no settings" in err
    assert not any(tmp_path.iterdir())


def test_every_command_takes_one_shape_syntax(capsys, model_dir):
    """Shape arguments differed: predict took M N K, space --shape M N K, features --shape
    M,N,K, collect --shapes M,N,K; each now takes all three forms."""
    from costlearn.cli.common import parse_shapes
    want = [(1, 1024, 1024), (5, 6, 7)]
    for tokens in (["1", "1024", "1024", "5", "6", "7"], ["1x1024x1024", "5,6,7"], ["1,1024,1024", "5", "6", "7"],
                   ["1X1024X1024", "5x6x7"]):
        assert parse_shapes(tokens) == want, tokens
    for tokens, says in ((["1", "2"], "left over"), (["1x2"], "1x4096x4096"), (["1", "2", "3x4x5"], "give M N K"),
                         ([], "no shape")):
        with pytest.raises(ValueError, match=says):
            parse_shapes(tokens)
    with pytest.raises(ValueError, match="one shape wanted"):
        parse_shapes(["1x2x3", "4x5x6"], one=True)
    dev = model_dir.parents[1].name
    assert main(["predict", "1x1024x1024", "--model", dev]) == 0
    a = capsys.readouterr().out
    assert main(["predict", "1", "1024", "1024", "--model", dev]) == 0
    assert capsys.readouterr().out == a
    outs = []
    for shape in (["16x16x16"], ["16", "16", "16"], ["16,16,16"]):
        assert main(["space", "--preset", "a100", "--shape", *shape]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] == outs[2]


def test_space_shows_the_presets_numbers_and_their_sources(capsys):
    """`space --preset` promised the preset's numbers and sources."""
    assert main(["space", "--preset", "h200"]) == 0
    out = capsys.readouterr().out
    assert "132 multiprocessors" in out and "227 KiB opt-in" in out and "bfloat16 989.4" in out
    assert "[CG] NVIDIA CUDA C++ Programming Guide" in out and "[H200] NVIDIA H200" in out


def test_an_ambiguous_model_is_named_in_cli_words(tmp_path, capsys, model_dir):
    """`predict` with two devices' models said `device=None is
    ambiguous` (the Python argument), not which --model to pass."""
    import shutil
    store = tmp_path / "models"
    for dev in ("dev-a", "dev-b"):
        shutil.copytree(model_dir, store / dev / model_dir.parent.name / model_dir.name)
    assert main(["predict", "1", "64", "64", "--models", str(store)]) == 2
    err = capsys.readouterr().err
    assert "no --model given" in err and "--model dev-a" in err and "device=None" not in err
    assert main(["predict", "1", "64", "64", "--models", str(store), "--model", "dev-b"]) == 0


def _record_local(monkeypatch, tmp_path, slug):
    import json
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    (cache / "local_device.json").write_text(json.dumps(dict(slug=slug, name=f"Device {slug}", api="opencl")))
    monkeypatch.setenv("COSTLEARN_CACHE", str(cache))


def test_commands_that_read_a_model_default_to_this_machines_and_say_when_it_is_another(
        tmp_path, capsys, model_dir, monkeypatch):
    """One defaults rule: the local device's model if the store has
    one, else the only one; a model of another device (its sidecar's) is named as such."""
    import json
    import shutil
    from costlearn.core.device import preset
    store = tmp_path / "models"
    here = model_dir.parents[1].name                                    # the committed model's device
    for dev in (here, "h100"):
        shutil.copytree(model_dir, store / dev / model_dir.parent.name / model_dir.name)
    side_path = store / "h100" / model_dir.parent.name / model_dir.name / "model.json"
    side = json.loads(side_path.read_text())
    side_path.write_text(json.dumps(dict(side, device=preset("h100").to_dict())))     # an H100's model
    _record_local(monkeypatch, tmp_path, here)
    assert main(["predict", "1", "64", "64", "--models", str(store)]) == 0
    cap = capsys.readouterr()
    assert f"gemm model {here}" in cap.out and "another device" not in cap.err
    assert f"model: {store / here / 'gemm' / 'float32'}" in cap.err         # which store it came from
    assert main(["predict", "1", "64", "64", "--models", str(store), "--model", "h100"]) == 0
    assert f"the h100 model was trained on another device than this machine's (Device {here}" \
        in capsys.readouterr().err
    _record_local(monkeypatch, tmp_path, "dev-c")                # not in the store, two models: name them
    assert main(["predict", "1", "64", "64", "--models", str(store)]) == 2
    assert "--model h100" in capsys.readouterr().err


def test_a_data_root_of_several_devices_defaults_to_this_machines(tmp_path, capsys, monkeypatch):
    from costlearn.cli.common import dataset_folder
    for dev in ("dev-a", "dev-b"):
        (tmp_path / "data" / dev).mkdir(parents=True)
        (tmp_path / "data" / dev / "device.json").write_text("{}")
    _record_local(monkeypatch, tmp_path, "dev-a")
    assert dataset_folder(str(tmp_path / "data")) == tmp_path / "data" / "dev-a"
    assert "using this machine's" in capsys.readouterr().err
    _record_local(monkeypatch, tmp_path, "dev-z")
    with pytest.raises(ValueError, match=r"holds datasets for \['dev-a', 'dev-b'\]"):
        dataset_folder(str(tmp_path / "data"))


def test_out_of_distribution_predictions_print_as_guesses(capsys, model_dir):
    """4096^3 was printed with the confidence of an in-envelope shape."""
    dev = model_dir.parents[1].name
    assert main(["predict", "4096x4096x4096", "64x64x64", "--model", dev]) == 0
    first, *rest = capsys.readouterr().out.split("M=64")
    assert "GUESS, out of distribution" in first and first.count("(guess)") == 5
    assert "GUESS" not in rest[0] and "(guess)" not in rest[0]


@pytest.mark.slow
def test_train_says_what_it_read_and_when_it_replaces_a_model(tmp_path, capsys):
    """`train` silently rewrote the committed model and did
    not name the data folder or device."""
    from inductor_fixture import DEVICE, build_models
    build_models(tmp_path)                                      # a first model in tmp/models
    argv = ["train", "--data", str(tmp_path / "data" / DEVICE), "--models", str(tmp_path / "models")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"rows of {tmp_path / 'data' / DEVICE} (device {DEVICE})" in out
    assert "(replaced the model that was there)" in out


def test_predict_refuses_an_unsupported_dtype_and_an_unknown_model_without_a_false_note(capsys, model_dir):
    assert main(["predict", "1x64x64", "--dtype", "float16"]) == 2
    assert "dtype='float16': the 'gemm' family supports ['float32']" in capsys.readouterr().err
    assert main(["predict", "1x64x64", "--model", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "no model for device='nosuch'" in err and "trained on another device" not in err


def test_predict_says_where_the_tuning_database_is_and_what_came_from_it(tmp_path, capsys, model_dir):
    """--measure-top-k / --tuning-db never said where the entry
    went, and an answer read back from the database looked like a fresh one."""
    dev = model_dir.parents[1].name
    db = tmp_path / "tuning.sqlite"
    argv = ["predict", "64x64x64", "1x64x64", "--model", dev, "--tuning-db", str(db)]
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert f"tuning database {db}: 2 answers recorded, 0 read from it" in cap.err
    assert "from the tuning database" not in cap.out
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert f"tuning database {db}: 0 answers recorded, 2 read from it" in cap.err
    assert cap.out.count("(from the tuning database, an earlier answer)") == 2


def test_a_model_of_this_machines_class_but_another_device_is_named(tmp_path, capsys, model_dir, monkeypatch):
    """The other-device note compared class names only, so a model
    from a CPU with other core and cache counts (same PoCL name, one slug)
    passed for this machine's own."""
    import json

    from costlearn.model.artifact import load as load_artifact
    dev = model_dir.parents[1].name
    spec = load_artifact(model_dir).spec.to_dict()
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("COSTLEARN_CACHE", str(cache))
    record = dict(slug=dev, name=spec["name"], api=spec["api"], spec=spec)
    (cache / "local_device.json").write_text(json.dumps(record))
    assert main(["predict", "64x64x64", "--model", dev]) == 0
    assert "note:" not in capsys.readouterr().err                        # the very device: nothing to say
    record["spec"] = dict(spec, multiprocessors=spec["multiprocessors"] * 32, driver_version="9.9")
    (cache / "local_device.json").write_text(json.dumps(record))
    assert main(["predict", "64x64x64", "--model", dev]) == 0
    err = capsys.readouterr().err
    assert "of this machine's class but not the same device" in err
    assert f"multiprocessors {spec['multiprocessors']} != {spec['multiprocessors'] * 32}" in err
    assert "driver_version" in err


def test_the_device_note_follows_the_sidecar_not_the_folder_name(tmp_path, capsys, model_dir, monkeypatch):
    """Regression (an attack): the other-device note compared this machine's device with the model's folder name,
    so this machine's model stored under h100/ was "trained on another device than this machine's", and an H100's
    model stored under this machine's folder name "of this machine's class". The note reads the sidecar's device."""
    import json
    import shutil
    from costlearn.core.device import preset
    from costlearn.model.artifact import load as load_artifact
    spec = load_artifact(model_dir).spec
    here = spec.slug
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("COSTLEARN_CACHE", str(cache))
    (cache / "local_device.json").write_text(json.dumps(dict(slug=here, name=spec.name, api=spec.api,
                                                             spec=spec.to_dict())))
    store = tmp_path / "models"
    for dev in (here, "h100"):
        shutil.copytree(model_dir, store / dev / "gemm" / "float32")
    swapped = store / here / "gemm" / "float32" / "model.json"           # an H100's model in this machine's folder
    swapped.write_text(json.dumps(dict(json.loads(swapped.read_text()), device=preset("h100").to_dict())))
    assert main(["predict", "64x64x64", "--models", str(store), "--model", "h100"]) == 0
    cap = capsys.readouterr()
    assert "another device" not in cap.err and "machine's class" not in cap.err      # this machine's own model
    assert "GUESS" in cap.out and "the h100 model's sidecar records training on " + spec.name in cap.out
    assert main(["predict", "64x64x64", "--models", str(store), "--model", here]) == 0
    cap = capsys.readouterr()
    assert f"the {here} model was trained on another device than this machine's ({spec.name}, {here}): its " \
           f"sidecar records {preset('h100').name} (h100)" in cap.err and "machine's class" not in cap.err


def test_device_differences_name_the_identity_fields_only():
    from costlearn.core.device import preset
    a = preset("h200")
    import dataclasses
    assert a.differences(a) == []
    b = dataclasses.replace(a, memory_bandwidth_gbps=1.0, multiprocessors=a.multiprocessors - 2)
    assert b.differences(a) == [f"multiprocessors {a.multiprocessors - 2} != {a.multiprocessors}"]
    with pytest.raises(TypeError, match="other"):
        a.differences("h200")


def test_every_import_format_is_a_registered_importer_under_its_own_name():
    from costlearn.interop import EXPORTERS, IMPORT_FORMATS, IMPORTERS, Importer
    assert IMPORT_FORMATS == IMPORTERS.names() == ("inductor", "inductor-lut", "kernel-tuner")
    for name in IMPORTERS.names():
        imp = IMPORTERS.get(name)()
        assert isinstance(imp, Importer) and imp.name == name
    assert all(callable(EXPORTERS.get(name)) for name in EXPORTERS.names())


def _options(parser):
    """{command: {option string: argparse Action}} of every subcommand, hidden old spellings left out."""
    import argparse
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {o: a for a in p._actions for o in a.option_strings if a.help != argparse.SUPPRESS}
            for name, p in sub.choices.items()}


def test_each_flag_means_one_thing_in_every_command():
    """Regression: --model was the model's device folder in predict, dispatch, evaluate but the learner in train;
    --device the backend in collect, predict, evaluate but the GPU preset in import and export; --shapes shapes
    in collect, a count in evaluate and recheck, a file in export; --dtype one value, several or repeated."""
    from costlearn.collect.backends import measuring_backends
    from costlearn.cli import build_parser
    from costlearn.core.device import PRESETS
    from costlearn.core.dtypes import dtype_names
    from costlearn.model import MODELS
    opts = _options(build_parser())
    for cmd, o in opts.items():
        if "--device" in o:
            assert set(o["--device"].choices) == {"auto", *measuring_backends()}, cmd
        if "--model" in o:
            assert o["--model"].choices is None and "model device folder" in o["--model"].help, cmd
        if "--learner" in o:
            assert set(o["--learner"].choices) == set(MODELS.names()), cmd
        if "--preset" in o:
            assert o["--preset"].choices is None and any(n in o["--preset"].help for n in PRESETS.names()), cmd
        if "--dtype" in o:
            a = o["--dtype"]
            assert set(a.choices) == set(dtype_names()), cmd
            assert (a.nargs, type(a).__name__) in ((None, "_StoreAction"), ("+", "_ExtendAction")), cmd
        if "--shapes" in o:
            assert o["--shapes"].nargs == "+" and o["--shapes"].type is None, cmd      # shapes: M N K tokens
    assert "--learner" in opts["train"] and "--model" not in opts["train"]
    assert "--preset" in opts["import"] and "--device" not in opts["import"] and "--device" not in opts["export"]
    assert {cmd for cmd, o in opts.items() if o.get("--dtype") and o["--dtype"].nargs == "+"} == \
        {"train", "study", "export", "transfer", "info", "models"}


def test_old_flag_spellings_work_for_one_release_with_a_note(dataset_dir, tmp_path, capsys):
    from costlearn.cli import build_parser, main
    args = build_parser().parse_args(["train", "--model", "roofline"])
    assert args.learner == "roofline"
    args = build_parser().parse_args(["import", "inductor", "x.txt", "--device", "a100"])
    assert args.preset == "a100"
    args = build_parser().parse_args(["export", "inductor-lut", "--device", "a100", "--shapes", "s.txt", "--out", "x"])
    assert (args.model, args.shapes_file) == ("a100", "s.txt")
    args = build_parser().parse_args(["recheck", "--shapes", "3", "--configs", "2"])
    assert (args.random_shapes, args.configs_per_shape) == (3, 2)
    assert build_parser().parse_args(["evaluate", "--shapes", "7"]).random_shapes == 7
    assert main(["train", "--data", str(dataset_dir), "--models", str(tmp_path), "--model", "roofline",
                 "--feature-set", "raw"]) == 2           # roofline takes no feature set: it ran as --learner
    err = capsys.readouterr().err
    assert "note: `costlearn train --model` is now `--learner`" in err and "roofline" in err
    assert main(["import", "inductor", str(tmp_path / "x.txt"), "--data", str(tmp_path)]) == 2
    assert "--preset is required" in capsys.readouterr().err


def test_a_cache_record_of_other_pocl_settings_is_not_another_device(tmp_path, capsys, model_dir, monkeypatch):
    """Regression: `costlearn run` said its just-trained model's device was "of this machine's class but not
    the same device": the user cache held the record another process had left (POCL_AFFINITY 0, host_cpu None;
    the model 1, 1). Settings belong to the process that opened the device: a record is compared without them,
    and `run` compares with the device it opened."""
    import dataclasses
    import json

    from costlearn.cli.common import model_device
    from costlearn.core.device import DeviceSpec
    from costlearn.model.artifact import load as load_artifact
    dev = model_dir.parents[1].name
    spec = load_artifact(model_dir).spec
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("COSTLEARN_CACHE", str(cache))
    other = dict(spec.to_dict(), extra={"settings": {"POCL_MAX_PTHREAD_COUNT": 1, "POCL_AFFINITY": "0",
                                                      "host_cpu": None}})
    (cache / "local_device.json").write_text(json.dumps(dict(slug=dev, name=spec.name, api=spec.api, spec=other)))
    assert main(["predict", "64x64x64", "--model", dev]) == 0
    assert "note:" not in capsys.readouterr().err
    models = model_dir.parents[2]
    assert model_device(dev, "gemm", "float32", models, here=spec) == dev
    assert "note:" not in capsys.readouterr().err                      # the device this process opened: the same
    assert model_device(dev, "gemm", "float32", models, here=DeviceSpec.from_dict(other)) == dev
    assert "settings" in capsys.readouterr().err                     # ... and one opened under other settings
    moved = dataclasses.replace(spec, driver_version="9.9")
    model_device(dev, "gemm", "float32", models, here=moved)
    assert "the model's value, then this machine's" in capsys.readouterr().err


def test_the_vendor_floor_line_reads_as_a_sentence_when_nothing_is_flagged(tmp_path, capsys):
    """Regression: train printed "flagged (vendor kept) where the model's held-out top-1 regret is never."."""
    import json
    from types import SimpleNamespace

    from costlearn.cli.train import _print_trained
    (tmp_path / "model.json").write_text(json.dumps({}))
    floor = dict(unsure_regret=None, margin_log2=0.0, vendor_near_min=0.1,
                 calibration=dict(rule_geomean=0.0135, argmin_geomean=0.0375, vendor_geomean=0.0136))
    _print_trained(SimpleNamespace(path=tmp_path / "model.json", holdout={}, floor=floor, data_coverage=None))
    out = capsys.readouterr().out
    assert "regret is never" not in out and "no problem is flagged for the model's held-out regret. On" in out
    _print_trained(SimpleNamespace(path=tmp_path / "model.json", holdout={}, floor=dict(floor, unsure_regret=0.2),
                                   data_coverage=None))
    assert "held-out top-1 regret there is above 20%. On" in capsys.readouterr().out
    transfer = dict(near_log2=0.5, intercept=0.12, slope=0.1, spread_log2=0.3, problems=82)
    coverage = {"TN": dict(problems=27, m=[8, 115072], n=[8, 76672], k=[2, 92800], reference=33, tile=0, vendor=33,
                           has_vendor=True, far=33, sure=0, chosen_by={"vendor_floor": 33})}
    _print_trained(SimpleNamespace(path=tmp_path / "model.json", holdout={}, dtype="float16",
                                   floor=dict(floor, estimate=[0.0, 1.0], transfer=transfer), data_coverage=coverage))
    out = capsys.readouterr().out
    assert "farther than 0.5 doublings from every training shape, where the estimate extrapolates, a tile config " \
           "only where +0.12 + 0.10 x the estimate" in out
    assert "float16 TN: 27 problems (M 8-115072, N 8-76672, K 2-92800); of 33 real-model layer shapes: 0 answered " \
           "with a tile config, 33 with the vendor library, 33 farther than 0.5 doublings from every measured shape " \
           "(the vendor floor's reach, decided by what leaving regions out measured); 0 answered sure, 33 flagged " \
           "as guesses (`costlearn predict M N K` says why)" in out
    from costlearn.learn.coverage import coverage_lines        # a family without a vendor: no vendor words
    line = coverage_lines({"NN": dict(coverage["TN"], tile=33, vendor=0, sure=2, has_vendor=False)}, "float32", None)
    assert line == ["  float32 NN: 27 problems (M 8-115072, N 8-76672, K 2-92800); of 33 real-model layer shapes: 2 "
                    "answered sure, 31 flagged as guesses (`costlearn predict M N K` says why)"]
    own = dict(transfer, intercepts={"TN": 0.31, "NN": -0.05})          # a layout's own intercept is printed
    _print_trained(SimpleNamespace(path=tmp_path / "model.json", holdout={}, dtype="float16",
                                   floor=dict(floor, estimate=[0.0, 1.0], transfer=own), data_coverage=None))
    assert "a tile config only where a (-0.05 NN, +0.31 TN, +0.12 any other layout) + 0.10 x the estimate" in \
        capsys.readouterr().out


def test_data_names_a_root_or_a_device_folder_in_every_command(tmp_path):
    """Regression: `collect --data out/data/<device>` wrote into out/data/<device>/<device>/, where a later
    `train --data out/data` never looked: --data was a root in collect, run and import, a folder in others."""
    from costlearn.collect.dataset import device_dataset_folder
    from costlearn.interop import InteropError
    from costlearn.interop.common import device_folder
    from costlearn.core.device import preset
    root = tmp_path / "data"
    assert device_dataset_folder(root, "a100") == root / "a100"                  # a root (even a new one)
    assert device_dataset_folder(root / "a100", "a100") == root / "a100"        # the device's own folder
    spec = preset("h100")
    folder = device_folder(root, spec)                                          # import: writes device.json
    assert folder == root / "h100" and device_dataset_folder(folder, "h100") == folder
    assert device_folder(folder, spec) == folder                                # its folder, not h100/h100
    with pytest.raises(ValueError, match="dataset folder of device 'h100', not of this one .'a100'."):
        device_dataset_folder(folder, "a100")
    with pytest.raises(InteropError, match="dataset folder of device 'h100'"):
        device_folder(folder, preset("a100"))


def test_export_of_a_dataset_refuses_the_lookup_tables_flags(tmp_path, dataset_dir, capsys):
    """Regression: `export kernel-tuner --dtype float16` and `--model a100` were silently ignored."""
    assert main(["export", "kernel-tuner", "--data", str(dataset_dir), "--dtype", "float16",
                 "--out", str(tmp_path / "kt")]) == 2
    assert "--dtype: is inductor-lut's; export kernel-tuner writes every valid measurement" in capsys.readouterr().err
    assert not (tmp_path / "kt").exists()


def test_a_negative_shape_is_named_not_taken_for_an_option(capsys):
    """Regression: `predict -1x2x3` said "the following arguments are required: SHAPE"; then it did not say which
    extent (`predict 0 1 1` says M=0)."""
    assert main(["predict", "-1x2x3"]) == 2
    assert "shape -1x2x3: M=-1; extents must be integers >= 1" in capsys.readouterr().err
    assert main(["predict", "-7,2,3"]) == 2
    assert "shape -7,2,3: M=-7;" in capsys.readouterr().err


def test_more_old_spellings_map_to_their_new_flags():
    from costlearn.cli import build_parser
    assert build_parser().parse_args(["tuning-db", "--path", "x.sqlite"]).tuning_db == "x.sqlite"
    assert build_parser().parse_args(["run", "--eval-shapes", "3"]).eval_random_shapes == 3


def test_study_of_a_folder_without_its_default_family_names_the_flag(dataset_dir, tmp_path, capsys):
    """Regression: `study --data out/data` on collected gemm rows said only "holds no valid triton_mm rows"."""
    assert main(["study", "--data", str(dataset_dir), "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "CLI: --family, whose default is triton_mm); it holds ['gemm']" in err


def test_an_old_spelling_given_a_value_of_another_meaning_names_the_new_flag(capsys):
    """Regression (new user): `evaluate --shapes 64x64x64` said "'64x64x64' is not an integer" and `train --model
    DIR` listed the learners, neither naming what the flag had become."""
    for argv, says in ((["evaluate", "--shapes", "64x64x64"], "here --shapes is the old spelling of --random-shapes"),
                       (["train", "--model", "/tmp/m"], "here --model is the old spelling of --learner (choose from")):
        with pytest.raises(SystemExit):
            main(argv)
        assert says in capsys.readouterr().err


def test_an_error_names_the_flag_as_the_user_typed_it(dataset_dir, tmp_path, capsys):
    assert main(["export", "kernel-tuner", "--data", str(dataset_dir), "--device", "a100", "--out",
                 str(tmp_path / "kt")]) == 2
    assert "error: --device: is inductor-lut's" in capsys.readouterr().err
    assert main(["predict", "-1x2x3"]) == 2
    assert "costlearn predict: error: shape -1x2x3" in capsys.readouterr().err


def test_collect_shapes_take_a_shapes_file(tmp_path):
    """`collect --shapes FILE` reads a shapes file (export inductor-lut's format), in file order, repeats
    dropped, mixed with shapes; a bad line is named; other commands still take shapes only."""
    from costlearn.cli.common import parse_shapes
    from costlearn.interop.common import InteropError
    f = tmp_path / "mine.txt"
    f.write_text("# my model\n128 768 768 float16\n128 3072 768 float16 NN\n128 768 768 bfloat16\n")
    assert parse_shapes([str(f), "1x2x3"], files=True) == [(128, 768, 768), (128, 3072, 768), (1, 2, 3)]
    with pytest.raises(ValueError, match="give M N K"):
        parse_shapes([str(f)])
    f.write_text("128 768\n")
    with pytest.raises(InteropError, match=r"mine.txt:1: '128 768'; each line is 'M N K dtype \[layout\]'"):
        parse_shapes([str(f)], files=True)


def test_collect_and_run_measure_real_models_shapes_by_default():
    """A random-shape log taught a model little about the shapes compilers ask (a median N of 256-768): collect
    and run default to the prior (real models' layers with a quarter log-uniform); given shapes are measured as
    given; a strategy named is kept."""
    from costlearn.cli.collect import resolve_strategy
    from costlearn.cli import build_parser
    for command in ("collect", "run"):
        assert build_parser().parse_args([command]).strategy is None
    assert resolve_strategy(None, None) == "prior"
    assert resolve_strategy(None, [(64, 64, 64)]) == "random"
    assert resolve_strategy("active", None) == "active" and resolve_strategy("prior", [(1, 2, 3)]) == "prior"


def _no_work(*args, **kwargs):
    raise AssertionError("the work started before its output was checked")


@pytest.mark.parametrize("argv, patched, says", [
    (["train", "--data", "DATA", "--models", "FILE"], "costlearn.learn.train.train",
     "--models FILE is a file, not a folder"),
    (["evaluate", "--report", "FILE/r.md"], "costlearn.cli.evaluate.device_backend",
     "--report FILE/r.md: FILE is a file"),
    (["evaluate", "--plots", "FILE"], "costlearn.cli.evaluate.device_backend", "--plots FILE is a file, not a folder"),
    (["collect", "--data", "FILE"], "costlearn.cli.collect.device_backend", "--data FILE is a file, not a folder"),
    (["dispatch", "--m", "1:64", "--n", "64:128", "--k", "64:128", "--out", "FILE"],
     "costlearn.serve.dispatch.fit_dispatch", "--out FILE is a file, not a folder"),
    (["predict", "48", "64", "96", "--measure-top-k", "2", "CACHE"], "costlearn.cli.predict.device_backend",
     "COSTLEARN_CACHE=FILE is a file, not a folder"),
    (["predict", "48", "64", "96", "--tuning-db", "FILE/t.sqlite"], "costlearn.cli.predict.predict_stage",
     "--tuning-db FILE/t.sqlite: FILE is a file"),
    (["study", "--data", "DATA", "--out", "FILE/x"], "costlearn.learn.study.leave_one_log_out",
     "--out FILE/x: FILE is a"),
    (["run", "--models", "FILE"], "costlearn.cli.run.device_backend", "--models FILE is a file, not a folder"),
])
def test_an_output_that_cannot_be_written_is_refused_before_any_work_naming_its_flag(
        monkeypatch, capsys, tmp_path, dataset_dir, argv, patched, says):
    """Regression: `train --models /etc/passwd` failed after a whole training, a measuring `evaluate --report
    /proc/nope/r.md` after its budget; `collect --data`, `dispatch --out` and COSTLEARN_CACHE naming a file gave bare
    errno strings."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder\n")
    if "CACHE" in argv:
        argv = [a for a in argv if a != "CACHE"]
        monkeypatch.setenv("COSTLEARN_CACHE", str(blocker))
        monkeypatch.delenv("COSTLEARN_TUNING_DB", raising=False)
    argv = [a.replace("FILE", str(blocker)).replace("DATA", str(dataset_dir)) for a in argv]
    monkeypatch.setattr(patched, _no_work)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and says.replace("FILE", str(blocker)) in err[-1] and "Errno" not in err[-1], err


def test_train_says_when_its_model_is_no_better_than_a_baseline_it_printed(monkeypatch, capsys, tmp_path, dataset_dir):
    """Regression: a model of 187 rows, held-out xgboost 107.7 % top-1 regret against random's 50.0 %, was saved
    without a word. The warning names the hold-out too: 311,188 A100 rows held out by log were called too few."""
    from costlearn.learn import train as train_module
    sidecar = tmp_path / "model.json"
    sidecar.write_text("{}")
    table = {"xgboost": dict(top1_mean=1.077, top1_geomean=0.9, top5_mean=0.3, kendall_tau=0.01),
             "roofline": dict(top1_mean=0.8, top1_geomean=0.6, top5_mean=0.2, kendall_tau=0.1),
             "random": dict(top1_mean=0.5, top1_geomean=0.4, top5_mean=0.1, kendall_tau=0.0)}

    def small_train(folder, models, *, family, dtype, **kw):
        return train_module.TrainResult(path=sidecar, holdout=table, rows=187, shapes=9, dropped={}, family=family,
                                        dtype=dtype, device="dev", holdout_kind="5 regions of shapes")
    monkeypatch.setattr(train_module, "train", small_train)
    assert main(["train", "--data", str(dataset_dir), "--models", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if line.startswith("  random "))
    assert out[at + 1] == ("warning: the xgboost model is no better than the random baseline on these held-out "
                           "problems (top-1 regret mean 107.7% against 50.0%): 187 rows over 9 shapes are too few, "
                           "or too unlike the held-out problems (5 regions of shapes), to learn from; it is saved all "
                           "the same, but measure more rows like the problems you compile (`costlearn collect`, or "
                           "import more measurements) and train again")
    table["xgboost"] = dict(top1_mean=0.05, top1_geomean=0.04, top5_mean=0.01, kendall_tau=0.5)
    assert main(["train", "--data", str(dataset_dir), "--models", str(tmp_path / "m")]) == 0
    assert "no better than" not in capsys.readouterr().out


def test_info_lists_what_each_model_of_the_store_knows(capsys, tmp_path, model_dir):
    """What a model knows was shown nowhere but in error messages: `costlearn info` (or `models`) lists each model's
    device, family, dtype, layouts, epilogues, trained extents, OOD thresholds, held-out scores, training time and
    size, as lines or JSON; a damaged model is listed with why it does not load."""
    import shutil
    device = model_dir.parents[1].name
    side = json.loads((model_dir / "model.json").read_text())
    assert main(["info", "--models", str(model_dir.parents[2])]) == 0
    out = capsys.readouterr().out
    lo, hi = side["envelope"]["min"]["M"], side["envelope"]["max"]["M"]
    for said in (f"{device}/gemm/float32: xgboost model of {side['device']['name']}", f"trained {side['created']}",
                 f"{side['training']['rows']} rows over {side['training']['shapes']} shapes", f"M {lo}-{hi}",
                 "layouts NN",
                 f"{side['envelope']['density_threshold_log2']:.2f} doublings", "held-out problems", "    xgboost ",
                 "    random ", " MiB in "):
        assert said in out, (said, out)
    assert main(["models", "--models", str(model_dir.parents[2]), "--json", "--dtype", "float32"]) == 0
    store = json.loads(capsys.readouterr().out)
    (model,) = store["models"]
    assert model["extents"]["M"] == [lo, hi] and model["layouts"] == side["layouts"]
    assert model["holdout"]["xgboost"]["top1_geomean"] == side["metrics"]["holdout"]["xgboost"]["top1_geomean"]
    assert model["trained"] == side["created"] and model["size_bytes"] > 10 ** 6
    assert model["shapes"] == side["training"]["shapes"]        # regression: the shapes were listed as problems
    copy = tmp_path / "store" / device / "gemm" / "float32"
    shutil.copytree(model_dir, copy)
    (copy / "scorer.npz").write_bytes(b"damaged")
    assert main(["info", "--models", str(tmp_path / "store")]) == 0
    assert f"{device}/gemm/float32: does not load: " in capsys.readouterr().out
    assert main(["info", "--models", str(tmp_path / "store"), "--family", "triton_mm"]) == 0
    assert "no model of --family triton_mm" in capsys.readouterr().out


@pytest.mark.parametrize("argv, patched", [
    (["train", "--data", "DATA", "--models", "TMP/m"], "costlearn.learn.train.train"),
    (["study", "--data", "DATA", "--out", "TMP/study"], "costlearn.learn.study.leave_one_log_out"),
    (["transfer", "--from", "a100", "--to", "h100", "--models", "TMP"], "costlearn.learn.transfer.transfer"),
    (["evaluate", "--no-measure", "--data", "DATA"], "costlearn.learn.study.score_measurements"),
])
def test_a_long_command_logs_a_progress_line_at_least_every_every_s(monkeypatch, capsys, tmp_path, dataset_dir,
                                                                     argv, patched):
    """Regression: `train` on the A100 logs (18 min), `study` (19 min) and `transfer` printed nothing between their
    first line and their summary when stderr was a log file; every stage is now a line, and a stage that lasts is
    repeated at least every EVERY_S seconds."""
    from costlearn.core import progress as progress_module
    monkeypatch.setattr(progress_module, "EVERY_S", 0.2)

    def slow(*args, progress=None, **kwargs):
        if progress is not None:
            progress("fitting fold 1 of 5")
        time.sleep(0.9)
        raise ValueError("stopped by the test")
    monkeypatch.setattr(patched, slow)
    argv = [a.replace("DATA", str(dataset_dir)).replace("TMP", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    lines = [ln for ln in err if re.match(r"\[\d+s\] ", ln)]
    assert len(lines) >= 3 and any(" still: " in ln for ln in lines), err


@pytest.mark.slow
def test_train_logs_a_line_per_stage_folds_fits_and_export(capsys, tmp_path, dataset_dir, dataset_rows):
    """What a log of `train` shows between its first line and its table: the rows, each held-out fold, the fits,
    the export."""
    import shutil
    from costlearn.collect.dataset import write_part
    shapes = dataset_rows[["m", "n", "k"]].drop_duplicates().sample(20, random_state=3)
    rows = dataset_rows.merge(shapes, on=["m", "n", "k"]).groupby(["m", "n", "k"]).head(10)
    (tmp_path / "d").mkdir()
    shutil.copy(dataset_dir / "device.json", tmp_path / "d" / "device.json")
    write_part(rows.to_dict("records"), tmp_path / "d")
    assert main(["train", "--data", str(tmp_path / "d"), "--models", str(tmp_path / "m")]) == 0
    err = [re.sub(r"^\[\d+(m\d\ds)?s?\] ", "", ln) for ln in capsys.readouterr().err.splitlines()]
    assert err[:2] == [f"reading {tmp_path / 'd'}",
                       f"gemm/float32: {len(rows)} valid rows over 20 shapes of {tmp_path / 'd'}"]
    folds = [ln for ln in err if ln.startswith("gemm/float32: held-out fold ")]
    assert len(folds) >= 2 and folds[0].startswith("gemm/float32: held-out fold 1 of ")
    for stage in ("fitting xgboost and the baselines on all", "checking the exported scorer",
                  "answering real models' layer shapes"):
        assert any(stage in ln for ln in err), (stage, err)


def test_collect_measures_the_layout_given_and_refuses_one_its_family_lacks(monkeypatch, capsys, tmp_path):
    """Regression: `costlearn collect` measured layout NN whatever a user's models compile (Triton's matmul runs
    NN, NT, TN and TT); --layout chooses, the shapes file and --shapes-from-db follow it, and a layout the family
    lacks is refused before any device is opened."""
    from costlearn.collect.backends.replay import ReplayBackend
    from costlearn.collect.dataset import load
    from costlearn.interop import import_file
    from inductor_fixture import SHAPE_LAYOUTS, SHAPES, write_log
    write_log(tmp_path / "log.txt")
    import_file("inductor", tmp_path / "log.txt", device="a100", data_root=tmp_path / "rec")
    opened = []
    monkeypatch.setattr("costlearn.cli.collect.device_backend",
                        lambda *a: opened.append(a) or ReplayBackend(tmp_path / "rec" / "a100"))
    nt = [s for s, lay in zip(SHAPES, SHAPE_LAYOUTS) if lay == "NT"]
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("".join(f"{m} {n} {k} float16 NT\n" for m, n, k in nt))
    argv = ["collect", "--family", "triton_mm", "--dtype", "float16", "--data", str(tmp_path / "d"), "--recheck",
            "0", "--no-progress", "--budget", "60"]
    assert main([*argv, "--layout", "NT", "--shapes", str(shapes), "--strategy", "random"]) == 0
    rows = load(tmp_path / "d" / "a100")[0]
    assert set(rows["layout"]) == {"NT"} and {tuple(r) for r in rows[["m", "n", "k"]].to_numpy()} == set(nt)
    assert "triton_mm/float16 NT" in capsys.readouterr().err
    assert main([*argv, "--shapes", str(shapes)]) == 2                   # the file's lines are NT, the collection NN
    assert "layout NN" in capsys.readouterr().err
    opened.clear()
    assert main(["collect", "--family", "gemm", "--layout", "NT", "--data", str(tmp_path / "d")]) == 2
    assert "layout='NT': the 'gemm' family supports ['NN']" in capsys.readouterr().err and not opened


def test_evaluate_refuses_an_unsupported_dtype_before_opening_a_device(tmp_path, monkeypatch, capsys):
    """Regression: `evaluate --dtype float16` (gemm) opened the device, then said "no model for ... dtype='float16'";
    predict and collect say what the family supports, before any device is opened."""
    from costlearn.cli import evaluate
    opened = []
    monkeypatch.setattr(evaluate, "device_backend", lambda *a, **k: opened.append(a))
    assert main(["evaluate", "--dtype", "float16", "--data", str(tmp_path / "d")]) == 2
    assert "dtype='float16': the 'gemm' family supports ['float32']" in capsys.readouterr().err and not opened


def test_predict_names_a_shape_the_model_does_not_serve_by_its_shape_not_an_index(model_dir, tmp_path, capsys):
    """Regression: on the command line, an epilogue the model was not trained on was reported as
    "problems[0] 1x64x64 ...", the Python API's index; the command line names the shape."""
    import shutil
    device = model_dir.parents[1].name
    folder = tmp_path / "store" / device / "gemm" / "float32"
    shutil.copytree(model_dir, folder)
    side = json.loads((folder / "model.json").read_text())
    side["epilogues"] = ["none"]                                        # a model trained without epilogues
    (folder / "model.json").write_text(json.dumps(side))
    assert main(["predict", "1x64x64", "8x64x64", "--epilogue", "bias", "--models", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert "error: shape 1x64x64 float32 NN +bias: " in err and "problems[" not in err
