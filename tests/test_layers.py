"""Layering: no Dagster, MLflow or DVC in the library (dagster_project alone knows Dagster); no cycles."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("dagster", "mlflow", "dvc")


def test_import_orchestra_loads_no_orchestration_framework() -> None:
    code = (
        "import sys, pkgutil, importlib, orchestra\n"
        "for m in pkgutil.walk_packages(orchestra.__path__, 'orchestra.'):\n"
        "    importlib.import_module(m.name)\n"
        f"bad = sorted({{n.split('.')[0] for n in sys.modules}} & set({FORBIDDEN!r}))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "", f"orchestra imported {out.stdout.strip()}"


def test_no_module_under_orchestra_imports_dagster() -> None:
    offenders = []
    for path in (ROOT / "orchestra").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "dagster"]
    assert offenders == []


def test_no_module_imports_itself_through_others() -> None:
    """No import cycle among the modules of orchestra and dagster_project, function-level imports
    included. lint-imports' acyclic_siblings contract (pyproject.toml) checks the children of every
    package; this also sees a cycle through a package's own ``__init__`` (``orchestra.config`` ->
    ``orchestra.config.common`` -> ``orchestra.config``), which is no sibling of its children."""
    import grimp

    graph = grimp.build_graph("orchestra", "dagster_project", cache_dir=None)
    cycles = [
        " -> ".join((importer, *chain))
        for importer in sorted(graph.modules)
        for imported in sorted(graph.find_modules_directly_imported_by(importer))
        if (chain := graph.find_shortest_chain(importer=imported, imported=importer))
    ]
    assert cycles == []


def test_every_module_opens_with_a_docstring() -> None:
    missing = [
        str(p.relative_to(ROOT))
        for d in ("orchestra", "dagster_project")
        for p in (ROOT / d).rglob("*.py")
        if not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert missing == []
