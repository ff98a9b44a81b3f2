"""stack.json frames (docs/dump_format.md#stackjson-and-constructjson): msprobe's frames are recognised by where
its packages are installed, not by a path that contains ``msprobe`` — a user's project in a folder named
``msprobe`` keeps its frames."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import msprobe.core
from msprobe.core.dump.user_stack import user_stack


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_user_code_in_a_folder_named_msprobe_keeps_its_frames(tmp_path):
    # the old filter dropped any path containing /msprobe/core/, /msprobe/pytorch/ or /msprobe/mindspore/;
    # the three scripts are identical, and code objects of different files compare equal: each frame must
    # still name its own file
    for package in ("core", "pytorch", "mindspore"):
        script = tmp_path / "msprobe" / package / "train.py"
        script.parent.mkdir(parents=True)
        script.write_text("def step(record):\n    return record()\n")
        train = _load(script, f"user_train_{package}")
        frames = train.step(lambda: user_stack(1))
        assert any(frame.startswith(f"File {script}, line 2, in step") for frame in frames), frames


def test_msprobe_frames_are_dropped():
    frames = user_stack(0)  # innermost: user_stack itself, inside msprobe.core
    core_dir = os.path.dirname(msprobe.core.__file__)
    assert frames and not any(core_dir in frame for frame in frames)
    assert frames[0].startswith(f"File {__file__}, line ")


def test_install_directories_are_found_without_importing_a_framework():
    code = (
        "import json, sys\n"
        "from msprobe.core.dump import user_stack\n"
        "dirs = user_stack._own_dirs()\n"
        "print(json.dumps({'dirs': dirs, 'imported': sorted(m for m in ('torch', 'mindspore', 'msprobe.pytorch',"
        " 'msprobe.mindspore') if m in sys.modules)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    assert result["imported"] == []
    for package in ("core", "pytorch", "mindspore"):
        spec = importlib.util.find_spec(f"msprobe.{package}")
        if spec is not None:  # installed in this environment
            for location in spec.submodule_search_locations:
                assert os.path.join(os.path.realpath(location), "") in result["dirs"]
