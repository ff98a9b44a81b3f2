"""The graph's HTML view in a real headless Chromium (Debian's ``chromium``), driven by Playwright.

The setup installs ``chromium`` with apt-get when it is missing (as root); where that cannot be done, or
Playwright's Python package is not installed (requirements-dev.txt pins it), the tests are skipped with the
reason. Playwright drives the system Chromium (``executable_path``): no browser is downloaded. Each test
keeps a screenshot under its tmp dir and, when ``MSPROBE_ARTIFACTS`` names a directory, copies it there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from msprobe.core.compare.pipeline import CompareOptions
from msprobe.core.graph import run_graph

pytestmark = pytest.mark.frameworks("pytorch")

REFERENCE = Path(__file__).parents[2] / "data" / "reference-outputs" / "pytorch"
BROWSERS = ("chromium", "chromium-browser")


def _find_chromium() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def _install_chromium() -> str:
    """Install Debian's chromium when it is missing; the reason it cannot be had otherwise."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "chromium is not installed and apt-get cannot be run here (not root, or no apt-get)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "install", "-y", "-q", "chromium"], ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "chromium"]):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{' '.join(command)} failed: {exc}"
        if done.returncode == 0 and command[1] == "install":
            return ""
    return f"apt-get install chromium failed: {done.stderr.strip()[-300:]}"


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed "
                                                                 "(pip install -r requirements-dev.txt)")
    executable = _find_chromium()
    if executable is None:
        reason = _install_chromium()
        executable = _find_chromium()
        if executable is None:
            pytest.skip(f"no headless Chromium: {reason}")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


def _page_of(tmp_path: Path, param: dict) -> tuple[Path, dict]:
    config = tmp_path / "input.json"
    config.write_text(json.dumps(param))
    written = run_graph(config, tmp_path / "out", _no_loader, CompareOptions(progress=False))
    return written[0].html, json.loads(written[0].vis.read_text())


def _no_loader(path, spec):
    raise AssertionError("statistics compares load no tensor file")


def _open(browser, page_path: Path):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(page_path.resolve().as_uri())
    return page, errors, requests


def _keep_screenshot(page, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / f"{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 1000
    artifacts = os.environ.get("MSPROBE_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / shot.name)
    return shot


def test_compare_view_opens_the_first_suspect_and_shows_a_clicked_node(browser, tmp_path):
    page_path, vis = _page_of(tmp_path, {"npu_path": str(REFERENCE / "pt_statistics_mix_bf16" / "step0" / "rank"),
                                         "bench_path": str(REFERENCE / "pt_statistics_mix_fp32" / "step0" / "rank")})
    page, errors, requests = _open(browser, page_path)
    nodes = vis["NPU"]["node"]
    # the tree renders: the root and its children, coloured with the .vis bands
    assert page.locator(".row").count() >= 1 + len(nodes["DefaultModel"]["subnodes"])
    conv = page.locator('.row[data-id="Module.conv.Conv2d.forward.0"]')
    expected_color = page.evaluate("c => { const e = document.createElement('div'); e.style.background = c; "
                                   "return e.style.backgroundColor; }", "#FFFCF3")
    assert conv.evaluate("e => e.style.backgroundColor") == expected_color
    # the first suspect node: bf16 against fp32 is rounding only, so no node is beyond it and the view opens
    # the root, although 1.1.1's index puts entries above its suggestion band
    entries = json.loads((REFERENCE / "pt_statistics_mix_bf16" / "step0" / "rank" / "dump.json").read_text())["data"]
    assert any(nodes[n]["data"].get("precision_index", 0) > 0.4 for n in entries)
    first = next((n for n in entries if float(nodes[n]["data"].get("rounding_excess", 0)) > 1), "DefaultModel")
    assert page.locator("#node-title").text_content() == first
    # click a node: its inputs and outputs side by side, NPU beside bench, and its stack
    page.locator('.row[data-id="Apis_Between_Modules.0"] .toggle').click()
    page.locator('.row[data-id="Module.fc.Linear.forward.0"]').click()
    assert page.locator("#node-title").text_content() == "Module.fc.Linear.forward.0"
    inputs, outputs = page.locator("#details .inputs table"), page.locator("#details .outputs table")
    assert inputs.count() == len(nodes["Module.fc.Linear.forward.0"]["input_data"]) == 1
    assert outputs.count() == 1
    text = outputs.first.inner_text()
    assert "bench" in text and "MaxRelativeErr" in text
    out_fields = nodes["Module.fc.Linear.forward.0"]["output_data"]["Module.fc.Linear.forward.0.output.0"]
    assert out_fields["Max"] in text and out_fields["Max diff"] in text
    assert "mk_pt.py" in page.locator("#details pre.stack").text_content()
    # search by name
    page.fill("#search", "linear.0.back")
    page.locator("#results div", has_text="Functional.linear.0.backward").click()
    assert page.locator("#node-title").text_content() == "Functional.linear.0.backward"
    _keep_screenshot(page, tmp_path, "graph_compare_view")
    assert errors == []
    assert all(url.startswith("file:") for url in requests), requests  # no network
    page.close()


def test_build_view_of_an_l1_dump_shows_stack_groups(browser, tmp_path):
    page_path, vis = _page_of(tmp_path, {"npu_path": str(REFERENCE / "pt_statistics_L1_fp32" / "step0" / "rank")})
    html = page_path.read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)  # one self-contained file
    page, errors, _ = _open(browser, page_path)
    assert page.locator("#node-title").text_content() == "DefaultModel"
    page.locator('.row[data-id="Module.mk_pt.forward.0"] .toggle').click()
    page.locator('.row[data-id="Module.linear.forward.0"] .toggle').click()
    page.locator('.row[data-id="Functional.linear.0.forward"]').click()
    inputs = vis["node"]["Functional.linear.0.forward"]["input_data"]
    assert page.locator("#details .inputs table").count() == len(inputs)
    assert page.locator("#details .outputs table").count() == 1
    _keep_screenshot(page, tmp_path, "graph_build_view")
    assert errors == []
    page.close()
