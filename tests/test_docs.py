"""The documents a newcomer reads: a README short enough to read in five
minutes, and docs/architecture.md, the map of the code, naming every module
(and only modules that exist)."""
from __future__ import annotations

import re

from conftest import ROOT, import_script

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
