# Every node of a run: the environment check, and node set-up on request
# (workflow/scripts/nodes).


rule environment_check:
    input:
        cfg="results/{experiment}/{run}/config/environment.json",
        layout=measured_layout,
    output:
        "results/{experiment}/{run}/environment.json",
    log:
        "logs/environment_check/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    # One rank per node, through the launcher that trains: every node must
    # agree on versions and workflow revision.
    resources:
        mpi=lambda wc: int(resources.check_holds_mpi(dist_of(wc))),
        nodes=lambda wc: dist_of(wc).nodes,
        tasks=lambda wc: resources.slurm_tasks(dist_of(wc), 1)["tasks"],
        cpus_per_task=1,
    params:
        layout=lambda wc, input: ["--layout", input.layout] if input.layout else [],
    shell:
        "python -m workflow.scripts.nodes.check --config {input.cfg:q} {params.layout:q} --out {output:q} 2> {log:q}"


# On request only (`snakemake --profile profiles/xeon setup_nodes`): where the
# nodes share no filesystem, copy this workflow to the same path on every node
# and build its pinned .venv there (`make venv`), then the experiment's data
# folder (tokenized data, the fetched model) to every node that does not
# already see the same files, through the same launcher.
rule setup_nodes:
    input:
        cfg=f"{RESULTS}/{max(RUNS, key=lambda r: RUNS[r]['distributed']['nodes'])}/config/environment.json",
        # every run's tokenized data and fetched model (a sweep's, each once)
        tokenized=sorted({X.tokens_of(run) for run in RUNS}),
        model=sorted({m for run in RUNS.values() for m in X.fetched_model_of(run)}),
    log:
        f"logs/setup_nodes/{EXP}.log",
    conda:
        "../../envs/cpuddp.yaml"
    resources:
        mpi=1,
        nodes=ALL_NODES,
    params:
        # the experiment's data folder, put at the same path on every node
        data=lambda wc: f"{RESULTS}/data",
    shell:
        "python -m workflow.scripts.nodes.setup --config {input.cfg:q} --data {params.data:q} 2> {log:q}"
