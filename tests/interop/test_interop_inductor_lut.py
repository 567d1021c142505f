"""PyTorch Inductor's template lookup table (costlearn.interop.inductor.lut):
keys, entries and the choice rule; export from a shapes file, a log and a
recorded table; and, where torch is installed (``costlearn[test-torch]`` for
the tests, as CI; users get it with ``costlearn[inductor]``), the
keys and entries checked against PyTorch's own ``LookupTableChoices``."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from inductor_fixture import DEVICE, SHAPES, build_models, write_log

from costlearn.families.triton_mm import VENDOR, TritonMMConfig
from costlearn.interop import InteropError, import_file
from costlearn.interop.inductor import lut, lut_sources
from costlearn.interop.inductor.names import config_from_entry, lut_entry
from costlearn.serve.prediction import Prediction
from costlearn.core.problem import LAYOUTS, Problem

HAS_TORCH = subprocess.run([sys.executable, "-c", "import torch._inductor.lookup_table"],
                           capture_output=True).returncode == 0
needs_torch = pytest.mark.skipif(not HAS_TORCH,
                                 reason="PyTorch 2.13+ not installed (pip install 'costlearn[test-torch]': "
                                        "PyTorch 2.13.0, as CI)")
A100 = "NVIDIA A100-SXM4-80GB"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return build_models(tmp_path_factory.mktemp("lut"))


def _prediction(ranked, chosen_by="predicted", ood=False, config=None):
    return Prediction(config or ranked[0], 1.0, tuple((c, 1.0 + i) for i, c in enumerate(ranked)), ood, (),
                      64, 64, 64, "float16", "NN", "triton_mm", DEVICE, chosen_by)


T1, T2, T3, T4 = (TritonMMConfig(64, 64, 32, 4, 3), TritonMMConfig(128, 64, 32, 4, 4),
                  TritonMMConfig(64, 128, 32, 4, 4), TritonMMConfig(32, 32, 32, 2, 2))


def test_keys_are_inductors_format_for_every_layout():
    for layout, sa, sb in [("NN", "[96, 1]", "[32, 1]"), ("NT", "[96, 1]", "[1, 96]"),
                           ("TN", "[1, 64]", "[32, 1]"), ("TT", "[1, 64]", "[1, 96]")]:
        lp = lut.LutProblem.contiguous(Problem(64, 32, 96, "bfloat16", layout))
        inputs = f"((torch.bfloat16, [64, 96], {sa}), (torch.bfloat16, [96, 32], {sb}))"
        assert lut.lookup_key(lp, A100) == f"{A100}+{inputs}+mm" and lut.lookup_key(lp) == f"{inputs}+mm"
    # float32 and tfloat32 tensors are both torch.float32: one key
    f32, tf32 = (lut.LutProblem.contiguous(Problem(8, 8, 8, d)) for d in ("float32", "tfloat32"))
    assert lut.lookup_key(f32) == lut.lookup_key(tf32)


def test_entries_set_even_k_per_config_and_round_trip():
    p = Problem(100, 64, 96, "float16")
    e = lut_entry(T1, p)
    assert e["template_id"] == "triton::mm" and e["EVEN_K"] is True and e["ACC_TYPE"] == "tl.float32"
    assert lut_entry(TritonMMConfig(64, 64, 64, 4, 3), p)["EVEN_K"] is False          # 96 % 64 != 0: masked K loop
    assert "ALLOW_TF32" not in e                           # Inductor decides it per shape
    assert lut_entry(VENDOR, p) == {"template_id": "aten::mm"}
    assert config_from_entry(e) == T1 and config_from_entry({"template_id": "aten::mm"}) is VENDOR
    assert config_from_entry({"template_id": "triton::persistent_tma_mm"}) is None
    with pytest.raises(ValueError, match="without BLOCK_K"):
        config_from_entry({"template_id": "triton::mm", "BLOCK_M": 64, "BLOCK_N": 64})
    with pytest.raises(ValueError, match="power of two"):
        config_from_entry({**e, "BLOCK_M": 48})


def test_choices_a_sure_top1_alone_else_the_k_best_tiles_and_the_vendor():
    sure = _prediction([T1, T2, VENDOR, T3])
    assert lut.choices_for(sure, 1, VENDOR) == [T1]                      # no autotuning
    assert lut.choices_for(sure, 3, VENDOR) == [T1, T2, T3, VENDOR]
    for unsure in (_prediction([VENDOR, T1, T2], "vendor_floor"), _prediction([T1, T2], ood=True),
                   _prediction([VENDOR, T1], "ood_fallback")):
        assert lut.choices_for(unsure, 1, VENDOR) == [T1, VENDOR]         # never fewer than the vendor and one
    # the vendor is listed even when the model ranks it below the k tiles
    assert lut.choices_for(_prediction([T1, T2, T3, T4], "vendor_floor"), 2, VENDOR) == [T1, T2, VENDOR]
    assert lut.choices_for(_prediction([T1, T2]), 2, None) == [T1, T2]   # a family without a vendor call


def test_export_from_a_shapes_file_reads_back_as_its_problems(models, tmp_path):
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("# M N K dtype layout\n512 1024 256 float16 NN\n1024 512 2048 float16 NT   # a comment\n"
                      "384 640 896 float16\n512 1024 256 float16 NN\n")
    problems = lut_sources.read_shapes_file(shapes)
    assert [lp.problem.layout for lp in problems] == ["NN", "NT", "NN"]          # repeats dropped
    out = tmp_path / "t.json"
    rep = lut.export_lut(problems, out, device=DEVICE, top_k=3, models_dir=models, portable=True)
    table = json.loads(out.read_text())
    assert rep.problems == 3 and rep.keys == len(table) == 6 and sum(rep.candidates.values()) == 3
    assert sum(k.startswith(A100 + "+") for k in table) == 3                   # device keys: the preset's name
    back = lut_sources.read_table(out)
    assert {(lp.problem, lp.strides_a, lp.strides_b) for lp in back.problems} == \
        {(lp.problem, lp.strides_a, lp.strides_b) for lp in problems}
    assert back.measurements == [] and back.skipped == [] and back.devices == (A100,)
    for entries in table.values():
        configs = [config_from_entry(e) for e in entries]
        assert configs[-1] is VENDOR and all(isinstance(c, TritonMMConfig) for c in configs[:-1])
        assert 2 <= len(entries) <= 4
    one = lut.export_lut(problems, tmp_path / "one.json", device=DEVICE, top_k=1, models_dir=models,
                         device_name="NVIDIA A100-PCIE-40GB")
    table1 = json.loads((tmp_path / "one.json").read_text())
    assert all(k.startswith("NVIDIA A100-PCIE-40GB+") for k in table1)
    assert set(one.candidates) <= {1, 2} and one.candidates.get(1, 0) == one.confident


def test_export_from_a_log_keeps_its_strides(models, tmp_path):
    log = tmp_path / "log.txt"
    write_log(log)
    problems = lut_sources.problems_from_log(log, DEVICE)
    assert len(problems) == len(SHAPES)
    nt = next(lp for lp in problems if lp.problem.layout == "NT")
    assert nt.strides_a == (nt.problem.k, 1) and nt.strides_b == (1, nt.problem.k)
    rep = lut.export_lut(problems, tmp_path / "t.json", device=DEVICE, models_dir=models)
    assert rep.problems == len(SHAPES)


def test_float32_and_tfloat32_of_one_shape_are_refused_in_one_table(monkeypatch, tmp_path):
    """Both are torch.float32 tensors: the second would overwrite the first's key."""
    monkeypatch.setattr(lut, "predict_many", lambda problems, dtype, *a, **kw: [
        _prediction([T1, T2, VENDOR])._replace(dtype=dtype) for _ in problems])
    monkeypatch.setattr(lut, "load_predictor", lambda *a: type("P", (), {"spec": type("S", (), {"name": A100})}))
    with pytest.raises(ValueError, match="share the key.*separate tables"):
        lut.export_lut([Problem(64, 64, 64, "float32"), Problem(64, 64, 64, "tfloat32")], tmp_path / "t.json",
                       device=DEVICE)
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("line, says", [("64 64 float16", "each line is"), ("64 64 64 int4", "dtype='int4'"),
                                        ("64 64 64 float16 NX", "layout='NX'"), ("0 64 64 float16", "M=0"),
                                        ("64 -8 64 float16", "N=-8; must be an int >= 1"),
                                        ("６４ 64 64 float16", "each line is")])
def test_a_bad_shapes_line_is_named(tmp_path, line, says):
    f = tmp_path / "s.txt"
    f.write_text("64 64 64 float16\n" + line + "\n")
    with pytest.raises(InteropError, match=re.escape(f"{f}:2") + ".*" + re.escape(says)):
        lut_sources.read_shapes_file(f)


def test_a_shapes_file_written_with_a_bom_reads(tmp_path):
    f = tmp_path / "s.txt"
    f.write_bytes("\ufeff64 64 64 float16\n".encode())
    assert [lp.problem for lp in lut_sources.read_shapes_file(f)] == [Problem(64, 64, 64, "float16")]


def test_a_recorded_table_imports_the_entries_that_carry_a_time(tmp_path):
    p = Problem(512, 256, 1024, "float16")
    key = lut.lookup_key(lut.LutProblem.contiguous(p), "NVIDIA H100")
    table = {key: [{**lut_entry(T1, p), "time_ms": 0.125}, {"template_id": "aten::mm", "time_us": 140.0},
                   lut_entry(T2, p)],
             "NVIDIA H100+((torch.float16, [1, 8], [8, 1]), (torch.float16, [8, 8], [8, 1]), "
             "(torch.float16, [8, 8], [8, 1]))+alpha=1&beta=1+addmm": [{"template_id": "aten::bias_addmm"}]}
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps(table))
    got = lut_sources.read_table(f)
    assert [lp.problem for lp in got.problems] == [p, Problem(8, 8, 8, "float16", epilogue="bias")]
    assert got.skipped == []
    assert sorted((m.config.config_id, m.time_us) for m in got.measurements) == [(T1.config_id, 125.0),
                                                                                 ("vendor", 140.0)]
    table["((torch.float16, [0, 8], [8, 1]), (torch.float16, [8, 8], [8, 1]))+mm"] = [lut_entry(T1, p)]
    table["((torch.float16, [64, 64], [0, 1]), (torch.float16, [64, 64], [64, 1]))+mm"] = [lut_entry(T1, p)]
    table[lut.lookup_key(lut.LutProblem.contiguous(p))] = [{**lut_entry(T1, p), "time_ms": 0.125},
                                                           {**lut_entry(T2, p), "time_ms": "0.2"}, 7]
    f.write_text(json.dumps(table, indent=1))
    got = lut_sources.read_table(f)
    whys = [why for _, why in got.skipped]
    assert any("[0, 8]" in w and "extents >= 1" in w for w in whys)          # regression: a zero extent crashed
    assert any("[0, 1]" in w and "dense" in w for w in whys)                 # a broadcast operand is no layout
    assert "entry 1: time_ms='0.2' is not a number" in whys and "entry 2 is int, not an object" in whys
    assert len(got.measurements) == 2           # the device-agnostic key's T1 time is the device key's: once
    assert got.devices == ("NVIDIA H100",)
    with pytest.raises(InteropError, match="keyed for 'NVIDIA H100'.*a100"):
        import_file("inductor-lut", f, device="a100", data_root=tmp_path / "data")
    rep = import_file("inductor-lut", f, device="h100", data_root=tmp_path / "data")
    assert rep.rows_added == 2
    f.write_text(json.dumps({key: [lut_entry(T1, p)]}))
    with pytest.raises(InteropError, match="no entry carries a time.*export inductor-lut --from-table"):
        import_file("inductor-lut", f, device="h100", data_root=tmp_path / "data2")
    f.write_text("[1, 2]")
    with pytest.raises(InteropError, match="object of key"):
        lut_sources.read_table(f)


def test_skipped_keys_name_their_own_lines_in_one_pass(tmp_path):
    """Each key's line was found by searching the whole text from
    its start (quadratic: 16k keys took 49 s); the lines must stay right,
    the same key text inside an earlier value included."""
    other = "((torch.float16, [9999, 8], [8, 1]), (torch.float16, [8, 8], [8, 1]))+bmm"
    table = {f"((torch.float16, [{i + 1}, 8], [8, 1]), (torch.float16, [8, 8], [8, 1]))+bmm": [{"note": other}]
             for i in range(300)}
    table[other] = []
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps(table, indent=1))
    lines = f.read_text().splitlines()
    got = lut_sources.read_table(f)
    assert len(got.skipped) == 301
    for (line, why), key in zip(got.skipped, table):
        assert lines[line - 1].lstrip().startswith(json.dumps(key)), (line, key)


def test_a_table_nested_too_deep_is_refused_by_name(tmp_path):
    """A table nested 200,000 deep raised a RecursionError traceback."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text('{"k": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(InteropError, match="nested too deep"):
        lut_sources.read_table(f)


def test_cli_export_needs_one_source_of_shapes(models, tmp_path, capsys):
    from costlearn.cli import main
    shapes = tmp_path / "s.txt"
    shapes.write_text("512 1024 256 float16 NN\n")
    out = tmp_path / "t.json"
    assert main(["export", "inductor-lut", "--models", str(models), "--model", DEVICE, "--shapes-file", str(shapes),
                 "--top-k", "2", "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert "wrote 1 keys for 1 problems" in cap.out and len(json.loads(out.read_text())) == 1
    assert f"read 1 problems from the shapes file {shapes}" in cap.err          # not "from from ..."
    for args in ([], ["--shapes-file", str(shapes), "--from-log", str(shapes)]):
        assert main(["export", "inductor-lut", "--models", str(models), "--model", DEVICE, *args,
                     "--out", str(out)]) == 2
        assert "takes one source of shapes" in capsys.readouterr().err
    assert main(["export", "inductor-lut", "--models", str(models), "--model", DEVICE, "--shapes-file", str(shapes),
                 "--dtype", "bfloat16", "--out", str(out)]) == 2
    assert "the shapes file holds only ['float16']" in capsys.readouterr().err
    shapes.write_text("512 1024 256 float16 NN\n512 1024 256 bfloat16 NN\n")
    assert main(["export", "inductor-lut", "--models", str(models), "--model", DEVICE, "--shapes-file", str(shapes),
                 "--out", str(out)]) == 0          # what the store serves is exported; the rest is named
    assert "left out the 1 bfloat16 problems of the shapes file: the store has no triton_mm/bfloat16 model of a100" \
        in capsys.readouterr().err and len(json.loads(out.read_text())) == 1
    assert main(["export", "inductor-lut", "--models", str(models), "--model", DEVICE, "--shapes-file", str(shapes),
                 "--dtype", "float16", "bfloat16", "--out", str(out)]) == 2       # asked for by name: refused
    assert "models of a100 for ['float16'] only; pass --dtype float16" in capsys.readouterr().err
    assert main(["export", "inductor-lut", "--models", str(models), "--model", DEVICE, "--shapes-file", str(shapes),
                 "--dtype", "float16", "--out", str(tmp_path / "no" / "such" / "t.json")]) == 2
    assert "does not exist; create it" in capsys.readouterr().err and not (tmp_path / "no").exists()
    assert main(["export", "inductor-lut", "--models", str(models), "--model", DEVICE, "--shapes-file", str(shapes),
                 "--dtype", "float16", "--out", str(tmp_path)]) == 2          # a folder
    assert f"--out {tmp_path} is a folder; give a file name" in capsys.readouterr().err
    # a recorded table keeps its own device name, and what it leaves out is said
    rec = tmp_path / "inductor_lut_rec.json"
    p = Problem(512, 1024, 256, "float16")
    rec.write_text(json.dumps({lut.lookup_key(lut.LutProblem.contiguous(p), "NVIDIA A100 80GB PCIe"): [],
                               "NVIDIA A100 80GB PCIe+((torch.float16, [8, 8], [8, 1]), (torch.float16, [8, 8], "
                               "[8, 1]), (torch.float16, [8, 8], [8, 1]))+bmm": []}))
    assert main(["export", "inductor-lut", "--models", str(models), "--model", DEVICE, "--from-table", str(rec),
                 "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert "left out: op 'bmm'" in cap.err
    assert list(json.loads(out.read_text())) == [lut.lookup_key(lut.LutProblem.contiguous(p), "NVIDIA A100 80GB PCIe")]


# -- against PyTorch's own code -------------------------------------------------------

class _Inputs:
    """A stand-in for Inductor's KernelInputs of an mm: what the key reads."""

    def __init__(self, lp):
        import torch
        p = lp.problem
        dt = getattr(torch, lut.TORCH_NAME[p.dtype].split(".")[1])
        self._dtypes, self._scalars = [dt, dt], {}
        self._shapes, self._strides = [(p.m, p.k), (p.k, p.n)], [lp.strides_a, lp.strides_b]

    def dtypes(self):
        return self._dtypes

    def shapes_hinted(self):
        return self._shapes

    def strides_hinted(self):
        return self._strides

    def device(self):
        import torch
        return torch.device("cuda", 0)


@needs_torch
def test_keys_equal_pytorchs_for_every_dtype_and_layout(monkeypatch):
    from torch._inductor.lookup_table import LookupTableChoices
    monkeypatch.setattr(LookupTableChoices, "_get_device_key", staticmethod(lambda device: A100))
    choices = LookupTableChoices()
    for dtype in ("float16", "bfloat16", "float32", "tfloat32"):
        for layout in LAYOUTS:
            lp = lut.LutProblem.contiguous(Problem(37, 4096, 1, dtype, layout))
            ki = _Inputs(lp)
            assert LookupTableChoices._generate_kernel_inputs_key(ki) == lut.inputs_key(lp)
            assert choices.make_lookup_key(ki, "mm", include_device=True) == lut.lookup_key(lp, A100)
            assert choices.make_lookup_key(ki, "mm", include_device=False) == lut.lookup_key(lp)


@needs_torch
def test_exported_entries_pass_pytorchs_lookup_and_name_what_the_template_takes(models, tmp_path, monkeypatch):
    import inspect

    from torch._inductor.kernel.mm import aten_mm, load_kernel_template, mm_template
    from torch._inductor.lookup_table import LookupTableChoices
    from torch._inductor.select_algorithm import TritonTemplate
    assert (mm_template.uid, aten_mm.uid) == ("triton::mm", "aten::mm")
    problems = [lut.LutProblem.contiguous(Problem(m, n, k, "float16", "NN")) for m, n, k in SHAPES[:6]]
    out = tmp_path / "t.json"
    lut.export_lut(problems, out, device=DEVICE, top_k=3, models_dir=models, portable=True)
    table = json.loads(out.read_text())
    monkeypatch.setattr(LookupTableChoices, "_get_device_key", staticmethod(lambda device: A100))
    monkeypatch.setattr(LookupTableChoices, "_get_lookup_table", lambda self: table)
    choices = LookupTableChoices()
    source = load_kernel_template("triton_mm")
    takes = set(inspect.signature(TritonTemplate.generate).parameters) \
        | set(re.findall(r"\b[A-Z_][A-Z_0-9]*\b", source))
    for lp in problems:
        got = choices.lookup_template_configs(_Inputs(lp), "mm", ["triton::mm", "aten::mm"])
        entries = table[lut.lookup_key(lp, A100)]
        assert sum(len(v) for v in got.values()) == len(entries) and "aten::mm" in got
        for cfg in got.get("triton::mm", []):
            assert set(cfg) <= takes, set(cfg) - takes


def test_addmm_keys_are_the_bias_epilogue_and_other_epilogues_are_refused_by_name(tmp_path):
    """An addmm key with alpha = beta = 1 and a row bias broadcast over the
    rows is the bias epilogue, its entries (aten::bias_addmm is the vendor
    call) imported with it; a scaled bias, a full-matrix bias and another op
    are left out, each naming what costlearn cannot map."""
    mats = "(torch.float16, [64, 32], [32, 1]), (torch.float16, [32, 128], [128, 1])"
    table = {
        f"NVIDIA H100+((torch.float16, [64, 128], [0, 1]), {mats})+alpha=1&beta=1+addmm":
            [{"template_id": "aten::bias_addmm", "time_us": 9.0}, {**lut_entry(T1, Problem(64, 128, 32, "float16")),
                                                                    "time_us": 7.5}],
        f"NVIDIA H100+((torch.float16, [128], [1]), {mats})+addmm": [{"template_id": "aten::addmm", "time_us": 9.5}],
        f"NVIDIA H100+((torch.float16, [64, 128], [0, 1]), {mats})+alpha=1&beta=0.5+addmm": [],
        f"NVIDIA H100+((torch.float16, [64, 128], [128, 1]), {mats})+alpha=1&beta=1+addmm": [],
        f"NVIDIA H100+((torch.float32, [1, 128], [128, 1]), {mats})+addmm": [],
        f"NVIDIA H100+({mats})+bmm": [],
    }
    f = tmp_path / "inductor_lut_addmm.json"
    f.write_text(json.dumps(table, indent=1))
    got = lut_sources.read_table(f)
    assert [lp.problem for lp in got.problems] == [Problem(64, 128, 32, "float16", epilogue="bias")]
    assert sorted((m.config.config_id, m.time_us, m.epilogue) for m in got.measurements) == \
        [(T1.config_id, 7.5, "bias"), ("vendor", 9.0, "bias")]
    why = [w for _, w in got.skipped]
    assert why[0] == ("entry 0: vendor of 64x128x32 float16 NN +bias was read at line 2 with time_us 9; the first "
                      "is kept, not this 9.5")          # aten::addmm of the [128] bias: the same problem, timed again
    why = why[1:]
    assert len(why) == 4
    assert "beta=0.5" in why[0] and "scaled" in why[0]
    assert "bias of shape [64, 128] and strides [128, 1]" in why[1] and "full-matrix" in why[1]
    assert "torch.float32 bias and torch.float16 operands" in why[2]
    assert why[3].startswith("op 'bmm'")
