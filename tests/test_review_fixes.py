"""Regression tests for defects found in review, each named after what broke."""
import hashlib
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

from costlearn.backends.base import CompiledKernel
from costlearn.measure import DeviceLost, Protocol, measure_shape
from costlearn.families.gemm import GemmConfig as TileConfig
from costlearn.space import enumerate_space

A = TileConfig(64, 64, 16, 4, 4)


def test_evaluate_refuses_to_measure_on_another_device_than_the_models(model_dir, dataset_dir, tmp_path):
    from costlearn.backends.replay import ReplayBackend
    from costlearn.device import preset
    from costlearn.evaluate import evaluate
    rows = ReplayBackend(dataset_dir).rows
    with pytest.raises(ValueError, match="--no-measure"):
        evaluate(ReplayBackend(rows, spec=preset("h200")), model_dir, tmp_path, progress=False)


def test_evaluate_no_measure_scores_existing_rows_without_a_device(model_dir, device_name, capsys):
    from costlearn.cli import main
    eval_dir = model_dir.parents[3] / "data" / device_name / "eval"
    if not eval_dir.is_dir():
        pytest.skip("no committed eval measurements")
    assert main(["evaluate", "--no-measure", "--model", device_name, "--out", str(eval_dir)]) == 0
    assert "| xgboost |" in capsys.readouterr().out


def test_rows_of_another_template_or_protocol_never_train_or_score():
    from costlearn.dataset import current_rows
    from costlearn.families.gemm import TEMPLATE_HASH
    from costlearn.measure import PROTOCOL_VERSION
    df = pd.DataFrame(dict(template_hash=[TEMPLATE_HASH, "old", TEMPLATE_HASH, TEMPLATE_HASH],
                           family=["gemm", "gemm", "gemm", "unknown"],
                           protocol_version=[PROTOCOL_VERSION, PROTOCOL_VERSION, PROTOCOL_VERSION - 1,
                                             PROTOCOL_VERSION]))
    kept, dropped = current_rows(df)
    assert len(kept) == 1 and dropped == 3


def test_resume_key_includes_the_input_distribution(dataset_dir, dataset_rows, tmp_path):
    from costlearn.backends.replay import ReplayBackend
    from costlearn.collect import collect
    shape = tuple(int(x) for x in dataset_rows[["m", "n", "k"]].iloc[0])
    same = (dataset_rows["m"] == shape[0]) & (dataset_rows["n"] == shape[1]) & (dataset_rows["k"] == shape[2])
    pool = [TileConfig.from_id(c) for c in dataset_rows.loc[same, "config_id"]]
    be = ReplayBackend(dataset_dir)
    first = collect(be, tmp_path, shapes=[shape], pool=pool, progress=False)
    sparse = collect(be, tmp_path, shapes=[shape], pool=pool, progress=False,
                     protocol=Protocol(distribution="sparse", density=0.1))
    assert first.rows_written == sparse.rows_written > 0


def test_sticky_device_fault_stops_the_shape_with_device_lost():
    class Faulting:
        def verify(self, kern):
            raise RuntimeError("CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access")

        def sample(self, kern, n):
            return 1.0
    with pytest.raises(DeviceLost, match="IllegalAddress"):
        measure_shape(Faulting(), [CompiledKernel(A)], Protocol(rounds=1))


def test_collect_stops_cleanly_when_the_device_is_lost_and_keeps_earlier_shapes(dataset_dir, dataset_rows, tmp_path):
    from costlearn.backends.replay import ReplayBackend
    from costlearn.collect import collect
    from costlearn.dataset import load
    shapes = [tuple(int(x) for x in s) for s in dataset_rows[["m", "n", "k"]].drop_duplicates().iloc[:3].to_numpy()]
    pool = [TileConfig.from_id(c) for c in sorted(dataset_rows["config_id"].unique())]

    class LosesDevice(ReplayBackend):
        def workspace(self, problem, *a, **kw):
            ws = super().workspace(problem)
            if problem.shape == shapes[1]:
                def boom(kern):
                    raise RuntimeError("cudaErrorIllegalAddress")
                ws.verify = boom
            return ws
    res = collect(LosesDevice(dataset_dir), tmp_path, shapes=shapes, pool=pool, progress=False)
    assert "device context lost" in res.stopped and res.shapes_done == 1
    df, _ = load(tmp_path)
    assert set(map(tuple, df[["m", "n", "k"]].drop_duplicates().to_numpy())) == {shapes[0]}


def test_model_file_from_another_training_is_refused(model_dir, tmp_path):
    from costlearn.model import artifact
    dst = tmp_path / "dev" / "gemm" / "float32"
    shutil.copytree(model_dir, dst)
    side = json.loads((dst / "model.json").read_text())
    side["model_state"]["files"]["model.ubj"] = hashlib.sha256(b"another model").hexdigest()
    (dst / "model.json").write_text(json.dumps(side))
    with pytest.raises(artifact.ArtifactError, match="sha256"):
        artifact.load(dst).model()


def test_kernel_source_is_pinned_so_a_change_cannot_reuse_old_timings():
    """If this fails, the kernel source changed: make the change alter
    codegen.TEMPLATE_HASH (it keys every measurement) and re-measure."""
    from costlearn.families.gemm import TEMPLATE_HASH, render
    src = "".join(render(c, d) for c in (A, TileConfig(1, 64, 8, 1, 2, "dot", 1, "col")) for d in ("cuda", "opencl"))
    assert TEMPLATE_HASH == "080acee35a12"
    assert hashlib.sha256(src.encode()).hexdigest()[:12] == "bb205c4775d5"


def test_protocol_accepts_numpy_ints_and_refuses_a_negative_timeout():
    assert Protocol(rounds=np.int64(3)).rounds == 3
    with pytest.raises(ValueError, match="timeout_us"):
        Protocol(timeout_us=-1)


def test_small_input_errors_are_clear():
    from costlearn.device import preset
    from costlearn.features.analytic import analytic_arrays
    from costlearn.metrics import topk_regret
    with pytest.raises(TypeError, match="must be a costlearn.Problem"):
        enumerate_space(preset("h200"), problem=(1, 2))
    with pytest.raises(ValueError, match="non-empty"):
        topk_regret(np.array([]), np.array([]), 1)
    rows = pd.DataFrame([dict(m=8, n=8, k=8, dtype="bf16", layout="NN", family="gemm", config_id=A.config_id)])
    with pytest.raises(ValueError, match="bf16"):
        analytic_arrays(rows, preset("h200"))


def test_replay_reproduces_a_recorded_timeout():
    from costlearn.backends.replay import ReplayBackend
    from costlearn.device import preset
    from test_dataset import _row
    from costlearn.problem import Problem
    rows = pd.DataFrame([_row(config_id=A.config_id, status="timeout", time_us=math.nan, device_slug="h200")])
    be = ReplayBackend(rows, spec=preset("h200"))
    with be.workspace(Problem(4, 5, 6)) as ws:
        row = measure_shape(ws, [be.compile(A)], Protocol(rounds=1))[0]
    assert row["status"] == "timeout"
