"""``msprobe monitor view``: a real monitored run (a LLaMA with a planted spike) as one HTML page, opened in
the system Chromium (Playwright, as tests/common/test_graph_browser.py drives it): the heat map has a row
per module, the alert is marked on the map and listed, a clicked module draws one line per rank, and the
page loads nothing from the network."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch
from monitor_models import llama, train, write_config

SPIKE_STEP, LAYER = 6, "model.layers.1.mlp.down_proj"


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("no system Chromium (tests/common/test_graph_browser.py installs it with apt-get)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("view")
    out = tmp / "out"

    def plant(step, model):
        if step == SPIKE_STEP:
            with torch.no_grad():
                model.get_submodule(LAYER).weight.mul_(100)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MONITOR_OUTPUT_DIR", str(out))
        train(llama(), SPIKE_STEP + 2, write_config(tmp / "c.json", xy_distribution=True, wg_distribution=True),
              before_step=plant)
    (rank0,) = out.iterdir()
    rank1 = out / rank0.name.replace("-rank0-", "-rank1-")
    shutil.copytree(rank0, rank1)  # a second rank's folder: the same numbers, no alert of its own
    (rank1 / "anomalies.json").unlink()
    page = tmp / "page.html"
    result = subprocess.run([sys.executable, "-m", "msprobe.core", "monitor", "view", "-i", str(out), "-o", str(page)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return page


def test_view_in_chromium(browser, page_file, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors, requests = [], []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(page_file.resolve().as_uri())
    assert page.locator("#metric").input_value() == "actv.norm"
    names = page.locator("#map th.name").all_inner_texts()
    assert f"{LAYER}.output" in names and "model.layers.0.mlp.output" in names
    assert page.locator("#map tr").first.locator("th.step").count() == SPIKE_STEP + 2
    marked = page.locator("#map td.cell.alert")
    assert marked.count() == 1
    assert marked.get_attribute("data-step") == str(SPIKE_STEP)
    assert marked.locator("xpath=..").get_attribute("data-target") == f"{LAYER}.output"
    assert page.locator("#alerts li").count() == 1
    page.locator("#alerts li").first.click()
    assert page.locator("#lines polyline").count() == 2 and page.locator("#lines .alertMark").count() == 1
    page.select_option("#metric", "grad_reduced.norm")
    assert "lm_head.weight" in page.locator("#map th.name").all_inner_texts()
    page.screenshot(path=str(tmp_path / "monitor_view.png"), full_page=True)
    assert errors == [] and all(url.startswith("file:") for url in requests)


def test_view_of_a_folder_without_monitor_files(tmp_path):
    result = subprocess.run([sys.executable, "-m", "msprobe.core", "monitor", "view", "-i", str(tmp_path), "-o",
                             str(tmp_path / "p.html")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "holds no monitor CSV files" in result.stderr
