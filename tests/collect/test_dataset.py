import math
import os

import pandas as pd

import pytest
from conftest import dataset_row as _row

from costlearn.collect.dataset import DatasetError, load, measured_keys, valid_rows, write_part
from costlearn.families.gemm import GemmConfig as TileConfig


def test_parts_round_trip_and_leave_no_temporary_file(tmp_path):
    write_part([_row(), _row(m=7)], tmp_path)
    write_part([_row(m=8)], tmp_path)
    df, rep = load(tmp_path)
    assert sorted(df["m"]) == [4, 7, 8] and rep.parts == 2 and not rep.corrupt
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert ("dev", "gemm", "float32", "NN", "none", 7, 5, 6, "m4n8k4_t1x1_outer_p0_row", "abc", 1, "x", 0.0) \
        in measured_keys(df)


def test_corrupt_part_is_reported_not_used(tmp_path):
    write_part([_row()], tmp_path)
    (tmp_path / "part-broken.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.warns(UserWarning, match="part-broken"):
        df, rep = load(tmp_path)
    assert len(df) == 1 and len(rep.corrupt) == 1 and "part-broken" in rep.corrupt[0][0]
    with pytest.raises(DatasetError, match="part-broken"):
        load(tmp_path, strict=True)


def test_a_corrupt_part_is_warned_of_once_however_often_it_is_loaded(tmp_path):
    """Regression: each corrupt-part warning printed twice (train loads the folder twice)."""
    import warnings
    write_part([_row()], tmp_path)
    (tmp_path / "part-twice.parquet").write_bytes(b"PAR1 not parquet either")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        reports = [load(tmp_path)[1] for _ in range(3)]
    assert [str(w.message) for w in got if "part-twice" in str(w.message)] and \
        sum("part-twice" in str(w.message) for w in got) == 1
    assert all(len(r.corrupt) == 1 for r in reports)                 # every load still reports it


def test_leftover_temporary_file_of_a_killed_writer_is_ignored(tmp_path):
    write_part([_row()], tmp_path)
    (tmp_path / ".part-x.parquet.tmp").write_bytes(b"half a file")
    df, rep = load(tmp_path)
    assert len(df) == 1 and not rep.corrupt


@pytest.mark.parametrize("t, reason", [(0.0, "time_not_positive"), (-3.0, "time_not_positive"),
                                       (math.nan, "time_not_finite"), (math.inf, "time_not_finite")])
def test_bad_times_are_quarantined_with_a_reason(tmp_path, t, reason):
    write_part([_row(), _row(m=9, time_us=t)], tmp_path)
    df, rep = load(tmp_path)
    assert rep.quarantined == {reason: 1}
    assert (df.loc[df["m"] == 9, "error"] == reason).all()
    assert list(valid_rows(df)["m"]) == [4]


def test_missing_column_is_a_clear_error(tmp_path):
    r = _row()
    del r["time_us"]
    with pytest.raises(DatasetError, match="time_us"):
        write_part([r], tmp_path)


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load(tmp_path / "nope")


def test_compaction_merges_parts_and_a_killed_compaction_loses_and_duplicates_nothing(tmp_path):
    from costlearn.collect.dataset import compact
    for m in (1, 2, 3):
        write_part([_row(m=m)], tmp_path)
    before, _ = load(tmp_path)
    # Killed after writing the merged part, before removing the old ones:
    merged = pd.concat([before], ignore_index=True)
    write_part(merged, tmp_path)
    df, _ = load(tmp_path)
    assert sorted(df["m"]) == [1, 2, 3]
    assert compact(tmp_path) == (4, 3)
    df, rep = load(tmp_path)
    assert sorted(df["m"]) == [1, 2, 3] and rep.parts == 1


@pytest.mark.parametrize("after_reads", [0, 1, 3])
def test_a_load_during_compact_reads_every_row_once(tmp_path, monkeypatch, after_reads):
    """load() in a loop during compact returned 15,295 of 39,900 rows, another read 37,506 with 18
    parts "corrupt": parts removed between the listing and the read were called corrupt and their rows dropped.
    Here compact runs (to its end) after ``after_reads`` parts of a load's listing were read."""
    import costlearn.collect.dataset as ds
    for m in range(1, 6):
        write_part([_row(m=m), _row(m=m, n=2 * m)], tmp_path)
    real, reads, done = ds.pd.read_parquet, [0], [False]

    def read_then_compact(path, **kw):
        if not done[0] and reads[0] == after_reads:
            done[0] = True
            assert ds.compact(tmp_path) == (5, 10)
        reads[0] += 1
        return real(path, **kw)

    monkeypatch.setattr(ds.pd, "read_parquet", read_then_compact)
    df, rep = load(tmp_path)
    assert done[0] and rep.corrupt == [] and len(df) == 10
    assert sorted(zip(df["m"], df["n"])) == sorted((m, n) for m in range(1, 6) for n in (5, 2 * m))


def test_a_single_bit_flip_anywhere_in_a_part_is_reported_not_used(tmp_path):
    """Of 1,000 single-bit flips in one part, 32 changed values silently (m, n, k and time_us_p80
    among them). Every byte of a part is now checked (the sha256 digest in its name)."""
    import random
    import warnings
    part = write_part([_row(m=m, time_us=10.0 + m, time_us_p80=12.0 + m) for m in range(1, 40)], tmp_path)
    blob, rng = part.read_bytes(), random.Random(7)
    for pos in sorted(rng.sample(range(len(blob)), 60)) + [0, len(blob) // 2, len(blob) - 1]:
        bad = bytearray(blob)
        bad[pos] ^= 1 << rng.randrange(8)
        part.write_bytes(bytes(bad))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # warned of once a process per reason
            df, rep = load(tmp_path)
        assert len(df) == 0 and len(rep.corrupt) == 1 and "sha256" in rep.corrupt[0][1], pos
    part.write_bytes(blob)
    assert len(load(tmp_path)[0]) == 39


def test_rows_with_impossible_shapes_or_config_ids_are_quarantined(tmp_path):
    write_part([_row(), _row(m=0), _row(k=-5), _row(config_id="garbage"), _row(family="no-such-family")], tmp_path)
    df, rep = load(tmp_path)
    assert rep.quarantined == {"shape_invalid": 2, "config_invalid": 2}
    assert len(valid_rows(df)) == 1


def test_schema_2_parts_read_as_gemm_nn_rows_and_their_gemm_columns_are_dropped(tmp_path):
    """A part written before kernel families (schema 2: no family, layout or
    pipeline_stages; gemm parameter columns) loads with the defaults."""
    old = pd.DataFrame([_row()]).drop(columns=["family", "layout", "pipeline_stages"]).assign(
        loop_order="outer", smem_pad=0, raster="row", schema_version=2)
    old.to_parquet(tmp_path / "part-old.parquet", index=False)
    df, rep = load(tmp_path)
    assert not rep.corrupt and len(df) == 1
    assert (df["family"] == "gemm").all() and (df["layout"] == "NN").all() and (df["pipeline_stages"] == 1).all()
    assert "loop_order" not in df.columns


def test_parts_are_readable_by_others_not_only_the_writer(tmp_path):
    """Regression: mkstemp made every written file mode 0600."""
    import stat
    old = os.umask(0o022)
    try:
        part = write_part([_row()], tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(part.stat().st_mode) == 0o644


def test_a_file_is_not_a_dataset_folder(tmp_path):
    f = tmp_path / "x.parquet"
    f.write_bytes(b"")
    with pytest.raises(DatasetError, match="is a file"):
        load(f)
    with pytest.raises(DatasetError, match="no dataset folder"):
        load("")


def test_rows_of_an_unknown_dtype_or_layout_or_a_missing_family_are_quarantined(tmp_path):
    """Regression: a part with layout 'XX', dtype 'float64' or no family
    loaded as valid rows and then crashed train and evaluate."""
    write_part([_row(), _row(layout="XX"), _row(dtype="float64"), _row(family=None), _row(layout=None)], tmp_path)
    df, rep = load(tmp_path)
    assert rep.quarantined == {"problem_invalid": 3, "config_invalid": 1}   # no family: no family to parse the id
    assert len(valid_rows(df)) == 1


def test_rows_the_family_does_not_run_are_quarantined(tmp_path):
    """Regression: gemm rows in layout NT (a layout costlearn knows but the
    gemm family does not run) were trained on."""
    write_part([_row(), _row(layout="NT"), _row(dtype="float16")], tmp_path)
    df, rep = load(tmp_path)
    assert rep.quarantined == {"problem_unsupported": 2}
    assert len(valid_rows(df)) == 1


def test_imported_rows_count_as_current_and_other_protocols_do_not():
    """Imported rows carry IMPORTED_PROTOCOL and a source_format; a row with
    that protocol but no source is not imported and stays out."""
    import pandas as pd
    from costlearn.collect.dataset import IMPORTED_PROTOCOL, current_rows
    from costlearn.families import get_family
    from costlearn.collect.protocol import PROTOCOL_VERSION
    h = get_family("triton_mm").template_hash
    df = pd.DataFrame(dict(family="triton_mm", template_hash=h,
                           protocol_version=[IMPORTED_PROTOCOL, IMPORTED_PROTOCOL, PROTOCOL_VERSION, 99],
                           source_format=["inductor", "", "", ""]))
    kept, dropped = current_rows(df)
    assert kept.index.tolist() == [0, 2] and dropped == 2


def test_parts_before_schema_4_read_with_no_import_provenance(tmp_path):
    import pandas as pd
    from costlearn.collect.dataset import COLUMNS, NOT_IMPORTED, load
    old = {c: pd.Series([1], dtype=t) if t in ("int64", "float64") else pd.Series(["x"], dtype=t)
           for c, t in COLUMNS.items() if c not in NOT_IMPORTED}
    old.update(status=pd.Series(["failed"], dtype="string"), family=pd.Series(["gemm"], dtype="string"),
               dtype=pd.Series(["float32"], dtype="string"), layout=pd.Series(["NN"], dtype="string"),
               config_id=pd.Series(["m64n64k16_t4x4_outer_p1_row"], dtype="string"),
               throttled=pd.Series([False]), below_overhead=pd.Series([False]))
    pd.DataFrame(old).to_parquet(tmp_path / "part-old.parquet")
    df, rep = load(tmp_path)
    assert rep.parts == 1 and not rep.corrupt
    assert (df.loc[0, "source_format"], df.loc[0, "source_line"]) == ("", -1)


A = TileConfig(64, 64, 16, 4, 4)


def test_rows_of_another_template_or_protocol_never_train_or_score():
    from costlearn.collect.dataset import current_rows
    from costlearn.families.gemm import TEMPLATE_HASH
    from costlearn.collect.protocol import PROTOCOL_VERSION
    df = pd.DataFrame(dict(template_hash=[TEMPLATE_HASH, "old", TEMPLATE_HASH, TEMPLATE_HASH],
                           family=["gemm", "gemm", "gemm", "unknown"],
                           protocol_version=[PROTOCOL_VERSION, PROTOCOL_VERSION, PROTOCOL_VERSION - 1,
                                             PROTOCOL_VERSION]))
    kept, dropped = current_rows(df)
    assert len(kept) == 1 and dropped == 3


def test_a_part_written_before_epilogues_reads_as_epilogue_none(tmp_path):
    """Schema 5 parts (no ``epilogue`` column) were measured with kernels that
    fuse nothing: they load as ``none`` and keep their measurement keys."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    row = _row(schema_version=5)
    del row["epilogue"]
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "part-old.parquet")
    df, rep = load(tmp_path)
    assert df["epilogue"].tolist() == ["none"] and not rep.corrupt and df["status"].tolist() == ["ok"]
    assert ("dev", "gemm", "float32", "NN", "none", 4, 5, 6) == next(iter(measured_keys(df)))[:8]


def test_a_row_with_an_unknown_epilogue_is_quarantined(tmp_path):
    write_part([_row(epilogue="silu"), _row(m=7)], tmp_path)
    df, rep = load(tmp_path)
    assert rep.quarantined == {"problem_invalid": 1}
    assert df.set_index("m").loc[4, "status"] == "quarantined" and len(valid_rows(df)) == 1


def test_a_column_renamed_in_a_part_without_a_digest_is_reported_not_filled_with_its_default(tmp_path):
    """Regression (an attack): in a part whose name carries no digest (renamed, or written before digests), one flipped
    byte in the footer renamed ``layout``; the column was filled with its schema-2 default and every row read as
    NN. A column is filled only where the part's own schema_version predates it."""
    from costlearn.collect.dataset import ADDED_COLUMNS, ADDED_IN
    assert set(ADDED_IN) == set(ADDED_COLUMNS)
    rows = pd.DataFrame([_row(layout="TN", schema_version=6)]).rename(columns={"layout": "layouu"})
    rows.to_parquet(tmp_path / "part-renamed.parquet", index=False)
    with pytest.warns(UserWarning, match="corrupt"):
        df, rep = load(tmp_path)
    assert len(df) == 0 and "layout" in rep.corrupt[0][1]
    rows.drop(columns=["schema_version"]).to_parquet(tmp_path / "part-renamed.parquet", index=False)
    with pytest.warns(UserWarning, match="schema_version"):
        assert len(load(tmp_path)[0]) == 0


def test_two_compactions_of_one_folder_do_not_run_at_once(tmp_path):
    """Regression (an attack): two `costlearn compact` on one folder at once: the loser failed on a part the winner had
    removed (No such file or directory) and two merged copies were left. The second now stops at once."""
    from costlearn.collect.dataset import COMPACT_LOCK, compact
    from costlearn.core.locks import FolderBusy, FolderLock
    for m in (1, 2):
        write_part([_row(m=m)], tmp_path)
    with FolderLock(tmp_path, "a compaction", COMPACT_LOCK):
        with pytest.raises(FolderBusy, match="a compaction"):
            compact(tmp_path)
    assert compact(tmp_path) == (2, 2) and len(load(tmp_path)[0]) == 2


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_part_that_is_no_regular_file_is_reported_not_read(tmp_path, kind):
    """Regression: a FIFO named like a part made load, compact and an import's duplicate check wait forever."""
    from costlearn.collect.dataset import compact, part_columns
    write_part([_row()], tmp_path)
    odd = tmp_path / "part-odd.parquet"
    os.mkfifo(odd) if kind == "fifo" else odd.mkdir()
    with pytest.warns(UserWarning, match="part-odd.parquet: DatasetError: not a regular file"):
        df, rep = load(tmp_path)
    assert len(df) == 1 and len(rep.corrupt) == 1
    assert len(list(part_columns(tmp_path, ("m",)))) == 1
    with pytest.warns(UserWarning, match="left in place a corrupt dataset part .*part-odd"):
        assert compact(tmp_path) == (0, 0)
    assert odd.exists()


def test_compact_names_each_corrupt_part_it_leaves_in_place(tmp_path):
    from costlearn.collect.dataset import compact
    write_part([_row()], tmp_path)
    write_part([_row(m=64)], tmp_path)
    (tmp_path / "part-broken.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.warns(UserWarning, match="left in place a corrupt dataset part .*part-broken"):
        assert compact(tmp_path)[0] == 2
    assert (tmp_path / "part-broken.parquet").read_bytes() == b"PAR1 this is not parquet"
