"""config_check on real PyTorch runs: two runs that differ by one flag, one environment variable, one package
version, one data batch, an unseeded random call or one weight are each named, in its own section and
nowhere else; two identical runs report no difference (docs/config_check.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from msprobe.core.cli import main
from msprobe.core.config_check import diff_packs, read_pack

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "config_check"))  # importlib mode
from pack_runs import run_variants  # noqa: E402

SCRIPT = Path(__file__).parents[1] / "scripts" / "config_check_train.py"
BASE_FLAGS = ["--lr", "0.1", "--bf16", "--weight-decay", "0.01"]
VARIANTS = {  # name → (flags, extra environment)
    "base": (BASE_FLAGS, {}),
    "again": (BASE_FLAGS, {}),
    "flag": (["--lr", "0.2", "--bf16", "--weight-decay", "0.01"], {}),
    "env": (BASE_FLAGS, {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}),
    "package": (BASE_FLAGS, {"PYTHONPATH": "{fake}"}),
    "data": (BASE_FLAGS, {"CC_VARIANT": "data"}),
    "unseeded": (BASE_FLAGS, {"CC_VARIANT": "unseeded"}),
    "weight": (BASE_FLAGS, {"CC_VARIANT": "weight"}),
}


def _fake_distribution(root: Path, version: str) -> Path:
    """A real installed distribution (its dist-info) on a path of its own."""
    info = root / f"pack_probe_pkg-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pack-probe-pkg\nVersion: {version}\n")
    return root


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("config_check")
    base_site = _fake_distribution(work / "site_a", "1.0")
    other_site = _fake_distribution(work / "site_b", "1.1")
    variants = {name: (flags, {"PYTHONPATH": str(base_site),
                               **{k: v.format(fake=other_site) for k, v in extra.items()}})
                for name, (flags, extra) in VARIANTS.items()}
    return run_variants(SCRIPT, work, variants)


def _named(packs, variant):
    return [(d.section, d.item, d.kind) for d in diff_packs(read_pack(packs["base"]), read_pack(packs[variant]))]


@pytest.mark.slow
def test_identical_runs_report_no_difference(packs):
    assert _named(packs, "again") == []


@pytest.mark.slow
def test_flag_followed_by_flag_is_parsed_and_one_flag_is_named(packs):
    hyper = read_pack(packs["base"])[1]["hyperparameters"]
    assert hyper["bf16"] == "true" and hyper["weight_decay"] == "0.01" and hyper["learning_rate"] == "0.1"
    assert _named(packs, "flag") == [("hyperparameters", "learning_rate", "changed")]


@pytest.mark.slow
def test_one_environment_variable_is_named(packs):
    assert _named(packs, "env") == [("environment", "CUBLAS_WORKSPACE_CONFIG", "only in B")]


@pytest.mark.slow
def test_one_package_version_is_named(packs):
    rows = diff_packs(read_pack(packs["base"]), read_pack(packs["package"]))
    assert [(d.section, d.item, d.a, d.b) for d in rows] == [("packages", "pack-probe-pkg", "1.0", "1.1")]


@pytest.mark.slow
def test_one_data_batch_is_named(packs):
    assert _named(packs, "data") == [("data", "step1 / tensor0", "changed")]


@pytest.mark.slow
def test_unseeded_random_call_is_named(packs):
    named = _named(packs, "unseeded")
    assert named == [("random", next(i for s, i, _ in named if i.startswith("call np.random.seed @ "
                                                                          "config_check_train.py:")), "only in A")]


@pytest.mark.slow
def test_one_weight_is_named(packs):
    assert _named(packs, "weight") == [("weights", "0.weight", "changed")]


@pytest.mark.slow
def test_command_writes_xlsx_html_and_console_summary(packs, tmp_path, capsys):
    assert main(["-f", "pytorch", "config_check", "-c", str(packs["base"]), str(packs["flag"]),
                 "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "hyperparameters: 1 difference(s), 1 that change numbers" in out and "learning_rate | 0.1 | 0.2" in out
    with zipfile.ZipFile(tmp_path / "config_check_result.xlsx") as book:
        sheet = book.read("xl/worksheets/sheet1.xml").decode()
    assert "learning_rate" in sheet and "0.2" in sheet
    assert "learning_rate" in (tmp_path / "config_check_result.html").read_text()


def _train(with_checker: bool, tmp_path: Path) -> list[torch.Tensor]:
    from msprobe.pytorch import ConfigChecker

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    if with_checker:
        ConfigChecker(model=model, output_zip_path=tmp_path / "pack.zip", data_steps=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        loss = model(torch.randn(5, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return [*losses, *(p.detach().clone() for p in model.parameters())]


def test_checker_leaves_the_numbers_unchanged(tmp_path):
    bare, packed = _train(False, tmp_path), _train(True, tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(bare, packed))
    assert set(read_pack(tmp_path / "pack.zip")[1]["data"]) == {"step0", "step1"}


def test_bad_arguments_are_one_line_errors(tmp_path):
    from msprobe.pytorch import ConfigChecker

    with pytest.raises(ValueError, match=r"output_zip_path 'x.txt' must be a path ending in .zip; data_steps -1"):
        ConfigChecker(output_zip_path="x.txt", data_steps=-1)


@pytest.mark.slow
def test_docs_example_runs_and_two_runs_of_it_agree(tmp_path, capsys):
    import re

    doc = Path(__file__).resolve().parents[3] / "docs" / "config_check.md"
    code = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)[0]
    for name in ("run_a", "run_b"):
        result = subprocess.run([sys.executable, "-c", code.replace("./run_a.zip", f"./{name}.zip")], cwd=tmp_path,
                                capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert result.returncode == 0, result.stderr[-2000:]
    assert main(["config_check", "-c", str(tmp_path / "run_a.zip"), str(tmp_path / "run_b.zip"),
                 "-o", str(tmp_path / "out")]) == 0
    assert "no difference" in capsys.readouterr().out


def test_dump_command_packs_scripts_flags_and_refuses_bad_output(tmp_path, capsys):
    script = tmp_path / "launch.sh"
    script.write_text("torchrun train.py --bf16 --weight-decay 0.1 \\\n  --lr=3e-4\n")
    assert main(["-f", "pytorch", "config_check", "-d", str(script), "-o", str(tmp_path / "p.zip")]) == 0
    framework, sections = read_pack(tmp_path / "p.zip")
    assert framework == "pytorch" and sections["framework"]["torch"] == torch.__version__
    assert sections["hyperparameters"] == {"bf16": "true", "weight_decay": "0.1", "learning_rate": "3e-4"}
    assert main(["-f", "pytorch", "config_check", "-d", str(script), "-o", str(tmp_path / "p.txt")]) == 2
    assert "output_zip_path" in capsys.readouterr().err


def test_a_dump_after_the_checker_still_names_the_random_apis_it_tracks(tmp_path):
    """The checker wraps torch.rand & co. for the rest of the process; a dump started afterwards (its API
    table built while they are wrapped) still records them under their own names."""
    code = f"""
import json, pathlib, torch
from msprobe.pytorch import ConfigChecker, PrecisionDebugger
model = torch.nn.Linear(4, 4)
ConfigChecker(model=model, output_zip_path={str(tmp_path / 'pack.zip')!r}, data_steps=1)
debugger = PrecisionDebugger(task="statistics", level="L1", dump_path={str(tmp_path / 'dump')!r}, step=[0])
debugger.start()
model(torch.rand(2, 4) + torch.randn(2, 4))
debugger.stop()
debugger.step()
names = json.loads(next(pathlib.Path({str(tmp_path / 'dump')!r}).rglob('dump.json')).read_text())["data"]
print(sorted(n for n in names if n.startswith("Torch.rand")))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[-2] == "['Torch.rand.0.forward', 'Torch.randn.0.forward']"
