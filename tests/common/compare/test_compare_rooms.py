"""compare/ follows its pipeline, read -> align -> judge -> report (docs/architecture.md): each room imports
only the rooms before it, another room only through its ``__init__`` face, never the modules at compare/'s
root that drive them; graph/ sees compare's rooms through their faces too; no room grows past 12 modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[3] / "packages" / "msprobe-common" / "src" / "msprobe" / "core"
COMPARE = CORE / "compare"
BEFORE = {"read": set(), "align": {"read"}, "judge": {"read"}, "report": {"read", "judge"}}
ROOT_MODULES = {path.stem for path in COMPARE.glob("*.py")} - {"__init__"}


def imported(path: Path) -> list[str]:
    """Every msprobe.core.compare module a file imports, as written."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [name for name in names if name.startswith("msprobe.core.compare")]


@pytest.mark.parametrize("room", sorted(BEFORE))
def test_a_room_imports_only_the_faces_of_the_rooms_before_it(room):
    wrong = []
    for path in sorted((COMPARE / room).glob("*.py")):
        for name in imported(path):
            parts = name.split(".")[3:]  # after msprobe.core.compare
            if not parts or parts[0] in ROOT_MODULES:
                wrong.append(f"{path.name}: {name} (compare/'s root drives the rooms)")
            elif parts[0] != room and (parts[0] not in BEFORE[room] or len(parts) > 1):
                wrong.append(f"{path.name}: {name}")
    assert wrong == []


def test_graph_imports_compare_rooms_through_their_faces():
    wrong = [f"{path.name}: {name}" for path in sorted((CORE / "graph").glob("*.py")) for name in imported(path)
             if len(name.split(".")) > 4 and name.split(".")[3] in BEFORE]
    assert wrong == []


def test_no_room_holds_more_than_twelve_modules():
    sizes = {room: len([p for p in (COMPARE / room).glob("*.py") if p.name != "__init__.py"]) for room in BEFORE}
    assert all(0 < n <= 12 for n in sizes.values()), sizes
