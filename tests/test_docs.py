"""The documents a newcomer reads: a README short enough to read in five
minutes, and docs/architecture.md, the map of the code, naming every module
(and only modules that exist)."""
from __future__ import annotations

import re

from conftest import ROOT

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
