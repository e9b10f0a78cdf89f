"""The project's layers import downwards only, and no module imports itself back through others.

The floors (docs/design.md, "Layout"), lowest first; a module may import its own floor and the floors below it.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = [  # (floor, the package minbert's subpackages and modules; the scripts and benchmarks at the root)
    (0, ["__init__", "common"]),  # minbert itself: its version, and its API, imported by name only when used
    (1, ["models", "losses"]),
    (2, ["data", "heads"]),
    (3, ["task_info", "tasks"]),
    (4, ["model_config", "model", "checkpoint", "evaluation"]),
    (5, ["engine", "predictor", "analysis"]),
    (6, ["training"]),
    (7, ["tuning"]),
    (8, ["commands"]),
    (9, ["__main__", "multitask_classifier", "pretrain_contrastive", "ensemble", "predict", "analyze",
         "search", "benchmarks"]),
]


def floor_of(module: str) -> int | None:
    """The floor of a module: that of its subpackage of minbert (or of minbert's module itself; minbert alone is
    the package's API), or of the script or folder at the repository's root."""
    parts = module.split(".")
    name = (parts[1] if len(parts) > 1 else "__init__") if parts[0] == "minbert" else parts[0]
    return next((floor for floor, names in FLOORS if name in names), None)


def our_modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT)
        # docs/: the generator of the reference pages, which imports the package, not the other way round
        if relative.parts[0] in (".venv", "tests", "docs") or relative.parts[0].startswith("."):
            continue
        name = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    return modules


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The modules of ours that a file imports (from X import Y counts X.Y when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # from minbert import checkpoint imports the module minbert.checkpoint, not the package's own code
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                     for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in known}
    return found


def test_every_module_has_a_floor_and_imports_only_its_floor_or_below():
    modules = our_modules()
    unplaced = [name for name in modules if floor_of(name) is None]
    assert not unplaced, f"add these to FLOORS (and the layout in docs/design.md): {unplaced}"
    upward = [(name, imported) for name, path in modules.items() for imported in imports_of(path, set(modules))
              if floor_of(imported) > floor_of(name)]
    assert not upward, f"imports from a higher floor: {upward}"


def test_no_import_cycles():
    modules = our_modules()
    graph = {name: imports_of(path, set(modules)) - {name} for name, path in modules.items()}
    # A package's __init__ re-exports its modules: an edge into the package is an edge into what it imports.
    state, cycles = {}, []

    def visit(name, trail):
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            cycles.append(trail[trail.index(name):] + [name])
            return
        state[name] = "open"
        for imported in graph[name]:
            visit(imported, trail + [name])
        state[name] = "done"

    for name in graph:
        visit(name, [])
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_sees_an_upward_import(tmp_path):
    """The check itself can fail: a data module importing the training floor is caught."""
    file = tmp_path / "bad.py"
    file.write_text("from minbert.engine.engine import Engine\nimport minbert.common.files\n")
    known = {"minbert.engine.engine", "minbert.common.files", "minbert.engine"}
    assert imports_of(file, known) == {"minbert.engine.engine", "minbert.common.files"}
    assert floor_of("minbert.engine.engine") > floor_of("minbert.data.readers")
    assert floor_of("minbert.training.multitask") > floor_of("minbert.engine.engine")
