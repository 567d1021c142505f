"""PyTorch Inductor's template lookup table (costlearn.interop.inductor.lut):
keys, entries and the choice rule; export from a shapes file, a log and a
recorded table; and, where torch is installed (``costlearn[inductor]``), the
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
                                 reason="PyTorch 2.13+ not installed (pip install 'costlearn[inductor]')")
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
    assert f"--out '{tmp_path}': give the JSON file to write" in capsys.readouterr().err
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


@needs_torch
def test_the_readmes_way_to_turn_the_table_on_gives_inductor_lookuptablechoices():
    code = ("from torch._inductor import config\nfrom torch._inductor.lookup_table import LookupTableChoices\n"
            "from torch._inductor.virtualized import V\nconfig.inductor_choices_class = LookupTableChoices\n"
            "assert type(V.choices) is LookupTableChoices\n")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0



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


# -- hostile tables (Issue 62) --------------------------------------------------------

from costlearn.interop.inductor import lut_keys  # noqa: E402

KEY = "NVIDIA A100-SXM4-80GB+((torch.float16, [512, 256], [256, 1]), (torch.float16, [256, 1024], [1024, 1]))+mm"
P512 = Problem(512, 1024, 256, "float16")


def _cli(*argv):
    from costlearn.cli import main
    return main([str(a) for a in argv])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_a_key_that_made_the_key_pattern_backtrack_is_refused_by_length_and_split_in_linear_time(
        monkeypatch, tmp_path, capsys, models):
    """The key pattern backtracked: a 40,002-character key took 2.5 s, a
    250 KB table with one such key kept `import inductor-lut` busy 100 s."""
    import time
    for key in ("+((" * 13334, "((a))+" + "=" * 40000, "((" + "+=" * 500_000 + "))+mm"):
        with pytest.raises(ValueError, match=f"a key of {len(key)} characters .*longer than the 1024"):
            lut_keys.split_key(key)
    # the parsing itself is linear: with no length limit, 1 MB keys of each shape are split at once
    monkeypatch.setattr(lut_keys, "MAX_KEY_CHARS", 10**8)
    t0 = time.perf_counter()
    for key, says in (("+((" * 333_334, "does not end in"), ("((a))+" + "=" * 10**6 + "+mm", None),
                      ("a+((" * 250_000 + "))+mm", None), ("((" + "))+" * 333_334 + "mm", None)):
        if says:
            with pytest.raises(ValueError, match=says):
                lut_keys.split_key(key)
        else:
            assert lut_keys.split_key(key).op == "mm"
    assert time.perf_counter() - t0 < 2
    monkeypatch.undo()
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({"+((" * 333_334: [{"template_id": "aten::mm", "time_us": 1.0}],
                             KEY: [{"template_id": "aten::mm", "time_us": 2.0}]}, indent=1))
    t0 = time.perf_counter()
    got = lut_sources.read_table(f)
    assert time.perf_counter() - t0 < 2
    assert [lp.problem for lp in got.problems] == [P512] and [m.time_us for m in got.measurements] == [2.0]
    assert got.skipped == [(2, "a key of 1000002 characters ('+((+((+((+((+((+((+((+((+((+((+((+((...): longer "
                               "than the 1024 a lookup-table key can be; not read")]
    f.write_text(json.dumps({"+((" * 83_334: []}))
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 2
    assert "a key of 250002 characters" in _one_line(capsys)
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--from-table", f,
                "--out", tmp_path / "t.json") == 2
    assert "a key of 250002 characters" in _one_line(capsys) and not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("key, value, says", [
    ("time_us", 10**400, "time_us=1" + "0" * 56 + "... is not a finite positive time"),
    ("time_us", -3, "time_us=-3 is not a finite positive time"), ("time_ms", 0, "time_ms=0 is not a finite positive"),
    ("time_us", float("nan"), "time_us=nan is not a finite"), ("time_ms", -float("inf"), "time_ms=-inf is not a"),
    ("time_ms", 1e308, "time_ms=1e+308 is not a finite"), ("time_us", True, "time_us=True is not a number"),
    ("time_us", [1], "time_us=[1] is not a number"), ("time_ms", {"a": 1}, "time_ms={'a': 1} is not a number"),
    ("time_us", "1" * 100, "time_us='" + "1" * 56 + "... is not a number"),
], ids=["10**400", "negative", "zero", "nan", "-inf", "1e308-ms", "bool", "list", "dict", "str"])
def test_a_time_of_10_to_the_400_or_of_a_wrong_kind_skips_its_entry_with_its_reason(tmp_path, capsys, key, value,
                                                                                    says):
    """`"time_us": 10**400` raised OverflowError through `import inductor-lut`."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({KEY: [{"template_id": "aten::mm", key: value}, {**lut_entry(T1, P512), "time_us": 5.0}]}))
    got = lut_sources.read_table(f)
    assert [(m.config, m.time_us) for m in got.measurements] == [(T1, 5.0)]
    assert len(got.skipped) == 1 and got.skipped[0][0] == 1 and got.skipped[0][1].startswith(f"entry 0: {says}")
    assert len(got.skipped[0][1]) < 120
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 0
    cap = capsys.readouterr()
    assert "imported 1 rows" in cap.out and f"line 1: entry 0: {says}" in cap.out and "Traceback" not in cap.err


def test_a_recorded_time_of_inf_is_a_failed_measurement(tmp_path):
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({KEY: [{"template_id": "aten::mm", "time_us": float("inf")},
                                   {**lut_entry(T1, P512), "time_ms": 1e400, "time_us": float("inf")}]}))
    got = lut_sources.read_table(f)
    assert got.skipped == [] and [(m.config, m.error) for m in got.measurements] == [
        (VENDOR, "recorded time inf (the choice failed to compile or run)"),
        (T1, "recorded time inf (the choice failed to compile or run)")]
    assert all(m.time_us != m.time_us for m in got.measurements)                  # NaN


@pytest.mark.parametrize("text, says", [
    ('{"k": [{"time_us": ' + "[" * 100_000 + "]" * 100_000 + "}]}", "JSON nested too deep to read"),
    ('{"%s": [{"template_id": "aten::mm", "time_us": 1%s}]}' % (KEY, "0" * 5000),
     "a number of more than 4300 digits; a lookup table"),
    ('{"%s": [{"template_id": "aten::mm", "time_us": 1, "x": [%s]}]}' % (KEY, "9" * 4400),
     "a number of more than 4300 digits"),
], ids=["nested-100000-deep", "a-5001-digit-time", "a-4400-digit-field"])
def test_a_table_nested_too_deep_or_with_a_number_over_the_digit_limit_is_one_clear_error(tmp_path, capsys, models,
                                                                                         text, says):
    """A 5,001-digit time was a bare `Exceeds the limit (4300 digits) for integer string conversion` naming no
    file."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(text)
    with pytest.raises(InteropError, match=re.escape(f"{f}: {says}")):
        lut_sources.read_table(f)
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 2
    assert says in _one_line(capsys) and not (tmp_path / "data").exists()
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--from-table", f,
                "--out", tmp_path / "t.json") == 2
    assert says in _one_line(capsys) and not (tmp_path / "t.json").exists()


def test_entries_with_a_time_but_no_valid_config_are_not_called_untimed(tmp_path, capsys):
    """A table whose entries carried time_us but an invalid config (BLOCK_M 10**400, a list, an unknown template)
    was refused with "no entry carries a time; PyTorch's recorder writes none"."""
    f = tmp_path / "inductor_lut_1.json"
    entry = {**lut_entry(T1, P512), "time_us": 5.0}
    f.write_text(json.dumps({KEY: [{**entry, "BLOCK_M": 10**400}, {**entry, "BLOCK_N": [64]},
                                   {"template_id": "triton::persistent_tma_mm", "time_us": 5.0},
                                   {**entry, "time_us": -1}, lut_entry(T2, P512)]}))
    with pytest.raises(InteropError) as e:
        import_file("inductor-lut", f, device="a100", data_root=tmp_path / "data")
    said = str(e.value)
    assert "no entry carries a time" not in said and "PyTorch's recorder" not in said
    assert said.startswith(f"{f}: 4 entries carry a time, but none is a valid measurement (a triton_mm config and a "
                           "finite positive time; line 1: entry 0: ")
    assert "must be an int in [16, 4096]; line 1: entry 1: " in said and "block_n=[64]" in said
    assert "entry 2: template_id 'triton::persistent_tma_mm' is no triton_mm template; ...)" in said
    assert len(said) < 600
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 2
    assert "4 entries carry a time, but none is a valid measurement" in _one_line(capsys)
    f.write_text(json.dumps({KEY: [{"template_id": "aten::mm", "time_ms": "fast"}]}))
    with pytest.raises(InteropError, match=r"1 entry carries a time, but it is no valid.*time_ms='fast' is not a "):
        import_file("inductor-lut", f, device="a100", data_root=tmp_path / "data")


def test_a_problem_of_a_layout_or_epilogue_the_model_does_not_serve_is_left_out_by_name_not_the_whole_export(
        models, tmp_path, capsys):
    """One TT problem in a shapes file or a recorded table made `export inductor-lut` write nothing."""
    shapes, out = tmp_path / "s.txt", tmp_path / "t.json"
    shapes.write_text("512 1024 256 float16 NN\n512 1024 256 float16 TT\n64 64 64 float16 TT\n")
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--shapes-file", shapes,
                "--out", out) == 0
    cap = capsys.readouterr()
    assert "wrote 1 keys for 1 problems" in cap.out and list(json.loads(out.read_text())) == [KEY]
    assert "left out the 2 float16 TT problems of the shapes file (e.g. 512x1024x256 float16 TT): the " \
           "triton_mm/float16 model of a100 serves layouts ['NN', 'NT', 'TN'], epilogues ['none']" in cap.err
    table = tmp_path / "inductor_lut_rec.json"
    tt = lut.lookup_key(lut.LutProblem.contiguous(Problem(512, 1024, 256, "float16", "TT")), A100)
    mats = "(torch.float16, [64, 32], [32, 1]), (torch.float16, [32, 128], [128, 1])"
    table.write_text(json.dumps({tt: [], KEY: [], f"{A100}+((torch.float16, [128], [1]), {mats})+addmm": []}))
    out.unlink()
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--from-table", table,
                "--out", out) == 0
    cap = capsys.readouterr()
    assert list(json.loads(out.read_text())) == [KEY]
    assert "left out the 1 float16 TT problems of the table" in cap.err
    assert "left out the 1 float16 NN bias-epilogue problems of the table (e.g. 64x128x32 float16 NN +bias): the " \
           "triton_mm/float16 model of a100 serves layouts ['NN', 'NT', 'TN'], epilogues ['none']" in cap.err
    shapes.write_text("512 1024 256 float16 TT\n")                          # nothing left: refused, nothing written
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--shapes-file", shapes,
                "--out", tmp_path / "none.json") == 2
    assert "left out the 1 float16 TT problems of the shapes file" in _one_line(capsys)
    assert not (tmp_path / "none.json").exists()


def test_keys_written_with_escapes_are_found_on_their_lines_in_one_pass(tmp_path):
    """A key written with other escapes than json.dumps' was looked for through the rest of the file, once per key:
    1.7 MB of such keys took 12 s, and each was named by its position, not its line."""
    import time
    keys = [f"((torch.float16, [{i + 1}, 8], [8, 1]), (torch.float16, [8, 8], [8, 1]))+bmm" for i in range(20_000)]
    f = tmp_path / "inductor_lut_1.json"
    f.write_text('{\n"note": [{"' + keys[5].replace("b", "\\u0062") + '": []}],\n'
                 + ",\n".join('"' + k.replace("b", "\\u0062") + '"\n  : [{"x": "\\"]"}]' for k in keys) + "}")
    t0 = time.perf_counter()
    got = lut_sources.read_table(f)
    assert time.perf_counter() - t0 < 2
    assert got.skipped.total == 20_001 and [line for line, _ in got.skipped] == [2] + [3 + 2 * i for i in range(999)]
    assert got.skipped[1][1].startswith("op 'bmm'")


def test_a_key_whose_value_is_no_list_is_left_out_by_name_not_the_whole_table(tmp_path, capsys):
    """One key with a value that is not a list refused the whole table without naming it."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({KEY: [{"template_id": "aten::mm", "time_us": 3.0}], "x": 5, "y": {"a": 1},
                             "z": "s" * 1000}, indent=1))
    got = lut_sources.read_table(f)
    assert len(got.measurements) == 1
    assert got.skipped == [(8, "key 'x': its value is int 5, not a list of entries"),
                           (9, "key 'y': its value is dict {'a': 1}, not a list of entries"),
                           (12, "key 'z': its value is str '" + "s" * 36 + "..., not a list of entries")]
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 0
    assert "line 8: key 'x': its value is int 5" in capsys.readouterr().out
    for text, kind in (("[1, 2]", "an array"), ("null", "null"), ('"a"', "a string"), ("7", "a number")):
        f.write_text(text)
        with pytest.raises(InteropError, match=f"the file holds {kind}; a lookup table is a JSON object"):
            lut_sources.read_table(f)


def test_a_fifo_or_a_device_as_a_source_is_refused_not_waited_on_and_an_enormous_file_by_its_size(models, tmp_path,
                                                                                                capsys):
    """`export inductor-lut --from-table FIFO` (or --shapes-file, --from-log) waited forever for a writer, and
    /dev/zero read forever."""
    import os
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for flag in ("--shapes-file", "--from-table", "--from-log"):
        for path in (fifo, "/dev/zero"):
            assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, flag, path,
                        "--out", tmp_path / "t.json") == 2
            assert f"{path}: not a regular file" in _one_line(capsys)
        assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, flag, tmp_path,
                    "--out", tmp_path / "t.json") == 2
        assert f"{tmp_path}: a folder; give the file to read" in _one_line(capsys)
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate((256 << 20) + 1)                            # sparse: no disk written
    for read in (lut_sources.read_table, lut_sources.read_shapes_file):
        with pytest.raises(InteropError, match=f"{big}: 268435457 bytes; a file read whole may have at most "
                                               r"268435456 \(256 MiB\)"):
            read(big)
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("line, says", [
    ("512 1024 256 " + "f" * 1_000_000, "dtype='" + "f" * 56 + "...; allowed: "),
    ("512 1024 256 float16 " + "N" * 1_000_000, "layout='" + "N" * 56 + "...; allowed: "),
    ("x" * 1_000_000, "'" + "x" * 76 + "...; each line is 'M N K dtype [layout]'"),
], ids=["dtype", "layout", "line"])
def test_a_shapes_line_of_a_megabyte_is_named_cut_not_repeated(models, tmp_path, capsys, line, says):
    """A 1 MB token in a shapes file was repeated whole in the one-line error (a 1 MB line)."""
    f = tmp_path / "s.txt"
    f.write_text(line + "\n")
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--shapes-file", f,
                "--out", tmp_path / "t.json") == 2
    err = _one_line(capsys)
    assert f"{f}:1: {says}" in err and len(err) < 400


@pytest.mark.parametrize("name", ["bad\nname", "x" * 5000, "\x01", " ", "a+b", "\ud800"],
                         ids=["newline", "5000-chars", "control", "blank", "plus", "lone-surrogate"])
def test_a_device_name_torch_could_not_report_is_refused_on_export_and_its_key_left_out_on_read(
        models, tmp_path, capsys, name):
    """`--device-name $'bad\\nname'` (or 5,000 characters) wrote keys no GPU reports and costlearn's own reader
    refuses; such a key in a recorded table named a device the import was then refused for."""
    shapes = tmp_path / "s.txt"
    shapes.write_text("512 1024 256 float16\n")
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--shapes-file", shapes,
                "--device-name", name, "--out", tmp_path / "t.json") == 2
    assert "must be the GPU's name as torch reports it" in _one_line(capsys)
    assert not (tmp_path / "t.json").exists()
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({name + KEY[KEY.index("+(("):]: [{"template_id": "aten::mm", "time_us": 1.0}],
                             KEY: [{"template_id": "aten::mm", "time_us": 2.0}]}))
    got = lut_sources.read_table(f)
    assert got.devices == (A100,) and [m.time_us for m in got.measurements] == [2.0]
    why = got.skipped[0][1]
    assert len(got.skipped) == 1 and len(why) < 250
    assert ("longer than the 1024 a lookup-table key can be" if len(name) > 1024 else
            "must be the GPU's name as torch reports it") in why


def test_keys_with_digits_torch_does_not_print_are_left_out(tmp_path):
    """Key numbers matched Unicode digits (`[５１２, 256]` read as 512) and leading zeros."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({KEY.replace("[512, 256]", "[５１２, 256]"): [], KEY.replace("[512, 256]", "[0512, 256]"): [],
                             KEY.replace("[256, 1]", "[256, 01]"): [], KEY: []}))
    got = lut_sources.read_table(f)
    assert [lp.problem for lp in got.problems] == [P512]
    assert len(got.skipped) == 3 and all("is not an mm key costlearn reads" in why for _, why in got.skipped)


def test_export_from_a_log_names_the_lines_it_leaves_out(models, tmp_path, capsys):
    """`export inductor-lut --from-log` dropped a log's malformed lines without a word."""
    log = tmp_path / "log.txt"
    write_log(log, shapes=SHAPES[:1], layouts=["NN"])
    lines = log.read_text().splitlines()
    bad = lines[2].replace("256,", "1" + "0" * 5000 + ",", 1)
    log.write_text("\n".join(lines + [bad] * 7) + "\n")
    out = tmp_path / "t.json"
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--from-log", log,
                "--out", out) == 0
    err = capsys.readouterr().err
    first = len(lines) + 1
    assert f"{log}:{first}: left out: m=100000000000... (5001 digits) is above 2147483647" in err
    assert f"{log}:{first + 4}: left out:" in err and "... 2 more left out" in err and len(json.loads(out.read_text())) == 1
    log.write_text("\n".join(lines[:2] + [bad]) + "\n")
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--from-log", log,
                "--out", tmp_path / "none.json") == 2
    assert f"{log}: no measurement found; line 3: m=100000000000... (5001 digits)" in _one_line(capsys)


def test_a_key_written_twice_or_a_config_timed_twice_is_named_not_dropped_silently(tmp_path):
    """JSON keeps a repeated key's last entries: the first were dropped without a word; and a config listed twice
    for one problem (two entries, or a device and a device-agnostic key) with another time kept the first quietly."""
    agnostic = KEY[KEY.index("+((") + 1:]
    f = tmp_path / "inductor_lut_1.json"
    f.write_text('{"%s": [{"template_id": "aten::mm", "time_us": 1.0}],\n'
                 '"%s": [{"template_id": "aten::mm", "time_us": 2.0}, {"template_id": "aten::mm", "time_us": 2.01},\n'
                 '       {"template_id": "aten::mm", "time_us": 9.0}],\n'
                 '"%s": [{"template_id": "aten::mm", "time_us": 2.0}, {"template_id": "aten::mm", "time_us": 3.0}]}'
                 % (KEY, KEY, agnostic))
    got = lut_sources.read_table(f)
    assert [(m.line, m.time_us) for m in got.measurements] == [(2, 2.0)]
    assert got.skipped[1:] == [
        (2, "entry 2: vendor of 512x1024x256 float16 NN was read at line 2 with time_us 2; the first is kept, not "
            "this 9"),
        (4, "entry 1: vendor of 512x1024x256 float16 NN was read at line 2 with time_us 2; the first is kept, not "
            "this 3")]
    line, why = got.skipped[0]
    assert line == 1 and why.startswith("key 'NVIDIA A100-SXM4-80GB+((torch.float16") and \
        why.endswith("is written again at line 2: JSON keeps the last one's entries, not these")


def test_a_table_of_a_million_bad_entries_keeps_a_thousand_reasons_and_counts_all(tmp_path, capsys):
    """Every skipped entry's reason was kept: memory grew with the file."""
    f = tmp_path / "inductor_lut_1.json"
    f.write_text(json.dumps({KEY: [7] * 200_000 + [{"template_id": "aten::mm", "time_us": 1.0}]}))
    got = lut_sources.read_table(f)
    assert len(got.skipped) == 1000 and got.skipped.total == 200_000 and len(got.measurements) == 1
    assert _cli("import", "inductor-lut", f, "--preset", "a100", "--data", tmp_path / "data") == 0
    assert "skipped 200000 lines" in capsys.readouterr().out


def test_two_layouts_of_one_matmul_to_inductor_share_a_key_without_aborting_the_export(models, tmp_path, capsys):
    """4096x1x1 NN and NT are the same tensors to Inductor (a 1x1 operand is both row- and column-major): the
    export was refused whole, blaming float32 and tfloat32."""
    shapes, out = tmp_path / "s.txt", tmp_path / "t.json"
    shapes.write_text("4096 1 1 float16 NN\n4096 1 1 float16 NT\n512 1024 256 float16\n")
    assert _cli("export", "inductor-lut", "--models", models, "--model", DEVICE, "--shapes-file", shapes,
                "--out", out) == 0
    said = capsys.readouterr().out
    assert "wrote 2 keys for 2 problems" in said and "1 more with the key of another of their dtype" in said
    assert len(json.loads(out.read_text())) == 2 and "tfloat32" not in said
