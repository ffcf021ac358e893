"""The report: tables and charts (plots.py), and `snakemake --report` opened
in a real headless browser (Chromium), screenshot included."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from helpers.workflow import snakemake
from helpers.sweep import EXPERIMENT, RUNS

PNG = b"\x89PNG\r\n\x1a\n"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--virtual-time-budget=15000"]


def cells(html_text: str, table_id: str) -> list[list[str]]:
    table = re.search(rf'<table id="{table_id}".*?</table>', html_text, re.S).group(0)
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]


def test_workflow_writes_the_report_files(sweep_run):
    report = sweep_run[0] / f"results/{EXPERIMENT}/report"
    for name in ["summary.html", "scaling.png", "loss.png", "quantization.html", "environment.html",
                 "tries.html", "overview.html"] + [f"loss/{run}.png" for run in RUNS]:
        assert (report / name).is_file(), name
    assert all(run in (report / "environment.html").read_text() for run in RUNS)
    tries = (report / "tries.html").read_text()
    for run in RUNS:  # one ok try each, linked to its try-1/ folder, which is there
        header, row = cells(tries, f"cpuddp-tries-{run}")
        assert row[1] == "ok"
        href = re.search(r'href="([^"]+)"', row[6]).group(1)
        assert href.endswith(f"{run}/try-1/") and (report / href / "launcher.log").is_file()


@pytest.fixture(scope="module")
def html_report(sweep_run):
    work, configfile = sweep_run
    out = work / "report.html"
    done = snakemake(work, configfile, "--report", str(out))
    assert "Report created" in done.stdout + done.stderr
    return out


def chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                None)


def browse(url: str, *flags: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *flags, url],
                              capture_output=True, text=True, timeout=180)


@pytest.mark.cluster  # Debian's chromium (.ci/run installs it)
def test_report_opens_in_a_browser_with_table_and_charts(html_report, tmp_path):
    if chromium() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium): the report is not opened in a browser")
    from PIL import Image

    dom = browse(html_report.as_uri(), "--dump-dom").stdout
    # What the report's JavaScript rendered: the landing page and the menu.
    assert re.search(r'<table id="cpuddp-summary"', dom), dom[:2000]
    summary = cells(dom, "cpuddp-summary")
    assert [row[0] for row in summary[1:]] == RUNS
    for alt in ("scaling chart", "loss chart"):
        assert re.search(rf'<img id="cpuddp-\w+" alt="{alt}" src="data:image/png;base64,', dom), alt
    for category in ("Summary", "Scaling", "Training", "Quantization", "Environment"):
        assert f">{category}<" in dom, category

    shot = tmp_path / "report.png"
    browse(html_report.as_uri(), "--window-size=1400,1500", f"--screenshot={shot}")
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 1500)
    # Not a blank page: text, table borders and the charts' colours.
    assert len(image.getcolors(maxcolors=1 << 20)) > 200
    r, g, b = np.asarray(image).astype(int).transpose(2, 0, 1)
    blue = int(((b > 200) & (r < 100) & (g > 100) & (g < 160)).sum())
    assert blue > 2000  # the bars of the scaling chart (#3b82f6)
