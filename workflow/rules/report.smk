# The experiment's summary.json: one entry per run.


rule report_summary:
    input:
        env=expand("{d}/environment.json", d=run_dirs()),
        train=expand("{d}/train_metrics.json", d=run_dirs()),
        fp32=expand("{d}/eval_fp32.json", d=run_dirs()),
    output:
        f"{RESULTS}/summary.json",
    params:
        runs=[a for run in RUNS for a in ("--run", run)],
        experiment=EXP,
        results=lambda wc, output: os.path.dirname(output[0]),
    log:
        f"logs/report_summary/{EXP}.log",
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.summary --experiment {params.experiment:q} --results {params.results:q} {params.runs:q}"
        " --out {output} 2> {log}"
