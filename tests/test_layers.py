"""The project's layers import downwards only, and no module imports itself back through others.

The floors (docs/design.md, "Layout"), lowest first; a module may import its own floor and the floors below it.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = [  # (floor, top-level packages and modules)
    (0, ["common"]),
    (1, ["models", "losses"]),
    (2, ["data", "heads"]),
    (3, ["tasks"]),
    (4, ["model", "checkpoint", "evaluation"]),
    (5, ["training", "analysis"]),
    (6, ["multitask_classifier", "pretrain_contrastive", "ensemble", "predict", "analyze", "search", "tuning",
         "benchmarks"]),
]


def floor_of(module: str) -> int | None:
    """The floor of a module's top-level package (or of the top-level module itself)."""
    return next((floor for floor, names in FLOORS if module.split(".")[0] in names), None)


def our_modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in (".venv", "tests") or relative.parts[0].startswith("."):
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
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
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
    file.write_text("from training.engine import Engine\nimport common.files\n")
    assert imports_of(file, {"training.engine", "common.files", "training"}) == {"training.engine", "common.files"}
    assert floor_of("training.engine") > floor_of("data.readers")
