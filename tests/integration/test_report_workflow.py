"""The report: results/<experiment>/report.html written by every run and
opened in a real headless browser (Chromium) at 1280 x 800, where its first
screen holds each run's answer; `make report` with any experiment file; and
`snakemake --report` opened in the browser, screenshot included."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers.workflow import REPO, snakemake, tiny_experiment, write_config
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
    assert not (report / "evaluation.png").exists()  # no run evaluated during training
    page = (report.parent / "report.html").read_text()  # the plain run's report
    assert 'alt="scaling chart"' in page and "evaluation chart" not in page
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


# ------------------------------------------- one run, evaluated while it trains

@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory, tiny_model_dir) -> tuple[Path, Path]:
    """A one-run experiment with evaluation.every, run by a plain `snakemake`
    (no target, no --report): (work folder, experiment file)."""
    work = tmp_path_factory.mktemp("evaluated")
    configfile = tiny_experiment(work, tiny_model_dir, max_steps=4)
    config = yaml.safe_load(configfile.read_text())
    config["evaluation"] = {"every": 2, "batch_size": 16}
    config["quantization"] = {"enabled": False}
    snakemake(work, write_config(configfile, config))
    return work, configfile


def test_a_plain_run_writes_the_report_with_the_evaluation_curve_and_no_scaling_chart(evaluated_run):
    work, _ = evaluated_run
    page = (work / "results/tiny/report.html").read_text()
    assert 'id="cpuddp-answer"' in page and 'alt="evaluation chart"' in page
    assert "scaling chart" not in page and not (work / "results/tiny/report/scaling.png").exists()
    assert (work / "results/tiny/report/evaluation.png").read_bytes().startswith(PNG)


def test_make_report_takes_an_experiment_file_outside_experiments(evaluated_run):
    work, configfile = evaluated_run
    page, trained = work / "results/tiny/report.html", work / "results/tiny/default/train_metrics.json"
    page.unlink()
    before = trained.stat().st_mtime_ns
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "report", f"EXP={configfile}",
                           f"REPORT_ARGS=--directory {work} --cores 2"],
                          capture_output=True, text=True, timeout=600, env={**env, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Report: results/tiny/report.html" in done.stderr
    assert 'id="cpuddp-answer"' in page.read_text()
    assert trained.stat().st_mtime_ns == before  # the report, nothing retrained


def test_make_report_of_a_missing_file_says_so_in_one_line(tmp_path):
    # A user's make, not one nested in the suite's (make test-all): its own "make: ***" line is make's
    user_env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "report", f"EXP={tmp_path}/none.yaml"],
                          capture_output=True, text=True, timeout=120, env=user_env)
    lines = [line for line in done.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]
    assert done.returncode != 0 and len(lines) == 1 and "no experiment file" in lines[0], done.stderr


# ------------------------------------------------------ the first screen

FIGURES = ("run", "fp32", "int8", "samples", "deployed", "layout", "precision")
# Run in a copy of the page: every answer cell's box in the window, and the window's size.
BOXES = """<script>document.body.setAttribute("data-boxes", JSON.stringify({
  window: [innerWidth, innerHeight],
  cells: [...document.querySelectorAll("[data-figure]")].map(e => {
    const r = e.getBoundingClientRect();
    return [e.dataset.run, e.dataset.figure, r.left, r.top, r.right, r.bottom, e.innerText];
  })}));</script></body>"""


def first_screen(page: Path, tmp_path: Path) -> dict:
    """The answer cells' boxes in a 1280 x 800 window: {(run, figure): (box, text)}."""
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", BOXES))
    dom = browse(probe.as_uri(), "--window-size=1280,800", "--dump-dom").stdout
    boxes = json.loads(html.unescape(re.search(r'data-boxes="([^"]*)"', dom).group(1)))
    assert boxes["window"][0] == 1280 and boxes["window"][1] <= 800
    return {(run, kind): ((left, top, right, bottom), text) for run, kind, left, top, right, bottom, text
            in boxes["cells"]}


@pytest.mark.cluster  # Debian's chromium (.ci/run installs it)
@pytest.mark.parametrize("which", ["sweep", "one evaluated run"])
def test_the_first_screen_holds_each_runs_answer(which, request, tmp_path):
    if chromium() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium): the report is not opened in a browser")
    work, experiment = ((request.getfixturevalue("sweep_run")[0], EXPERIMENT) if which == "sweep"
                        else (request.getfixturevalue("evaluated_run")[0], "tiny"))
    summary = json.loads((work / f"results/{experiment}/summary.json").read_text())
    cells_seen = first_screen(work / f"results/{experiment}/report.html", tmp_path)
    for entry in summary["runs"]:
        run = entry["run"]
        for kind in FIGURES:
            (left, top, right, bottom), text = cells_seen[(run, kind)]
            assert 0 <= left < right <= 1280 and 0 <= top < bottom <= 800, (run, kind, top, bottom)
            assert text.strip(), (run, kind)
        shown = {kind: cells_seen[(run, kind)][1] for kind in FIGURES}
        fp32 = entry["eval"]["fp32"]
        assert f"accuracy {fp32['accuracy']:.4g}" in shown["fp32"] and f"f1 {fp32['f1']:.4g}" in shown["fp32"]
        int8 = entry["eval"]["int8"]
        assert (f"accuracy {int8['accuracy']:.4g}" if int8 else "not quantized") in shown["int8"]
        assert shown["samples"] == f"{entry['train_samples_per_second']:.4g}"
        assert shown["deployed"].startswith(entry["deploy"]["label"])
        assert entry["deploy"]["why"][:30] in shown["deployed"]
        assert f"{entry['processes_per_node']} rank(s)" in shown["layout"]
        assert shown["precision"].startswith(entry["precision"])

    shot = tmp_path / "first-screen.png"
    browse((work / f"results/{experiment}/report.html").as_uri(), "--window-size=1280,800", f"--screenshot={shot}")
    from PIL import Image

    assert Image.open(shot).size == (1280, 800)
