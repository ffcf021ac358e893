# Per-stage configuration files (rewritten only when their slice changes)
# and the environment check of each run.


rule config_shared:
    output:
        "results/{experiment}/config/{shared_stage}.json",
    params:
        content=lambda wc: stage_json(wc.shared_stage),
    log:
        "logs/config_shared/{experiment}/{shared_stage}.log",
    run:
        with open(output[0], "w") as handle:
            print(params.content, file=handle)


rule config_run:
    output:
        "results/{experiment}/{run}/config/{run_stage}.json",
    params:
        content=lambda wc: stage_json(wc.run_stage, wc.run),
    log:
        "logs/config_run/{experiment}/{run}/{run_stage}.log",
    run:
        with open(output[0], "w") as handle:
            print(params.content, file=handle)


rule environment_check:
    input:
        cfg="results/{experiment}/{run}/config/environment.json",
    output:
        "results/{experiment}/{run}/environment.json",
    log:
        "logs/environment_check/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.environment --config {input.cfg} --out {output} 2> {log}"
