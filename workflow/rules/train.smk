# DDP training (workflow/scripts/train): the launcher (workflow/scripts/launch)
# starts every rank with mpirun or srun, argument lists only.


rule train_ddp:
    input:
        cfg="results/{experiment}/{run}/config/train.json",
        env="results/{experiment}/{run}/environment.json",
        data=run_tokens,
        # evaluation during training of a QA task maps answers back into the contexts
        raw=run_raw,
        # the model's local copy (a Hub id fetched once by data_fetch_model)
        model=run_model,
    output:
        model=directory("results/{experiment}/{run}/model"),
        metrics="results/{experiment}/{run}/train_metrics.json",
    log:
        "logs/train_ddp/{experiment}/{run}.log",
    benchmark:
        "benchmarks/train_ddp/{experiment}/{run}.tsv"
    # A failed try is retried by the workflow itself; it resumes from the
    # newest whole checkpoint (and, with distributed.min_nodes, may go on
    # without a node that is gone). tries.json keeps every try.
    retries: training_retries()
    conda:
        "../../envs/cpuddp.yaml"
    # The ranks take the nodes' cores; one MPI job at a time on them (the
    # profiles cap `mpi`). On Slurm (profiles/slurm) the same resources size
    # the allocation; the launcher then starts the ranks with srun.
    threads: machine_cores()
    resources:
        mpi=lambda wc: int(resources.mpi_job(dist_of(wc))),
        nodes=lambda wc: dist_of(wc).nodes,
        tasks=lambda wc: resources.slurm_tasks(dist_of(wc))["tasks"],
        tasks_per_node=lambda wc: resources.slurm_tasks(dist_of(wc))["tasks_per_node"],
        cpus_per_task=lambda wc: resources.slurm_cpus(dist_of(wc)),
        # Which try this is (Snakemake passes it to resource functions only).
        attempt=lambda wc, attempt: attempt,
    params:
        rank_logs="logs/train_ddp/{experiment}/{run}",
        all_tries="logs/train_ddp/{experiment}/{run}/all-tries.log",
        run_dir=lambda wc, output: os.path.dirname(output.metrics),
    # tee ignores SIGTERM, which scancel and time limits send to every process
    # of the job: the launcher's last lines (which rank, its log) reach the log.
    # Every try appends to all-tries.log, after a header line naming it (`==
    # try N (attempt A) started ...`), and the rule log starts as a copy of it
    # (Snakemake deletes the rule log before each try): it holds every try.
    shell:
        "mkdir -p {params.rank_logs:q} && touch {params.all_tries:q} && cp {params.all_tries:q} {log:q} &&"
        " python -m workflow.scripts.launch --config {input.cfg:q} --environment {input.env:q}"
        " --log-dir {params.rank_logs:q} --try {resources.attempt} --tries {params.run_dir:q}/tries.json --"
        " python -m workflow.scripts.train.rank --config {input.cfg:q} --environment {input.env:q}"
        " --data {input.data:q} --raw {input.raw:q} --out {params.run_dir:q} --log-dir {params.rank_logs:q} 2>&1"
        " | (trap '' TERM; exec tee -a {params.all_tries:q} {log:q})"


# processes_per_node auto: the run's layout from the layout cache of this
# CPU model and run shape, else from short bursts of every ranks x threads
# split of the cores at the run's global batch, on this (the launch) node,
# which then fill the cache (workflow/scripts/train/tune.py, settings/layout.py).
# A failed burst drops its layout; with none left, one rank of every core.
# The environment check records it and every node uses it.
rule measure_layout:
    input:
        cfg="results/{experiment}/{run}/config/train.json",
        data=run_tokens,
        model=run_model,
    output:
        "results/{experiment}/{run}/layout.json",
    log:
        "logs/measure_layout/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    threads: machine_cores()
    resources:
        mpi=1,
        nodes=ALL_NODES,
    shell:
        "python -m workflow.scripts.train.tune --auto --config {input.cfg:q} --data {input.data:q} --out {output:q} 2> {log:q}"


# `snakemake ... tune`: measures the first run's layouts again (longer
# bursts) and replaces their cache entry, which processes_per_node auto then uses.
rule tune_layout:
    input:
        cfg=f"{RESULTS}/{FIRST_RUN}/config/train.json",
        data=X.tokens_of(FIRST_RUN),
        model=X.fetched_model_of(RUNS[FIRST_RUN]),
    output:
        "results/{experiment}/tune/layout.json",
    log:
        "logs/tune_layout/{experiment}.log",
    conda:
        "../../envs/cpuddp.yaml"
    threads: machine_cores()
    resources:
        mpi=1,
        nodes=ALL_NODES,
    shell:
        "python -m workflow.scripts.train.tune --config {input.cfg:q} --data {input.data:q} --out {output:q} 2> {log:q}"


rule tune:
    input:
        f"{RESULTS}/tune/layout.json",
