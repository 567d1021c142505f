"""Kernel Tuner interop (costlearn.interop.kernel_tuner): cache files (closed
and as Kernel Tuner leaves them open while tuning) and T4 results in, through
the public import_file; cache and T4 files out, read back by Kernel Tuner
itself. The importer tests need no kernel_tuner; the round trips do."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from costlearn.collect.dataset import load
from costlearn.interop import InteropError, export_dataset, import_file
from costlearn.interop.kernel_tuner import cache_key, load_mapping

M, N, K = 512, 256, 1024

# triton_mm, Kernel Tuner names; SPLIT_K is tuned but not mapped (ignored)
TRITON_KEYS = ["BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps", "num_stages", "SPLIT_K"]
TRITON_MAPPING = {"family": "triton_mm", "dtype": "float16", "layout": "NN",
                  "params": {"BLOCK_SIZE_M": "block_m", "BLOCK_SIZE_N": "block_n", "BLOCK_SIZE_K": "block_k",
                             "num_warps": "num_warps", "num_stages": "num_stages"},
                  "fixed": {"group_m": 8}, "problem_size": ["m", "n", "k"]}

# (values in TRITON_KEYS order, what was recorded); ms unless an error
TRITON_ENTRIES = [
    ((64, 64, 32, 4, 3, 1), {"time": 0.125}),
    ((128, 64, 32, 4, 3, 1), {"time": 0.25}),
    ((64, 128, 32, 8, 3, 1), {"__error__": "CompilationFailedConfig"}),     # Kernel Tuner 1.5's failure form
    ((128, 128, 32, 8, 3, 1), {"time": "RuntimeFailedConfig"}),            # the older form: error as the time
    ((48, 64, 32, 4, 3, 1), {"time": 0.3}),                                # 48: not a triton_mm block size
    ((64, 64, 64, 4, 4, 1), {"time": 0.5}),
]
TRITON_OK = {"m64n64k32_w4_s3_g8": 125.0, "m128n64k32_w4_s3_g8": 250.0, "m64n64k64_w4_s4_g8": 500.0}
TRITON_FAILED = {"m64n128k32_w8_s3_g8": "CompilationFailedConfig", "m128n128k32_w8_s3_g8": "RuntimeFailedConfig"}


def _entry(keys, values, rec):
    e = dict(zip(keys, values))
    e.update(rec)
    if "time" in rec and not isinstance(rec["time"], str):
        e["times"] = [rec["time"]] * 7
    e.update(compile_time=50.0, verification_time=0, benchmark_time=1.0,
             timestamp="2025-01-01 12:00:00.000000+00:00")
    return e


def _header(keys, values_seen, problem_size, kernel="matmul_kernel"):
    return {"device_name": "NVIDIA A100-SXM4-80GB", "kernel_name": kernel, "problem_size": problem_size,
            "tune_params_keys": keys, "tune_params": {k: v for k, v in zip(keys, values_seen)},
            "objective": ["time"], "cache": {}}


def write_triton_cache(path: Path, entries=TRITON_ENTRIES, problem_size=(M, N, K)) -> Path:
    """A closed cache, as Kernel Tuner leaves it after tuning."""
    seen = [sorted({v[i] for v, _ in entries}) for i in range(len(TRITON_KEYS))]
    doc = _header(TRITON_KEYS, seen, list(problem_size))
    doc["cache"] = {cache_key(v): _entry(TRITON_KEYS, v, rec) for v, rec in entries}
    path.write_text(json.dumps(doc, indent=1))
    return path


def write_mapping(path: Path, mapping: dict) -> Path:
    path.write_text(json.dumps(mapping))
    return path


@pytest.fixture
def triton_files(tmp_path):
    return (write_triton_cache(tmp_path / "cache.json"),
            write_mapping(tmp_path / "mapping.json", TRITON_MAPPING), tmp_path / "data")


def _import(path, mapping, data):
    return import_file("kernel-tuner", path, device="a100", data_root=data, mapping=mapping)


def _rows(report):
    df, _ = load(report.folder)
    return df


# ------------------------------------------------------------------------------------------------- importing


def test_cache_import_rows_times_failures_provenance(triton_files):
    cache, mapping, data = triton_files
    rep = _import(cache, mapping, data)
    assert rep.rows_added == 5 and rep.failed == 2
    assert [ln for ln, _ in rep.skipped] == [5] and "power of two" in rep.skipped[0][1]
    df = _rows(rep)
    assert len(df) == 5 and set(df["family"]) == {"triton_mm"} and set(df["dtype"]) == {"float16"}
    assert set(zip(df["m"], df["n"], df["k"])) == {(M, N, K)} and set(df["layout"]) == {"NN"}
    ok = df[df["status"] == "ok"]
    assert dict(zip(ok["config_id"], ok["time_us"])) == pytest.approx(TRITON_OK)
    bad = df[df["status"] == "failed"]
    assert dict(zip(bad["config_id"], bad["error"])) == TRITON_FAILED
    assert bad["time_us"].isna().all()
    assert set(df["source_format"]) == {"kernel-tuner"} and set(df["source_file"]) == {"cache.json"}
    assert set(df["source_sha256"]) == {rep.sha256}
    assert sorted(df["source_line"]) == [1, 2, 3, 4, 6]
    again = _import(cache, mapping, data)
    assert again.already_imported and again.rows_added == 0
    assert len(_rows(again)) == 5 and len(list(rep.folder.glob("part-*.parquet"))) == 1


def _gemm_open_cache(tmp_path):
    """Header by process_cache (json indent "" minus the last "}\\n}"), entries by store_cache ("\\n" + entry
    + ","), never closed; a gemm kernel with its own names, part of the problem from the mapping's shape."""
    keys = ["block_size_x", "block_size_y", "tile_size_x", "tile_size_y", "BK", "loop"]
    entries = [((64, 64, 4, 4, 16, "outer"), {"time": 0.02}),
               ((64, 32, 4, 4, 16, "dot"), {"time": 0.04}),
               ((64, 64, 3, 4, 16, "outer"), {"time": 0.05}),        # 3 does not divide 64: malformed
               ((32, 32, 4, 4, 8, "outer"), {"__error__": "InvalidConfig"})]
    seen = [sorted({v[i] for v, _ in entries}) for i in range(len(keys))]
    text = json.dumps(_header(keys, seen, [N, M]), indent="")[:-3]
    for v, rec in entries:
        text += "\n" + json.dumps({cache_key(v): _entry(keys, v, rec)})[1:-1] + ","
    cache = tmp_path / "open_cache.json"
    cache.write_text(text)
    assert not text.rstrip().endswith("}")
    mapping = write_mapping(tmp_path / "m.json", {
        "family": "gemm", "dtype": "float32", "params": {"block_size_x": "block_n", "block_size_y": "block_m",
                                                         "tile_size_x": "thread_n", "tile_size_y": "thread_m",
                                                         "BK": "block_k", "loop": "loop_order"},
        "fixed": {"smem_pad": 1}, "problem_size": ["n", "m"], "shape": {"k": 2048}})
    return cache, mapping


def test_appended_cache_as_kernel_tuner_writes_it_while_tuning(tmp_path):
    rep = _import(*_gemm_open_cache(tmp_path), tmp_path / "data")
    assert rep.rows_added == 3 and rep.failed == 1
    assert [ln for ln, _ in rep.skipped] == [3] and "divide" in rep.skipped[0][1]
    df = _rows(rep)
    assert set(zip(df["m"], df["n"], df["k"])) == {(M, N, 2048)}
    ok = df[df["status"] == "ok"]
    assert dict(zip(ok["config_id"], ok["time_us"])) == pytest.approx(
        {"m64n64k16_t4x4_outer_p1_row": 20.0, "m32n64k16_t4x4_dot_p1_row": 40.0})
    assert list(df.loc[df["status"] == "failed", "error"]) == ["InvalidConfig"]


@pytest.mark.filterwarnings("ignore:None of the tunable parameters specify thread block dimensions")
def test_gemm_export_with_string_parameters_simulates_in_kernel_tuner(tmp_path):
    kt = pytest.importorskip("kernel_tuner")
    rep = _import(*_gemm_open_cache(tmp_path), tmp_path / "data")
    (path,) = export_dataset("kernel-tuner", rep.folder, tmp_path / "out")
    assert path.name == f"gemm_float32_NN_{M}x{N}x2048.json"
    from kernel_tuner.util import read_cache
    cached = read_cache(str(path), open_cache=False)
    assert cached["tune_params"]["loop_order"] == ["dot", "outer"]
    assert cache_key([64, 64, 16, 4, 4, "outer", 1, "row"]) in cached["cache"]
    results, _ = kt.tune_cache(str(path), quiet=True)
    assert sorted(r["time"] * 1e3 for r in results) == pytest.approx([20.0, 40.0])


def test_open_cache_with_a_truncated_last_line_keeps_the_complete_entries(tmp_path, triton_files):
    cache, mapping, data = triton_files
    closed = json.loads(cache.read_text())
    text = json.dumps({**closed, "cache": {}}, indent="")[:-3]
    for key, e in list(closed["cache"].items())[:2]:
        text += "\n" + json.dumps({key: e})[1:-1] + ","
    text += '\n"64,64,64,4,4,1": {"BLOCK_SIZE_M": 64, "BLOC'
    cut = tmp_path / "killed.json"
    cut.write_text(text)
    rep = _import(cut, mapping, data)
    assert rep.rows_added == 2 and rep.skipped[0][0] == 3 and "truncated" in rep.skipped[0][1]


def _t4(compile_key: str) -> dict:
    def result(cfg, inv="correct", time=None, unit="ms"):
        r = {"timestamp": "2025-01-01 12:00:00+00:00", "configuration": cfg,
             "times": {compile_key: 40.0, "benchmark": 1.0, "framework": 0.1, "search_algorithm": 0.0,
                       "validation": 0, "runtimes": [time] * 3 if time else []},
             "invalidity": inv, "correctness": 1, "objectives": ["time"],
             "measurements": [{"name": "time", "value": time, "unit": unit}] if time else
             [{"name": "__error__", "value": "", "unit": ""}]}
        return r
    c = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=32, num_warps=4, num_stages=3, SPLIT_K=1)
    return {"schema_version": "1.0.0", "metadata": {"timeunit": "milliseconds"}, "results": [
        result(c, time=0.125),
        result({**c, "BLOCK_SIZE_M": 128}, time=250.0, unit="us"),
        result({**c, "num_warps": 8}, inv="compile"),
        {**result({**c, "num_stages": 4}, time=0.3), "configuration": {"BLOCK_SIZE_M": 64}},   # lacks params
    ]}


@pytest.mark.parametrize("compile_key", ["compilation_time", "compilation"])
def test_t4_import_with_either_compilation_key(tmp_path, compile_key):
    t4 = tmp_path / "t4.json"
    t4.write_text(json.dumps(_t4(compile_key)))
    mapping = dict(TRITON_MAPPING, problem_size=[], shape={"m": M, "n": N, "k": K})
    rep = _import(t4, write_mapping(tmp_path / "m.json", mapping), tmp_path / "data")
    assert rep.rows_added == 3 and rep.failed == 1
    assert [ln for ln, _ in rep.skipped] == [4] and "BLOCK_SIZE_N" in rep.skipped[0][1]
    df = _rows(rep)
    ok = df[df["status"] == "ok"]
    assert dict(zip(ok["config_id"], ok["time_us"])) == pytest.approx(
        {"m64n64k32_w4_s3_g8": 125.0, "m128n64k32_w4_s3_g8": 250.0})
    assert list(df.loc[df["status"] == "failed", "error"]) == ["compile"]
    assert sorted(df["source_line"]) == [1, 2, 3]


def test_t4_without_a_problem_size_needs_the_shape(tmp_path):
    t4 = tmp_path / "t4.json"
    t4.write_text(json.dumps(_t4("compilation")))
    with pytest.raises(InteropError, match="records no problem_size"):
        _import(t4, write_mapping(tmp_path / "m.json", TRITON_MAPPING), tmp_path / "data")


# ----------------------------------------------------------------------------------------------- bad input


def _no_part(data: Path) -> bool:
    return not list(data.glob("*/part-*.parquet"))


def test_empty_file_is_refused(tmp_path, triton_files):
    _, mapping, data = triton_files
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(InteropError, match="empty file"):
        _import(empty, mapping, data)
    blank = tmp_path / "blank.json"
    blank.write_text("  \n\n")
    with pytest.raises(InteropError, match="empty file"):
        _import(blank, mapping, data)
    assert _no_part(data)


def test_inductor_log_is_refused_as_another_format(tmp_path, triton_files):
    _, mapping, data = triton_files
    log = tmp_path / "mm.txt"
    log.write_text('{"shared_memory": 166912, "device_capa": [8, 0], "name": "mm"}\n'
                   "m,k,n,mat1_dtype,mat2_dtype,choice,feedback\n"
                   "512,1024,256,torch.float16,torch.float16,extern_mm,0.01\n")
    with pytest.raises(InteropError, match="is this another format") as e:
        _import(log, mapping, data)
    assert "inductor" in str(e.value)
    assert _no_part(data)


def test_mapping_naming_an_unknown_family_parameter(tmp_path, triton_files):
    cache, _, data = triton_files
    bad = dict(TRITON_MAPPING, params={**TRITON_MAPPING["params"], "num_warps": "warps"})
    with pytest.raises(InteropError, match=r"params\['num_warps'\]='warps' is not a parameter of the "
                                           r"'triton_mm' family; allowed: \['block_m'") as e:
        _import(cache, write_mapping(tmp_path / "bad.json", bad), data)
    assert "bad.json" in str(e.value) and "num_stages" in str(e.value)
    assert _no_part(data)


def test_mapping_with_an_unknown_family(tmp_path, triton_files):
    cache, _, data = triton_files
    with pytest.raises(InteropError, match=r"family='cutlass'; allowed: \['gemm', 'triton_mm'\]"):
        _import(cache, write_mapping(tmp_path / "bad.json", dict(TRITON_MAPPING, family="cutlass")), data)
    assert _no_part(data)


@pytest.mark.parametrize("change, says", [
    ({"dtype": "float64"}, "dtype='float64': the 'triton_mm' family supports"),
    ({"layout": "XX"}, "layout='XX'"),
    ({"objective": "time"}, "unknown keys ['objective']; allowed: ['family'"),
    ({"problem_size": ["m", "n", "x"]}, "problem_size[2]='x'; allowed: 'm', 'n', 'k' or null"),
    ({"problem_size": ["m", "n"]}, "extents ['k'] are unknown"),
    ({"fixed": {"group_m": 8, "swizzle": 1}}, "fixed['swizzle'] is not a parameter"),
    ({"params": {"BLOCK_SIZE_M": "block_m"}}, "['block_n', 'block_k', 'num_warps', 'num_stages'] are neither mapped"),
    ({"shape": {"m": 0}}, "shape['m']=0; must be an int in [1, 2**31 - 1]"),
])
def test_bad_mappings_name_the_value_and_what_is_allowed(tmp_path, change, says):
    path = write_mapping(tmp_path / "m.json", {**TRITON_MAPPING, **change})
    with pytest.raises(InteropError) as e:
        load_mapping(path)
    assert says in str(e.value) and "m.json" in str(e.value)


def test_mapping_file_not_json_or_not_an_object(tmp_path):
    p = tmp_path / "m.json"
    p.write_text("family: gemm")
    with pytest.raises(InteropError, match="not JSON"):
        load_mapping(p)
    p.write_text("[1, 2]")
    with pytest.raises(InteropError, match="must be a JSON object"):
        load_mapping(p)
    with pytest.raises(InteropError, match="no such file"):
        load_mapping(tmp_path / "absent.json")


def test_problem_size_of_another_length_is_refused(tmp_path, triton_files):
    _, mapping, data = triton_files
    cache = write_triton_cache(tmp_path / "two.json", problem_size=(M, N))
    with pytest.raises(InteropError, match=r"problem_size=\[512, 256\] has 2 entries, the mapping .* names 3"):
        _import(cache, mapping, data)
    assert _no_part(data)


def test_mapped_parameter_the_cache_does_not_tune(tmp_path, triton_files):
    cache, _, data = triton_files
    m = dict(TRITON_MAPPING, params={**TRITON_MAPPING["params"], "GROUP_M": "group_m"}, fixed={})
    with pytest.raises(InteropError, match=r"names parameters \['GROUP_M'\] this cache does not tune"):
        _import(cache, write_mapping(tmp_path / "m2.json", m), data)
    assert _no_part(data)


# ------------------------------------------------------------------------------------------ round trips


def _dataset(triton_files, tmp_path):
    """The imported triton cache plus a second measurement of one config, so the export takes a median."""
    cache, mapping, data = triton_files
    rep = _import(cache, mapping, data)
    again = write_triton_cache(tmp_path / "cache2.json", entries=[((64, 64, 32, 4, 3, 1), {"time": 0.175})])
    _import(again, mapping, data)
    want = dict(TRITON_OK, m64n64k32_w4_s3_g8=150.0)          # median of 125 and 175
    return rep.folder, want


@pytest.mark.filterwarnings("ignore:None of the tunable parameters specify thread block dimensions")
def test_export_cache_round_trip_through_kernel_tuner(triton_files, tmp_path):
    kt = pytest.importorskip("kernel_tuner")
    folder, want = _dataset(triton_files, tmp_path)
    paths = export_dataset("kernel-tuner", folder, tmp_path / "out")
    assert [p.name for p in paths] == [f"triton_mm_float16_NN_{M}x{N}x{K}.json"]
    path = paths[0]
    before = path.read_text()
    from kernel_tuner.util import read_cache
    cached = read_cache(str(path), open_cache=False)
    keys = cached["tune_params_keys"]
    assert keys == ["block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m"]
    assert cached["problem_size"] == [M, N, K] and cached["device_name"] == "NVIDIA A100-SXM4-80GB"
    assert cached["tune_params"]["block_m"] == [64, 128] and cached["tune_params"]["group_m"] == [8]
    for key, e in cached["cache"].items():
        assert key == cache_key(e[k] for k in keys) and "__error__" not in e
    from costlearn.families.triton_mm import TritonMMConfig
    got = {TritonMMConfig(*(e[k] for k in keys)).config_id: e["time"] * 1e3 for e in cached["cache"].values()}
    assert got == pytest.approx(want)
    assert sorted(cached["cache"][cache_key([64, 64, 32, 4, 3, 8])]["times"]) == pytest.approx([0.125, 0.175])

    measured = set(cached["cache"])

    def only_measured(p):          # a def, not a lambda: Kernel Tuner parses a lambda's source text
        return cache_key(p.values()) in measured

    results, env = kt.tune_kernel(
        cached["kernel_name"], "__global__ void matmul_kernel() {}", (M, N, K), [], cached["tune_params"],
        lang="CUDA", cache=str(path), simulation_mode=True, quiet=True, verbose=False,
        restrictions=only_measured)
    sim = {TritonMMConfig(*(r[k] for k in keys)).config_id: r["time"] * 1e3 for r in results}
    assert sim == pytest.approx(want)
    assert env["best_config"]["time"] == pytest.approx(min(want.values()) / 1e3)
    # Kernel Tuner's own helper infers the arguments and restrictions from the file
    results2, _ = kt.tune_cache(str(path), quiet=True)
    assert sorted(r["time"] for r in results2) == pytest.approx(sorted(v / 1e3 for v in want.values()))
    assert path.read_text() == before                     # simulation left the file as it was


def test_export_t4_valid_against_kernel_tuners_schemas_and_reimports(triton_files, tmp_path):
    pytest.importorskip("kernel_tuner")
    jsonschema = pytest.importorskip("jsonschema")
    from kernel_tuner.file_utils import output_file_schema
    folder, want = _dataset(triton_files, tmp_path)
    paths = export_dataset("t4", folder, tmp_path / "t4")
    assert [p.name for p in paths] == [f"triton_mm_float16_NN_{M}x{N}x{K}_results.json",
                                       f"triton_mm_float16_NN_{M}x{N}x{K}_metadata.json"]
    results, metadata = (json.loads(p.read_text()) for p in paths)
    for doc, target in ((results, "results"), (metadata, "metadata")):
        version, schema = output_file_schema(target)
        assert doc["schema_version"] == version
        jsonschema.validate(doc, schema)
    assert all(r["invalidity"] == "correct" for r in results["results"])
    mapping = write_mapping(tmp_path / "identity.json", {
        "family": "triton_mm", "dtype": "float16", "layout": "NN", "problem_size": ["m", "n", "k"],
        "params": {f: f for f in ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m")}})
    rep = _import(paths[0], mapping, tmp_path / "data2")
    assert rep.rows_added == len(want) and rep.failed == 0 and not rep.skipped
    df = _rows(rep)
    assert dict(zip(df["config_id"], df["time_us"])) == pytest.approx(want)
    assert set(zip(df["m"], df["n"], df["k"])) == {(M, N, K)}


def test_export_refuses_an_unknown_format_and_an_empty_dataset(tmp_path):
    with pytest.raises(InteropError, match="allowed"):
        export_dataset("csv", tmp_path, tmp_path / "out")
    from costlearn.core.device import preset
    from costlearn.interop.common import device_folder
    folder = device_folder(tmp_path / "data", preset("a100"))
    with pytest.raises(InteropError, match="no valid rows"):
        export_dataset("kernel-tuner", folder, tmp_path / "out")


@pytest.mark.parametrize("device_name", [["NVIDIA A100-SXM4-80GB"], 80, {"name": "NVIDIA A100-SXM4-80GB"}])
def test_a_cache_whose_device_name_is_not_a_string_is_refused(tmp_path, triton_files, device_name):
    """A device_name that was a list or a number skipped the device
    check and the cache was imported into another device's folder."""
    cache, mapping, data = triton_files
    doc = json.loads(cache.read_text())
    doc["device_name"] = device_name
    cache.write_text(json.dumps(doc))
    with pytest.raises(InteropError, match="device_name is .*not a string"):
        import_file("kernel-tuner", cache, device="h100", data_root=data, mapping=mapping)
    assert _no_part(data)


def test_a_file_of_another_device_or_dtype_than_given_is_refused(tmp_path, triton_files):
    """Regression: a cache measured on an A100 imported into data/h100 with
    --device h100, and a T4 file of bfloat16 imported as float16."""
    cache, mapping, data = triton_files
    with pytest.raises(InteropError, match=r"measured on 'NVIDIA A100-SXM4-80GB' \('a100'\), but --preset is "
                                           r"'NVIDIA H100 80GB HBM3'"):
        import_file("kernel-tuner", cache, device="h100", data_root=data, mapping=mapping)
    assert _no_part(data)
    t4 = tmp_path / "t4.json"
    doc = _t4("compilation_time")
    doc.setdefault("metadata", {}).update(dtype="bfloat16")
    t4.write_text(json.dumps(doc))
    with pytest.raises(InteropError, match="the file says dtype 'bfloat16'"):
        import_file("kernel-tuner", t4, device="a100", data_root=data, mapping=mapping)
    assert _no_part(data)
    with pytest.raises(InteropError, match="a folder; give the file"):
        import_file("kernel-tuner", tmp_path, device="a100", data_root=data, mapping=mapping)


# ------------------------------------------------------------------------------------------- hostile numbers


def test_a_cache_time_too_large_for_a_float_is_skipped_with_its_reason(tmp_path, triton_files):
    _, mapping, data = triton_files
    entries = [TRITON_ENTRIES[0], ((128, 64, 32, 4, 3, 1), {"time": 10**400})]
    rep = _import(write_triton_cache(tmp_path / "huge.json", entries), mapping, data)
    assert rep.rows_added == 1
    assert [ln for ln, _ in rep.skipped] == [2] and "not a finite positive time" in rep.skipped[0][1]
    assert len(rep.skipped[0][1]) < 240


@pytest.mark.parametrize("change, says", [
    (lambda d: d["results"][0]["measurements"][0].update(value=10**400), "not a finite positive time"),
    (lambda d: d["results"][0]["measurements"][0].update(unit=["ms"]), "time unit ['ms']"),
    (lambda d: (d["results"][0]["measurements"][0].pop("unit"), d["metadata"].update(timeunit={"a": 1})),
     "time unit {'a': 1}"),
], ids=["value-10**400", "unit-a-list", "timeunit-a-dict"])
def test_a_t4_time_or_unit_of_a_wrong_kind_is_skipped_with_its_reason(tmp_path, change, says):
    doc = _t4("compilation")
    change(doc)
    t4 = tmp_path / "t4.json"
    t4.write_text(json.dumps(doc))
    mapping = dict(TRITON_MAPPING, problem_size=[], shape={"m": M, "n": N, "k": K})
    rep = _import(t4, write_mapping(tmp_path / "m.json", mapping), tmp_path / "data")
    assert rep.rows_added == 2 and 1 in [ln for ln, _ in rep.skipped]
    assert says in dict(rep.skipped)[1]


@pytest.mark.parametrize("text, says", [
    ('{"cache": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested too deep"),
    ('{"tune_params_keys": [], "cache": {}, "problem_size": [' + "9" * 5000 + "]}", "digits"),
], ids=["nested-200000-deep", "a-5000-digit-number"])
def test_a_file_nested_too_deep_or_with_an_endless_number_is_one_clear_error(tmp_path, triton_files, capsys,
                                                                             text, says):
    from costlearn.cli import main
    _, mapping, data = triton_files
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(InteropError, match=says):
        _import(bad, mapping, data)
    assert main(["import", "kernel-tuner", str(bad), "--preset", "a100", "--mapping", str(mapping),
                 "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert _no_part(data)


# ------------------------------------------------------------------------------------------------- hostile input


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_mapping_that_is_no_regular_file_is_refused_not_read(tmp_path, triton_files, kind):
    import os
    cache, _, data = triton_files
    if kind == "fifo":
        mapping = tmp_path / "fifo"
        os.mkfifo(mapping)                       # reading it waited forever for a writer
    else:
        mapping = Path("/dev/zero")              # reading it never ended
    with pytest.raises(InteropError, match="mapping .*: not a regular file"):
        _import(cache, mapping, data)
    assert not data.exists()


@pytest.mark.parametrize("text, why", [('{"family": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deep"),
                                       ('{"family": ' + "9" * 5000 + "}", "more than .* digits")])
def test_mapping_nested_too_deep_or_with_a_huge_number_is_one_error_naming_it(tmp_path, text, why):
    p = tmp_path / "m.json"
    p.write_text(text)
    with pytest.raises(InteropError, match=f"mapping {p}: .*{why}"):
        load_mapping(p)


@pytest.mark.parametrize("key, value", [("layout", None), ("layout", ["NN"]), ("dtype", 16), ("family", ["gemm"])])
def test_mapping_family_dtype_or_layout_that_is_no_string_is_refused(tmp_path, key, value):
    # a null layout was taken and wrote rows with no layout into the dataset
    p = write_mapping(tmp_path / "m.json", dict(TRITON_MAPPING, **{key: value}))
    with pytest.raises(InteropError, match=f"{key}="):
        load_mapping(p)


def test_mapping_long_value_is_named_cut(tmp_path):
    p = write_mapping(tmp_path / "m.json", dict(TRITON_MAPPING, family="x" * 1_000_000))
    with pytest.raises(InteropError, match=r"family='x+\.\.\.; allowed") as e:
        load_mapping(p)
    assert len(str(e.value)) < 300


def test_cache_long_device_name_is_named_cut(tmp_path, triton_files):
    _, mapping, data = triton_files
    doc = json.loads(write_triton_cache(tmp_path / "c.json").read_text())
    doc["device_name"] = "A" * 1_000_000
    (tmp_path / "c.json").write_text(json.dumps(doc))
    with pytest.raises(InteropError, match="measured on 'A+\\.\\.\\.") as e:
        _import(tmp_path / "c.json", mapping, data)
    assert len(str(e.value)) < 400


def test_cache_tune_params_keys_that_is_no_list_is_refused(tmp_path, triton_files):
    _, mapping, data = triton_files
    doc = json.loads(write_triton_cache(tmp_path / "c.json").read_text())
    doc["tune_params_keys"] = "BLOCK_SIZE_M"
    (tmp_path / "c.json").write_text(json.dumps(doc))
    with pytest.raises(InteropError, match="tune_params_keys='BLOCK_SIZE_M'; must be a list"):
        _import(tmp_path / "c.json", mapping, data)


def test_cache_with_a_byte_order_mark_is_read(tmp_path, triton_files):
    cache, mapping, data = triton_files
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + cache.read_bytes())
    assert _import(bom, mapping, data).rows_added == 5


def test_t4_invalidity_that_is_no_string_skips_its_result(tmp_path, triton_files):
    _, mapping, data = triton_files
    cfg = dict(zip(TRITON_KEYS, (64, 64, 32, 4, 3, 1)))
    ok = {"configuration": cfg, "invalidity": "correct", "measurements": [{"name": "time", "value": 0.1}]}
    results = [ok] + [{"configuration": cfg, "invalidity": v} for v in (["x"], None, 5, "")]
    t4 = tmp_path / "t4.json"
    t4.write_text(json.dumps({"metadata": {"problem_size": [M, N, K]}, "results": results}))
    rep = _import(t4, mapping, data)
    assert rep.rows_added == 1 and rep.failed == 0
    assert [ln for ln, _ in rep.skipped] == [2, 3, 4, 5] and all("invalidity=" in why for _, why in rep.skipped)


def test_cache_of_many_bad_entries_keeps_a_thousand_reasons(tmp_path, triton_files):
    _, mapping, data = triton_files
    entries = [((48, 64, 32, 4, 3, i), {"time": 0.1}) for i in range(1500)] + [TRITON_ENTRIES[0]]
    rep = _import(write_triton_cache(tmp_path / "c.json", entries=entries), mapping, data)
    assert rep.rows_added == 1 and rep.skipped.total == 1500 and len(rep.skipped) == 1000


def test_a_long_preset_is_named_cut(triton_files):
    cache, mapping, data = triton_files
    with pytest.raises(InteropError, match=r"--preset 'x+\.\.\.: unknown device preset") as e:
        import_file("kernel-tuner", cache, device="x" * 100_000, data_root=data, mapping=mapping)
    assert len(str(e.value)) < 400 and not data.exists()
