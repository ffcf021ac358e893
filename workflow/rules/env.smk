# Per-stage configuration files (rewritten only when their slice changes)
# and the environment check of each run.
from workflow.scripts.launch import command as launch


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


# The rules that launch ranks on the nodes (Slurm submits only these).
MPI_RULES = ("environment_check", "train_ddp", "setup_nodes")


rule environment_check:
    input:
        cfg="results/{experiment}/{run}/config/environment.json",
    output:
        "results/{experiment}/{run}/environment.json",
    log:
        "logs/environment_check/{experiment}/{run}.log",
    # One rank per node, through the launcher that trains: every node must
    # agree on versions and workflow revision (workflow/scripts/nodes/check.py).
    resources:
        mpi=lambda wc: int(launch.per_node_job(RUNS[wc.run]["distributed"])),
        nodes=lambda wc: RUNS[wc.run]["distributed"]["nodes"],
        tasks=lambda wc: launch.slurm_tasks(RUNS[wc.run]["distributed"], 1)["tasks"],
        cpus_per_task=1,
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.nodes.check check --config {input.cfg} --out {output} 2> {log}"


# On request only (`snakemake --profile profiles/xeon setup_nodes`): where the
# nodes share no filesystem, copy this workflow to the same path on every node
# and build its pinned .venv there (`make venv`), through the same launcher.
rule setup_nodes:
    input:
        cfg=f"{RESULTS}/{max(RUNS, key=lambda r: RUNS[r]['distributed']['nodes'])}/config/environment.json",
    log:
        f"logs/setup_nodes/{EXP}.log",
    resources:
        mpi=1,
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.nodes.check setup --config {input.cfg} 2> {log}"
