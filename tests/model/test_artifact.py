"""Model artifacts: a scorer or model file that is not the one the sidecar recorded, or not consistent,
is refused, never served."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
import numpy as np
import pytest
from costlearn.families.gemm import GemmConfig as TileConfig



A = TileConfig(64, 64, 16, 4, 4)


def test_model_file_from_another_training_is_refused(model_dir, tmp_path):
    from costlearn.model import artifact, artifact_layout
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    side = json.loads((dst / "model.json").read_text())
    side["model_state"]["files"]["model.ubj"] = hashlib.sha256(b"another model").hexdigest()
    (dst / "model.json").write_text(json.dumps(side))
    with pytest.raises(artifact_layout.ArtifactError, match="sha256"):
        artifact.load(dst).model()


@pytest.mark.parametrize("name", ["../scorer.npz", "/tmp/scorer.npz", "sub/scorer.npz", "..", "", "link.npz"])
def test_a_sidecar_naming_a_scorer_outside_its_folder_is_refused(model_dir, tmp_path, name):
    """model.json could name a scorer file outside its folder, and
    it was loaded and served."""
    from costlearn.model import artifact, artifact_layout
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(dst / "scorer.npz", outside / "scorer.npz")
    (dst / "sub").mkdir()
    shutil.copy(dst / "scorer.npz", dst / "sub" / "scorer.npz")
    shutil.copy(dst / "scorer.npz", dst.parent / "scorer.npz")
    (dst / "link.npz").symlink_to(outside / "scorer.npz")
    side = json.loads((dst / "model.json").read_text())
    side["scorer"]["file"] = name if name != "/tmp/scorer.npz" else str(outside / "scorer.npz")
    (dst / "model.json").write_text(json.dumps(side))
    with pytest.raises(artifact_layout.ArtifactError, match="bare file names|leads outside"):
        artifact.load(dst)


def test_leaf_values_that_overflow_a_time_are_refused_even_with_the_sha256_updated(model_dir, tmp_path):
    """Leaf values of 1e30 in scorer.npz, its sha256 updated in
    model.json, made predict_best raise a bare OverflowError (2.0 ** score)."""
    from costlearn.model import artifact, artifact_layout
    from costlearn.model.forest import ForestError
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    with np.load(dst / "scorer.npz") as z:
        arrays = {k: z[k] for k in z.files}
    nodes = arrays["forest_nodes"].copy()
    leaf = (nodes["flags"] & 1) == 0
    nodes["value"][leaf] = np.float32(1e30)
    arrays["forest_nodes"] = nodes
    np.savez(dst / "scorer.npz", **arrays)
    side = json.loads((dst / "model.json").read_text())
    side["scorer"]["sha256"] = hashlib.sha256((dst / "scorer.npz").read_bytes()).hexdigest()
    (dst / "model.json").write_text(json.dumps(side))
    with pytest.raises((artifact_layout.ArtifactError, ForestError), match="scores can reach"):
        artifact.load(dst)


def test_a_damaged_model_ubj_changes_no_answer_and_is_refused_where_it_is_read(model_dir, dataset_dir, tmp_path):
    """Regression: a corrupt model.ubj went unnoticed (served from scorer.npz). scorer.npz is what is served,
    evaluate included; model.ubj, the training library's copy, is checked wherever it is read."""
    import costlearn
    from costlearn.collect.dataset import load
    from costlearn.learn.evaluate import score
    from costlearn.model import artifact, artifact_layout
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    rows = load(dataset_dir)[0].iloc[:4000]
    before = score(dst, rows).summary["xgboost"]["all"]
    want = costlearn.predict_best(48, 64, 96, device="dev", models_dir=tmp_path)
    blob = bytearray((dst / "model.ubj").read_bytes())
    blob[len(blob) // 2] ^= 0x55
    (dst / "model.ubj").write_bytes(bytes(blob))
    costlearn.serve.predictor.clear_cache()
    got = costlearn.predict_best(48, 64, 96, device="dev", models_dir=tmp_path)
    assert (got.config, got.time_us, got.top_k) == (want.config, want.time_us, want.top_k)
    assert score(dst, rows).summary["xgboost"]["all"] == before        # evaluate scores the served scorer
    with pytest.raises(artifact_layout.ArtifactError, match="model.ubj does not belong"):
        artifact.load(dst).model()


def test_evaluate_scores_what_predict_best_ranks_by(model_dir, dataset_dir):
    """The scores evaluate gives the model are the served scorer's, which the rankers use."""
    from costlearn.collect.dataset import load, valid_rows
    from costlearn.model import artifact
    from costlearn.serve.predictor import Predictor
    art = artifact.load(model_dir)
    rows = valid_rows(load(dataset_dir)[0])
    q = rows.iloc[0]
    one = rows[(rows["m"] == q["m"]) & (rows["n"] == q["n"]) & (rows["k"] == q["k"])
               & (rows["epilogue"] == q["epilogue"]) & rows["config_id"].isin(set(art.candidates["config_id"]))]
    pred = Predictor(model_dir)
    got = art.predict_rows(one)
    p = pred.problem(int(q["m"]), int(q["n"]), int(q["k"]), epilogue=str(q["epilogue"]))
    ids = list(art.candidates["config_id"])
    mask = np.zeros(len(ids), bool)
    mask[[ids.index(c) for c in one["config_id"]]] = True
    res = pred.ranker.rank(p, mask, top=len(ids), cascade=False)
    want = dict(zip([ids[i] for i in res.order], np.exp2(res.scores)))
    assert np.allclose(got, [want[c] for c in one["config_id"]], rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="not candidates"):
        art.predict_rows(one.assign(config_id="m1n1k1_nope"))


def _rewrite_scorer(folder, mutate):
    """Replace the artifact's scorer.npz by a mutated copy and record its
    sha256 in the sidecar (as a training writing another scorer would)."""
    import hashlib
    import json
    with np.load(folder / "scorer.npz") as z:
        arrays = {k: z[k] for k in z.files}
    mutate(arrays)
    np.savez(folder / "scorer.npz", **arrays)
    side = json.loads((folder / "model.json").read_text())
    side["scorer"]["sha256"] = hashlib.sha256((folder / "scorer.npz").read_bytes()).hexdigest()
    (folder / "model.json").write_text(json.dumps(side))


@pytest.mark.parametrize("damage", ["keep_1", "child_out_of_range", "feature_out_of_range", "offsets_short"])
def test_an_inconsistent_scorer_is_refused_not_served(model_dir, tmp_path, damage):
    """What the flat-forest and cascade caches once let through (a loadable
    file with bad values) cannot reach the C ranker: the scorer in the
    artifact is validated when it loads."""
    import shutil
    from costlearn.model.artifact import load
    from costlearn.model.artifact_layout import ArtifactError
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)

    def mutate(a):
        if damage == "keep_1":
            a["cascade"] = np.array([[8, 1, 0.0]])
        elif damage == "child_out_of_range":
            nodes = a["forest_nodes"].copy()
            nodes["child"][nodes["flags"] == 1] = 65000
            a["forest_nodes"] = nodes
        elif damage == "feature_out_of_range":
            nodes = a["forest_nodes"].copy()
            nodes["feature"][:] = 200
            a["forest_nodes"] = nodes
        else:
            a["has_offsets"] = np.int64(1)
            a["offsets"] = np.zeros(3)
    _rewrite_scorer(dst, mutate)
    with pytest.raises(ArtifactError):
        load(dst)


def test_a_scorer_of_another_training_is_refused(model_dir, tmp_path):
    import shutil
    from costlearn.model.artifact import load
    from costlearn.model.artifact_layout import ArtifactError
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    with (dst / "scorer.npz").open("ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ArtifactError, match="sha256"):
        load(dst)


def test_the_store_root_is_worked_out_in_one_place(monkeypatch, tmp_path):
    """The default model folder was worked out in five places; models_root is the one."""
    from costlearn.model.artifact_layout import default_models_dir, models_root
    monkeypatch.setenv("COSTLEARN_MODELS", str(tmp_path / "store"))
    assert models_root() == models_root(None) == default_models_dir() == tmp_path / "store"
    assert models_root(tmp_path / "other") == tmp_path / "other" and models_root("rel") == Path("rel")


_RESAVE = """
import os, signal, sys
import costlearn.core.files as files
import costlearn.model.artifact as L
import costlearn.model.artifact_save as A
import costlearn.model.base as B
folder, kill_at, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
art = L.load(folder)
side = art.sidecar
writes = [0]
real = files.atomic_write
def counted(path, data, **kw):
    out = real(path, data, **kw)
    writes[0] += 1
    if writes[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return out
A.atomic_write = B.atomic_write = counted
A.save(art.model(), folder, family=side["family"], dtype=side["dtype"], layouts=side["layouts"], spec=art.spec,
       candidates=art.candidates, scorer=art.scorer, envelope=side["envelope"], metrics=side["metrics"],
       training=dict(side["training"], generation=tag), baselines=side["baselines"],
       extra={k: side[k] for k in ("floor", "coverage", "template_hash") if k in side}, shortlist=art.shortlist,
       vendor_model=art.vendor_model, epilogues=art.epilogues)
print(writes[0])
"""


def _resave(folder, kill_at: int, tag: str):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-c", _RESAVE, str(folder), str(kill_at), tag], capture_output=True,
                          text=True, timeout=300)


def test_a_training_killed_at_any_write_leaves_the_old_model_or_the_new_one_served(model_dir, tmp_path):
    """A retrain killed (kill -9) right after scorer.npz was replaced left no servable model
    ("scorer.npz does not belong to model.json") until a retrain: the files were written in place. Now the new
    model's files go into a folder of their own and the sidecar is renamed over the old one last."""
    import signal
    from costlearn.model import artifact, artifact_layout
    from costlearn.serve.predictor import Predictor
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)                       # an artifact written before payload folders
    first = _resave(dst, 0, "g0")
    assert first.returncode == 0, first.stderr
    writes = int(first.stdout.split()[-1])
    assert writes >= 3 and artifact.load(dst).sidecar["training"]["generation"] == "g0"
    assert (dst / "scorer.npz").exists()          # kept while a reader may still read the model they belong to
    served = "g0"
    for kill_at in range(1, writes + 1):
        run = _resave(dst, kill_at, f"g{kill_at}")
        assert run.returncode == -signal.SIGKILL, (kill_at, run.stderr)
        art = artifact.load(dst)
        got = art.sidecar["training"]["generation"]
        assert got in (served, f"g{kill_at}"), (kill_at, got)
        assert got == (f"g{kill_at}" if kill_at == writes else served)  # the sidecar's rename is the last write
        served = got
        art.model()
        p = Predictor(dst)
        assert p.predict(p.problem(256, 256, 256)).config in p.configs
    (dst / ".model.json.4242.deadbeef.tmp").write_text("{")          # a save killed while writing its sidecar
    assert _resave(dst, 0, "last").returncode == 0
    assert len(list(dst.glob(f"{artifact_layout.PAYLOAD_PREFIX}*"))) <= 2  # the killed saves' folders are gone
    assert not list(dst.glob(".model.json.*.tmp"))                     # and their half-written sidecars
    assert not (dst / "scorer.npz").exists()                          # and the files of the first model


@pytest.mark.slow
def test_a_reader_whose_model_is_replaced_twice_while_it_reads_gets_the_new_one(model_dir, tmp_path, monkeypatch):
    """A predict_best reloading during a retrain saw an ArtifactError ("retry") once in 2,653 loads.
    Here two saves complete between the reader's read of the sidecar and of the files it names (the first
    model's files are then gone): the reader reads the new sidecar and loads the newest model."""
    from costlearn.model import artifact
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    assert _resave(dst, 0, "a").returncode == 0
    real, calls = artifact._load, []

    def replaced_meanwhile(folder, text):
        if not calls:
            for tag in ("b", "c"):
                assert _resave(dst, 0, tag).returncode == 0
        calls.append(text)
        return real(folder, text)

    monkeypatch.setattr(artifact, "_load", replaced_meanwhile)
    art = artifact.load(dst)
    assert art.sidecar["training"]["generation"] == "c" and len(calls) == 2
    assert json.loads(calls[0])["training"]["generation"] == "a"


def test_a_sidecar_key_renamed_by_one_flipped_bit_is_refused(model_dir, tmp_path):
    """Regression (an attack): of 1,000 single-bit flips in model.json, one renamed the key ``shortlist`` and the model
    was served without its table, with other answers (renaming ``coverage`` likewise). A sidecar written with a
    payload folder records the sha256 of the rest of itself."""
    from costlearn.model import artifact, artifact_layout
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    assert _resave(dst, 0, "signed").returncode == 0
    text = (dst / "model.json").read_text()
    assert artifact.load(dst).sidecar[artifact_layout.SIDECAR_DIGEST]
    for key in ('"coverage"', '"envelope"', '"payload"', f'"{artifact_layout.SIDECAR_DIGEST}"'):
        (dst / "model.json").write_text(text.replace(key, key[:-2] + chr(ord(key[-2]) ^ 1) + '"', 1))
        with pytest.raises(artifact_layout.ArtifactError, match="not what was written"):
            artifact.load(dst)
    (dst / "model.json").write_text(text)
    assert artifact.load(dst).sidecar["training"]["generation"] == "signed"


def test_a_scorer_checked_once_is_not_checked_again_and_one_with_other_bytes_is(model_dir, tmp_path, monkeypatch):
    """A forest that passed its check is recorded by its file's sha256, so a later load of the same
    bytes skips the 20-30 ms check; any other bytes (a damaged forest with its sha256 updated) are checked and
    refused, and a cache that is not private records nothing and is not believed."""
    import collections
    from costlearn.model import artifact, artifact_files, artifact_layout
    from costlearn.model.forest import FlatForest
    calls = []
    real = FlatForest.validate
    monkeypatch.setattr(FlatForest, "validate", lambda self: (calls.append(len(self.nodes)), real(self))[1])
    monkeypatch.setenv("COSTLEARN_CACHE", str(tmp_path / "cache"))
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    monkeypatch.setattr(artifact_files, "_PARSED", collections.OrderedDict())    # a new process: nothing read yet
    n_nodes = len(artifact.load(dst).scorer.forest.nodes)
    assert calls.count(n_nodes) == 1
    monkeypatch.setattr(artifact_files, "_PARSED", collections.OrderedDict())    # as a new process
    artifact.load(dst)
    assert calls.count(n_nodes) == 1                                              # recorded: not checked again
    monkeypatch.setattr(artifact_files, "_PARSED", collections.OrderedDict())

    def damage(arrays):
        nodes = arrays["forest_nodes"].copy()
        nodes["child"][np.flatnonzero(nodes["flags"] & 1)[0]] = 60000
        arrays["forest_nodes"] = nodes
    _rewrite_scorer(dst, damage)
    with pytest.raises(artifact_layout.ArtifactError, match="out of range"):
        artifact.load(dst)
    assert calls.count(n_nodes) == 2
    os.chmod(tmp_path / "cache", 0o777)                                           # others may write it now
    shutil.copytree(model_dir, tmp_path / "again" / "dev" / "gemm" / "float32")
    monkeypatch.setattr(artifact_files, "_PARSED", collections.OrderedDict())
    artifact.load(tmp_path / "again" / "dev" / "gemm" / "float32")
    assert calls.count(n_nodes) == 3                                              # not believed: checked


def test_without_forest_py_readable_every_load_checks_the_forest(model_dir, tmp_path, monkeypatch):
    """The record of a checked forest is keyed with forest.py's source; where that cannot be read (a frozen
    install), a load still works and always checks."""
    import collections
    from costlearn.model import artifact, artifact_files
    from costlearn.model import forest as forest_module
    from costlearn.model.forest import FlatForest
    calls = []
    real = FlatForest.validate
    monkeypatch.setattr(FlatForest, "validate", lambda self: (calls.append(1), real(self))[1])
    monkeypatch.setenv("COSTLEARN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(forest_module, "__file__", str(tmp_path / "nowhere" / "forest.py"))
    for _ in range(2):
        monkeypatch.setattr(artifact_files, "_PARSED", collections.OrderedDict())
        artifact.load(model_dir)
    assert len(calls) == 2 and not (tmp_path / "cache").exists()



@pytest.mark.parametrize("text, why", [
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "JSON nested too deep to read"),
    ('{"a": ' + "9" * 5000 + "}", "digits"),
    ('{"artifact_schema": "' + "x" * 100_000 + '"}', r"artifact schema 'x+\.\.\., this code reads"),
])
def test_a_hostile_sidecar_is_one_error_naming_it(model_dir, tmp_path, text, why):
    """A sidecar nested 100,000 deep was a RecursionError traceback (predict, info), one with a 5,000-digit number
    a bare ValueError naming no file, a 100,000-character schema a 100,000-character line."""
    from costlearn.model import artifact, artifact_layout
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    (dst / "model.json").write_text(text)
    with pytest.raises(artifact_layout.ArtifactError, match=why) as e:
        artifact.load(dst)
    assert str(dst / "model.json") in str(e.value) and len(str(e.value)) < 500
    assert artifact_layout.current_payload(dst) in (None, "")        # no traceback either


def test_a_sidecar_device_with_a_count_too_large_is_refused_not_an_overflow(model_dir, tmp_path):
    """A sidecar whose device had 10**30 multiprocessors loaded and predict died of an OverflowError traceback."""
    from costlearn.model import artifact, artifact_layout
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    side = json.loads((dst / "model.json").read_text())
    side["device"]["multiprocessors"] = 10**30
    side.pop(artifact_layout.SIDECAR_DIGEST, None)
    (dst / "model.json").write_text(json.dumps(side))
    with pytest.raises(artifact_layout.ArtifactError, match=r"DeviceSpec.multiprocessors=1000.*must be an int in "
                       r"\[1, 2147483647\]"):
        artifact.load(dst)


@pytest.mark.parametrize("kind", ["FIFO", "folder"])
def test_a_scorer_that_is_a_fifo_or_a_folder_is_named_as_such_not_as_missing(model_dir, tmp_path, kind):
    """Regression (an attack): a FIFO or a folder in place of scorer.npz was reported as missing."""
    import os
    from costlearn.model import artifact, artifact_layout
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    (dst / "scorer.npz").unlink()
    os.mkfifo(dst / "scorer.npz") if kind == "FIFO" else (dst / "scorer.npz").mkdir()
    with pytest.raises(artifact_layout.ArtifactError, match=f"scorer.npz is unreadable .*not a regular file but a "
                                                            f"{kind}"):
        artifact.load(dst)
