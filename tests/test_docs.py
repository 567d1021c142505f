"""The documents a newcomer reads: a README short enough to read in five
minutes, and docs/architecture.md, the map of the code, naming every module
(and only modules that exist)."""
from __future__ import annotations

import json
import re
import shlex
import zipfile

import pytest

from conftest import A100_LOGS, ROOT, import_script
from inductor_fixture import DEVICE, write_log

from costlearn.interop import export_dataset, import_file

README_MAX_LINES = 250


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; results go to docs/results.md"


def test_the_architecture_map_names_every_module_and_only_modules_that_exist():
    text = (ROOT / "docs" / "architecture.md").read_text()
    package = ROOT / "costlearn"
    modules = {str(p.relative_to(package)) for p in package.rglob("*.py")}
    listed = set(re.findall(r"^\| `([\w/]+\.py)` \|", text, flags=re.M))
    assert modules - listed == set(), f"modules missing from docs/architecture.md: {sorted(modules - listed)}"
    assert listed - modules == set(), \
        f"docs/architecture.md lists modules that do not exist: {sorted(listed - modules)}"


def test_the_results_and_guide_the_readme_links_exist():
    readme = (ROOT / "README.md").read_text()
    for target in set(re.findall(r"\]\(((?:docs|reports)/[\w./-]+?)(?:#[\w-]+)?\)", readme)):
        assert (ROOT / target).exists(), target


def _docs_from_reports():
    return import_script("studies.docs_from_reports")


def test_every_result_table_is_generated_from_the_reports():
    """docs/results.md and the README's headline table hold no hand-copied
    figure: each table sits in a block ``studies/docs_from_reports.py``
    writes from reports/, and every block is what the reports give now."""
    gen = _docs_from_reports()
    assert gen.stale() == [], "run python -m studies.docs_from_reports"
    for doc in ("docs/results.md", "README.md"):
        text = (ROOT / doc).read_text()
        outside = re.sub(r"<!-- ([\w-]+):begin -->.*?<!-- \1:end -->", "", text, flags=re.S)
        tables = [ln for ln in outside.splitlines() if ln.startswith("|")]
        assert not tables, f"{doc}: a table outside the generated blocks: {tables[0][:100]}"


def test_a_stale_block_is_found(tmp_path):
    """The check itself: a figure changed in a report makes its blocks stale."""
    import shutil
    gen = _docs_from_reports()
    for part in ("README.md", "docs", "reports"):
        src = ROOT / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / part)
    assert gen.stale(tmp_path) == []
    report = tmp_path / "reports" / "a100_inductor.md"
    text = report.read_text()
    row = re.search(r"^\| all \| 1864 \| (\d+\.\d\d)% \|", text, flags=re.M)    # float16's first "all" row
    changed = f"{float(row.group(1)) + 0.01:.2f}"
    report.write_text(text[:row.start(1)] + changed + text[row.end(1):])
    assert gen.stale(tmp_path) == ["docs/results.md: lolo", "README.md: headline"]
    gen.update(root=tmp_path)
    assert gen.stale(tmp_path) == [] and f"{changed} % top-1" in (tmp_path / "README.md").read_text()


def test_the_readmes_out_of_distribution_example_is_what_the_committed_model_says(model_dir):
    """Regression: the README said "N=4096 above the trained maximum 920" where the model said 1016."""
    import costlearn
    line = next(ln for ln in (ROOT / "README.md").read_text().splitlines() if "p.ood, p.ood_reasons" in ln)
    m, n, k = (int(v) for v in re.search(r"for \((\d+), (\d+), (\d+)\)", line).groups())
    quoted = re.search(r'True, \("([^"]+)"', line).group(1)
    p = costlearn.predict_best(m, n, k, device=model_dir.parents[1].name, models_dir=model_dir.parents[2])
    assert p.ood and quoted in p.ood_reasons
    assert not costlearn.predict_best(1, 1024, 1024, device=model_dir.parents[1].name,
                                      models_dir=model_dir.parents[2]).ood          # "False, () here"


# -- the README's commands, as written ------------------------------------------------------------------

READS = ("--data", "--models", "--from-log", "--shapes-file", "--from-table", "--mapping", "--eval-dir")
"""The flags whose value is a file or folder a command reads."""


def readme_commands(text: str | None = None) -> list:
    """Each ``costlearn`` command of the README, in its bash blocks and its inline code, as its arguments
    (continued lines joined, comments and the ``[...]`` of optional arguments dropped), with the line's comment:
    ``[(args, comment), ...]``."""
    text = (ROOT / "README.md").read_text() if text is None else text
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        lines += [ln.partition("#")[::2] for ln in block.replace("\\\n", " ").splitlines()]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    lines += [(" ".join(span.split()), "") for span in re.findall(r"`(costlearn [^`]*)`", prose)]
    return [([a.strip("[]") for a in shlex.split(code.replace("<", "'<").replace(">", ">'"))[1:]], comment)
            for code, comment in lines if code.strip().startswith("costlearn ")]


def files_read(args: list) -> list:
    """What a command's arguments name to read: the values of :data:`READS` and ``import``'s FILE."""
    got = [v for flag, v in zip(args, args[1:]) if flag in READS]
    return got + ([args[2]] if args[:1] == ["import"] and len(args) > 2 else [])


def missing_files(commands: list) -> list:
    """The files and folders the commands read that are neither in the source tree, nor under ``out/`` (what
    the README's commands write), nor a file of the user's, named as one (``<your log>``, ``FILE``)."""
    return sorted({f for args, _ in commands for f in files_read(args) if not (
        f.startswith("<") or f.isupper() or f == "out" or f.startswith("out/") or (ROOT / f).exists())})


def test_the_readmes_commands_read_only_files_the_repository_has_their_own_output_or_the_users():
    """Regression: the README read ``data/a100``, ``other/data/a100`` and ``my_a100_mm.txt``, none of which
    exists: a command reads a file of the source tree, one an earlier command wrote under ``out/``, or names the
    user's own file as such (``<your log>``)."""
    assert missing_files(readme_commands()) == []


def test_a_command_reading_a_file_nobody_has_is_found():
    """The check itself, on made-up lines (the README's former ones among them)."""
    made_up = ("```bash\ncostlearn import inductor my_a100_mm.txt --preset a100 --data out/data   # a comment\n"
               "costlearn evaluate --no-measure --dtype float16 \\\n    --models out/models --data other/data/a100\n"
               "costlearn export kernel-tuner --data data/a100 --out kt/\n"
               "costlearn import inductor <your log> --preset a100 --data out/data\n"
               "costlearn predict 1 1 1 --models models [--data data]\n```\n"
               "Inline: `costlearn import kernel-tuner FILE --preset a100\n  --mapping map.json`, `costlearn run`.\n")
    assert missing_files(readme_commands(made_up)) == ["data/a100", "map.json", "my_a100_mm.txt", "other/data/a100"]


def test_the_readmes_kernel_tuner_mapping_imports_what_costlearns_export_wrote(tmp_path):
    """Regression: the README's mapping named ``BLOCK_SIZE_M`` where the files ``costlearn export kernel-tuner``
    writes call it ``block_m``: that mapping now imports such a file back, every measurement of it."""
    readme = (ROOT / "README.md").read_text()
    bullet = readme[readme.index("- **Kernel Tuner**"):]
    mapping = json.loads(re.sub(r"\s*\n\s*", " ", re.search(r'`(\{"family".*?\})`', bullet, flags=re.S).group(1)))
    log = tmp_path / "mm_log.txt"
    write_log(log)
    folder = import_file("inductor", log, device=DEVICE, data_root=tmp_path / "data").folder
    files = export_dataset("kernel-tuner", folder, tmp_path / "kt")
    ours = [f for f in files if f.name.startswith(f"{mapping['family']}_{mapping['dtype']}_{mapping['layout']}_")]
    assert ours, [f.name for f in files]
    (tmp_path / "map.json").write_text(json.dumps(mapping))
    rep = import_file("kernel-tuner", ours[0], device=DEVICE, data_root=tmp_path / "back",
                      mapping=tmp_path / "map.json")
    assert rep.rows_added == len(json.loads(ours[0].read_text())["cache"]) > 0


TORCH_DTYPE = {("torch.float16", "not_float_32"): "float16", ("torch.bfloat16", "not_float_32"): "bfloat16",
               ("torch.float32", "False"): "float32", ("torch.float32", "True"): "tfloat32"}


def log_dtypes(name: str) -> set:
    """The dtypes (costlearn's names) one of the A100 logs holds; skips where it is not here."""
    if A100_LOGS.suffix == ".zip" and A100_LOGS.is_file():
        with zipfile.ZipFile(A100_LOGS) as z:
            if f"a100/{name}" not in z.namelist():
                pytest.skip(f"{A100_LOGS} holds no a100/{name}")
            text = z.read(f"a100/{name}").decode()
    else:
        path = A100_LOGS / name if A100_LOGS.is_dir() else A100_LOGS
        if path.name != name or not path.is_file():
            pytest.skip(f"Inductor's A100 log {name} not found in {A100_LOGS} (set COSTLEARN_A100_LOGS to the "
                        "logs' folder or zip)")
        text = path.read_text()
    pairs = {(f[3], f[11]) for f in (ln.split(",") for ln in text.splitlines()[2:]) if len(f) > 11}
    return {TORCH_DTYPE[p] for p in pairs}


def test_the_readmes_a100_commands_ask_for_dtypes_the_logs_they_name_hold():
    """Regression: the README scored ``--dtype bfloat16`` on a log of real models' shapes, which holds float16
    only. Each ``evaluate`` and ``predict`` of the imported logs asks for a dtype the logs named in the import
    lines' comments (``# e.g. a100_mm.txt``) hold: evaluate's of its ``--data``, predict's of the data its
    ``--models`` was trained on. Reads Inductor's A100 logs; skips without them."""
    commands = readme_commands()
    logs: dict = {}                   # data root -> the logs the README imports into it
    for args, comment in commands:
        if args[:2] == ["import", "inductor"] and "e.g." in comment:
            root = args[args.index("--data") + 1]
            logs.setdefault(root, []).append(re.search(r"e\.g\. (\S+\.txt)", comment).group(1))
    trained = {args[args.index("--models") + 1]: args[args.index("--data") + 1].rsplit("/", 1)[0]
               for args, _ in commands if args[:1] == ["train"] and "--data" in args
               and args[args.index("--data") + 1].endswith("/a100")}
    checked = 0
    for args, _ in commands:
        if args[:1] in (["evaluate"], ["predict"]) and "triton_mm" in args:
            dtype = args[args.index("--dtype") + 1]
            root = args[args.index("--data") + 1].rsplit("/", 1)[0] if args[0] == "evaluate" \
                else trained[args[args.index("--models") + 1]]
            assert root in logs, f"costlearn {' '.join(args)}: no import line names a log it puts into {root}"
            held = set().union(*(log_dtypes(name) for name in logs[root]))
            assert dtype in held, f"costlearn {' '.join(args)}: the logs of {root} ({logs[root]}) hold {held}"
            checked += 1
    assert checked >= 2
