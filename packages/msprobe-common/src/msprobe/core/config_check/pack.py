"""The config_check pack: one zip of small JSON sections, written atomically (docs/config_check.md#the-pack).

A pack holds checksums and facts, never tensors, so it stays a few hundred KiB for a large model. Every
section is a JSON object; the zip is rebuilt whole (a temporary sibling, then a rename) each time a section
grows, so a crash leaves the previous complete pack or none, never a truncated zip.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

from msprobe.core.services.fileio import atomic_write_bytes, make_dir
from msprobe.core.services.jsonfile import MiB

FORMAT = "msprobe-config-check"
VERSION = 1
MANIFEST = "manifest.json"
# sections in report order: those that change the numbers first (docs/config_check.md#the-report)
SECTIONS = ("weights", "data", "random", "hyperparameters", "framework", "environment", "packages")
MEMBER_MAX_BYTES = 64 * MiB


class PackError(ValueError):
    """A pack that cannot be read or written; the message names the file and what is wrong."""


def write_pack(path: str | os.PathLike, framework: str, sections: dict[str, dict]) -> Path:
    """Write ``sections`` (name → JSON object) as the pack at ``path``, atomically."""
    target = Path(path)
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise PackError(f"pack section {unknown[0]!r} is unknown; allowed: {', '.join(SECTIONS)}")
    make_dir(target.parent if str(target.parent) else ".")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as book:
        book.writestr(MANIFEST, json.dumps({"format": FORMAT, "version": VERSION, "framework": framework}))
        for name in SECTIONS:
            if name in sections:
                book.writestr(f"{name}.json", json.dumps(sections[name], indent=1, sort_keys=True, default=str))
    atomic_write_bytes(target, buffer.getvalue())
    return target


def read_pack(path: str | os.PathLike) -> tuple[str, dict[str, dict]]:
    """(framework, sections) of a pack; a section the pack does not hold is absent."""
    source = Path(path)
    try:
        book = zipfile.ZipFile(source)
    except FileNotFoundError:
        raise PackError(f"pack {str(source)!r} does not exist") from None
    except (zipfile.BadZipFile, OSError) as error:
        raise PackError(f"pack {str(source)!r} is not a zip file: {error}") from None
    with book:
        manifest = _member(book, source, MANIFEST)
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise PackError(f"pack {str(source)!r}: {MANIFEST} does not name format {FORMAT!r}; "
                            f"was it written by msprobe config_check?")
        names = set(book.namelist())
        sections = {name: _member(book, source, f"{name}.json") for name in SECTIONS if f"{name}.json" in names}
    bad = [name for name, value in sections.items() if not isinstance(value, dict)]
    if bad:
        raise PackError(f"pack {str(source)!r}: section {bad[0]!r} is not a JSON object")
    return str(manifest.get("framework", "")), sections


def _member(book: zipfile.ZipFile, source: Path, name: str) -> Any:
    try:
        info = book.getinfo(name)
    except KeyError:
        raise PackError(f"pack {str(source)!r} has no {name}") from None
    if info.file_size > MEMBER_MAX_BYTES:
        raise PackError(f"pack {str(source)!r}: {name} is {info.file_size} bytes, more than {MEMBER_MAX_BYTES}")
    try:
        return json.loads(book.read(name).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise PackError(f"pack {str(source)!r}: {name} is not JSON: {error}") from None
