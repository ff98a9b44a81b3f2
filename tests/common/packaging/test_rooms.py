"""The house's rooms (docs/architecture.md): no package folder of any msprobe package holds more than 12
modules, and msprobe.core's root holds only the package face, the CLI entry and the contract at the bottom."""

from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[3] / "packages"
MAX_MODULES = 12


def _rooms() -> dict[str, list[str]]:
    rooms = {}
    for init in PACKAGES.glob("*/src/msprobe/**/__init__.py"):
        modules = sorted(p.name for p in init.parent.glob("*.py") if p.name != "__init__.py")
        rooms["/".join(init.parent.relative_to(PACKAGES).parts[3:])] = modules
    return rooms


def test_no_room_holds_more_than_twelve_modules():
    rooms = _rooms()
    assert {"core", "core/compare", "pytorch", "mindspore"} <= rooms.keys()  # the walk found the packages
    crowded = {room: len(modules) for room, modules in rooms.items() if len(modules) > MAX_MODULES}
    assert crowded == {}


def test_the_core_root_holds_the_face_the_cli_and_the_contract_only():
    assert _rooms()["core"] == ["__main__.py", "cli.py", "contract.py"]
