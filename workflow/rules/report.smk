# The experiment's summary.json (one entry per run) and its report:
# results/<experiment>/report.html, written by every run that reaches `rule
# all` (a job like the others: a rerun with nothing changed does nothing,
# and on Slurm it runs on the login node), and the same tables and charts
# marked for Snakemake's own `--report` (landing page:
# workflow/report/workflow.rst; captions: workflow/report/*.rst).


report: "../report/workflow.rst"


# One job writes summary.json, report.html and the report files, so that
# `rule all` leaves everything `snakemake --report` needs.
rule report_summary:
    input:
        cfg=f"{RESULTS}/config/report.json",
        env=expand("{d}/environment.json", d=run_dirs()),
        train=expand("{d}/train_metrics.json", d=run_dirs()),
        fp32=expand("{d}/eval_fp32.json", d=run_dirs()),
        # fp32 OpenVINO and int8 beside eager fp32 (else both are null).
        runtimes=lambda wc: X.runtime_evaluations(),
        deploy=expand("{d}/deploy", d=run_dirs()),
    output:
        # scaling.png with two runs or more, evaluation.png with evaluation.every.
        **optional_charts(),
        summary=f"{RESULTS}/summary.json",
        # The report: opens on each run's answer (workflow/scripts/report/page.py).
        page=f"{RESULTS}/report.html",
        # The landing page (workflow.rst) includes it: runs table, charts.
        overview=f"{RESULTS}/report/overview.html",
        table=report(
            f"{RESULTS}/report/summary.html",
            caption="../report/summary.rst",
            category="Summary",
            labels={"table": "runs"},
        ),
        loss=report(
            f"{RESULTS}/report/loss.png",
            caption="../report/loss.rst",
            category="Training",
            labels={"run": "all runs"},
        ),
        # One folder, not a file per run: the outputs stay the same when the
        # sweep grows, so Snakemake sees the changed inputs and reruns this.
        run_loss=report(
            directory(f"{RESULTS}/report/loss"),
            patterns=["{run}.png"],
            caption="../report/loss.rst",
            category="Training",
            labels={"run": "{run}"},
        ),
        quantization=report(
            f"{RESULTS}/report/quantization.html",
            caption="../report/quantization.rst",
            category="Quantization",
            labels={"table": "fp32 vs int8"},
        ),
        environment=report(
            f"{RESULTS}/report/environment.html",
            caption="../report/environment.rst",
            category="Environment",
            labels={"table": "every run"},
        ),
        # Each run's tries (tries.json): outcome, error, resumed step, nodes, log folder.
        tries=report(
            f"{RESULTS}/report/tries.html",
            caption="../report/tries.rst",
            category="Training",
            labels={"run": "tries of every run"},
        ),
    log:
        f"logs/report_summary/{EXP}.log",
    conda:
        "../../envs/cpuddp.yaml"
    params:
        runs=[a for run in RUNS for a in ("--run", run)],
        experiment=EXP,
        results=lambda wc, output: os.path.dirname(output.summary),
        report_dir=lambda wc, output: os.path.dirname(output.loss),
    shell:
        "python -m workflow.scripts.report.summary --experiment {params.experiment:q} --results {params.results:q}"
        " {params.runs:q} --config {input.cfg:q} --out {output.summary:q} 2> {log:q}"
        " && python -m workflow.scripts.report.render --summary {output.summary:q} --config {input.cfg:q}"
        " --results {params.results:q} --out-dir {params.report_dir:q} --page {output.page:q} 2>> {log:q}"


# The accuracy table of a sweep over task or seed (in `rule all` then):
# results/<experiment>/table.md and table.csv, and for the report the table
# and each seed's score per task (workflow/scripts/report/table.py).
rule report_table:
    input:
        cfg=f"{RESULTS}/config/report.json",
        summary=f"{RESULTS}/summary.json",
        # The report: opens on each run's answer (workflow/scripts/report/page.py).
        page=f"{RESULTS}/report.html",
    output:
        md=f"{RESULTS}/table.md",
        csv=f"{RESULTS}/table.csv",
        table=report(
            f"{RESULTS}/report/table.html",
            caption="../report/table.rst",
            category="Accuracy table",
            labels={"table": "tasks x models"},
        ),
        seeds=report(
            f"{RESULTS}/report/seeds.png",
            caption="../report/table.rst",
            category="Accuracy table",
            labels={"chart": "score per seed"},
        ),
    log:
        f"logs/report_table/{EXP}.log",
    conda:
        "../../envs/cpuddp.yaml"
    params:
        results=lambda wc, output: os.path.dirname(output.md),
        report_dir=lambda wc, output: os.path.dirname(output.table),
    shell:
        "python -m workflow.scripts.report.table --config {input.cfg:q} --results {params.results:q}"
        " --summary {input.summary:q} --out-dir {params.report_dir:q} > {log:q} 2>&1"
