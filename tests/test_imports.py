"""The import graph of costlearn's own modules: a DAG, every import counted
(those inside functions too, which hide a circle without removing it)."""
from __future__ import annotations

import ast

from conftest import ROOT

PACKAGE = ROOT / "costlearn"


def _modules() -> dict:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _import_target(node: ast.ImportFrom, pkg: str) -> str:
    """The absolute module a ``from ... import`` in package ``pkg`` names
    (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
    return ".".join(base) + (f".{node.module}" if node.module else "")


def import_graph() -> dict:
    """Module -> the costlearn modules it imports (a name imported from a
    package counts as that submodule where it is one)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                target = _import_target(node, pkg)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    out.add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                out.update(alias.name for alias in node.names)
        graph[name] = {m for m in out if m in mods and m != name}
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_circle():
    found = cycles(import_graph())
    assert not found, "import circles (each a set of modules that import one another, in functions too): " + \
        "; ".join(", ".join(c) for c in found)


def family_imports_outside(graph: dict) -> list:
    """``"<module> imports <family module>"`` for each module outside
    ``costlearn.families`` that imports a family's own module (anything
    under ``costlearn.families`` but the package and ``base``)."""
    shared = {"costlearn.families", "costlearn.families.base"}
    return sorted(f"{mod} imports {dep}" for mod, deps in graph.items() if not mod.startswith("costlearn.families")
                  for dep in deps if dep.startswith("costlearn.families") and dep not in shared)


def test_no_module_outside_families_imports_a_family():
    """A kernel family is its folder: outside ``costlearn/families/`` only the
    package (``FAMILIES``, ``get_family``, ...) and the interface
    (``families/base.py``) are imported, never ``families/<name>/``; and the
    only place a family's module is named is its registry line."""
    found = family_imports_outside(import_graph())
    assert not found, "a family's own modules imported outside families/: " + "; ".join(found)
    named = sorted(f"{name}: {path.name}" for name, path in _modules().items()
                   if not name.startswith("costlearn.families") and "costlearn.families." in
                   " ".join(n.value for n in ast.walk(ast.parse(path.read_text()))
                            if isinstance(n, ast.Constant) and isinstance(n.value, str)
                            and n.value.startswith("costlearn.families.")))
    assert not named, "a family's module named by string (importlib) outside families/: " + "; ".join(named)


def test_a_family_import_outside_families_is_found():
    """The check itself, on a made-up graph; and the real graph does see a
    family's own imports (``compile`` imports its kernel)."""
    made_up = {"costlearn.learn.metrics": {"costlearn.families", "costlearn.families.base"},
               "costlearn.collect.backends.triton": {"costlearn.families.triton_mm.kernel"},
               "costlearn.families.triton_mm.compile": {"costlearn.families.triton_mm.kernel"}}
    assert family_imports_outside(made_up) == [
        "costlearn.collect.backends.triton imports costlearn.families.triton_mm.kernel"]
    assert "costlearn.families.triton_mm.kernel" in import_graph()["costlearn.families.triton_mm.compile"]


def test_a_circle_is_found():
    """The check itself: a made-up graph with a circle through three modules."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


ALLOWED_PRIVATE = {"_replace", "_fields", "_asdict", "_make", "_fields_", "_type_", "_length_", "_workspace_cls",
                   "_predictors", "_baseline_prediction"}
"""Private names one module may touch on another's object: namedtuple's API, ctypes' struct and array fields, a
backend class's own workspace class set beside it, and scikit-learn's internals behind their one adapter
(``model/hgb.py``: ``_sklearn_internals``, with the versions checked)."""


def test_no_private_name_crosses_a_module_or_a_class():
    """``from x import _name`` of costlearn's own, and ``obj._name`` on anything but self or cls."""
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("costlearn")):
                found += [f"{name}: imports {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and node.attr not in ALLOWED_PRIVATE:
                owner = node.value
                if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                    found.append(f"{name}:{node.lineno}: .{node.attr}")
    assert not found, "private names used across modules or classes: " + "; ".join(found)


OPTIONAL = {"triton": "an extra (costlearn[triton])", "torch": "an extra (costlearn[triton])",
            "cupy": "an extra (costlearn[cuda])", "pyopencl": "an extra (PoCL)", "pynvml": "optional (nvidia-ml-py)",
            "ray": "an extra (costlearn[fleet])", "psycopg": "an extra (costlearn[server])",
            "kernel_tuner": "an extra (costlearn[interop])",
            "xgboost": "importing costlearn never needs it (package docstring)",
            "matplotlib": "plots only", "sklearn": "start-up (about 1 s)", "scipy": "start-up",
            "joblib": "start-up", "tqdm": "start-up", "pandas": "start-up (about 0.4 s)",
            "importlib": "importlib.metadata: start-up (its email and zip parsers), read by a save only"}
"""Third-party packages an import inside a function may load, and why."""

DEFERRED_OWN = {"costlearn.families.triton_mm.kernel": "needs Triton (an optional dependency)",
                "costlearn.serve.tuning": "the measuring (collect.rows), the backends and pandas: a prediction that "
                                          "does not measure never loads them (start-up)",
                "costlearn.model.store": "the model package (the CostModel seam, the feature sets): the command "
                                         "line's start-up never loads it",
                "costlearn.model.artifact_layout": "the model package, as costlearn.model.store"}
"""costlearn modules any function may import late, and why."""

HEAVY_LIBS = {"pandas", "sklearn", "scipy", "xgboost", "joblib", "tqdm", "matplotlib", "pyarrow"}


def _top_level_imports(path) -> tuple:
    """(third-party roots, costlearn modules) a module imports when it loads
    (its body's imports, those under try/if included, not functions')."""
    mods, graph_names = _modules(), set()
    name = next(n for n, p in mods.items() if p == path)
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    roots = set()
    stack = list(ast.parse(path.read_text()).body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").startswith("costlearn"):
                target = _import_target(node, pkg)
                graph_names.update(f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target
                                   for a in node.names)
            else:
                roots.add((node.module or "").split(".")[0])
        else:
            stack.extend(ast.iter_child_nodes(node))
    return roots, {m for m in graph_names if m in mods}


def heavy_modules() -> set:
    """costlearn modules whose loading imports pandas, scikit-learn, XGBoost
    or another slow library, directly or through other costlearn modules."""
    mods = _modules()
    direct = {n: _top_level_imports(p) for n, p in mods.items()}
    heavy = {n for n, (roots, _) in direct.items() if roots & HEAVY_LIBS}
    grew = True
    while grew:
        new = {n for n, (_, own) in direct.items() if own & heavy} - heavy
        heavy |= new
        grew = bool(new)
    return heavy


def _is_cli(name: str) -> bool:
    """A module of the command line (``costlearn.cli`` or one under it)."""
    return name == "costlearn.cli" or name.startswith("costlearn.cli.")


def late_imports(extra: dict | None = None) -> list:
    """Imports inside functions that neither load an optional or slow
    library (:data:`OPTIONAL`), nor are one of :data:`DEFERRED_OWN`, nor are
    the CLI's or the package's late import of a heavy module
    (:func:`heavy_modules`, start-up cost)."""
    mods, heavy, found = _modules(), heavy_modules(), []
    for name, path in {**mods, **(extra or {})}.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    roots = {a.name.split(".")[0] for a in node.names}
                    if roots <= set(OPTIONAL):
                        continue
                    if roots == {"costlearn"} and _is_cli(name):
                        continue           # `import costlearn` for its __file__: the package is loaded already
                    found.append(f"{name}:{node.lineno}: import {', '.join(sorted(roots))}")
                elif isinstance(node, ast.ImportFrom):
                    if not node.level and not (node.module or "").startswith("costlearn"):
                        if (node.module or "").split(".")[0] not in OPTIONAL:
                            found.append(f"{name}:{node.lineno}: from {node.module} import ...")
                        continue
                    target = _import_target(node, pkg)
                    for a in node.names:
                        t = f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target
                        if t in DEFERRED_OWN or ((_is_cli(name) or name == "costlearn") and t in heavy):
                            continue
                        found.append(f"{name}:{node.lineno}: from {t} import {a.name}")
    return sorted(set(found))


def test_imports_inside_functions_are_for_optional_libraries_or_start_up_only():
    found = late_imports()
    assert not found, "imports inside functions with no reason (move them to the top): " + "; ".join(found)


def test_a_late_import_without_a_reason_is_found(tmp_path):
    """The check itself, on a made-up module beside the real ones."""
    fake = tmp_path / "fake.py"
    fake.write_text("def f():\n    import json\n    from costlearn.core.checks import check_int\n"
                    "    from .collect.dataset import load\n"
                    "    import torch\n    from costlearn.families.triton_mm.kernel import launch\n")
    assert late_imports({"costlearn.fake": fake}) == ["costlearn.fake:2: import json",
                                                     "costlearn.fake:3: from costlearn.core.checks import check_int",
                                                     "costlearn.fake:4: from costlearn.collect.dataset import load"]


def test_heavy_modules_are_found():
    """The check's own facts: the dataset loads pandas, the problem value does not."""
    heavy = heavy_modules()
    assert {"costlearn.collect.dataset", "costlearn.serve.predict", "costlearn.learn.train"} <= heavy
    assert not {"costlearn.core.problem", "costlearn.core.device", "costlearn.families", "costlearn.cli"} & heavy
    assert not {m for m in heavy if _is_cli(m)}, "the command line's modules load no heavy module at start-up"


LAYERS = ("core", "families", "features", "collect", "model", "ranker", "serve", "learn", "interop", "cli")
"""costlearn's folders, bottom first (docs/architecture.md, "Layers")."""


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``costlearn.<layer>...``; None for the
    package's front (``costlearn``, ``costlearn.__main__``)."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def upward_imports(graph: dict) -> list:
    """``"<module> imports <module>"`` for each import of a higher layer."""
    return sorted(f"{mod} imports {dep}" for mod, deps in graph.items() for dep in deps
                  if layer_of(mod) is not None and layer_of(dep) is not None and layer_of(dep) > layer_of(mod))


def test_every_folder_of_costlearn_is_a_layer_and_the_top_holds_only_the_front():
    tops = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert tops == sorted([*LAYERS, "__init__.py", "__main__.py"]), \
        f"costlearn/ holds {tops}; docs/architecture.md's layers are {list(LAYERS)}"


def test_imports_go_only_down_the_layers():
    found = upward_imports(import_graph())
    assert not found, "imports of a higher layer (docs/architecture.md, \"Layers\"): " + "; ".join(found)


def test_an_upward_import_is_found():
    """The check itself, on a made-up graph: a model module that imports the
    serving layer is found; the front and a downward import are not."""
    made_up = {"costlearn.model.artifact": {"costlearn.serve.predict", "costlearn.core.checks"},
               "costlearn": {"costlearn.cli"}, "costlearn.serve.tuning": {"costlearn.collect.loop"}}
    assert upward_imports(made_up) == ["costlearn.model.artifact imports costlearn.serve.predict"]


def test_the_collection_loop_is_not_loaded_by_a_predictor():
    """Importing the Predictor loads neither the collection loop nor a
    backend (a compiler that only asks pays for neither)."""
    import subprocess
    import sys
    code = ("import sys, costlearn.serve.predictor; "
            "print(sorted(m for m in sys.modules if m.startswith(('costlearn.collect.loop', "
            "'costlearn.collect.local', 'costlearn.collect.executor', 'costlearn.collect.rows', "
            "'costlearn.collect.summary', 'costlearn.collect.backends', 'costlearn.collect.fleet'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout
