# The scaling plan (workflow/scripts/plan; docs: scaling plan): one rank's
# step measured on this node, the network between the nodes of the widest
# run, and the predicted efficiency on 1 to plan.max_nodes nodes.


# Its measurements: one rank's step on this node, and the network between
# the nodes of the widest run (through the launcher that trains).
rule plan_profile:
    input:
        cfg=f"{RESULTS}/config/plan.json",
        env=f"{RESULTS}/{FIRST_RUN}/environment.json",
    output:
        f"{RESULTS}/plan/profile.json",
    log:
        f"logs/plan_profile/{EXP}.log",
    conda:
        "../../envs/cpuddp.yaml"
    threads: machine_cores()
    resources:
        mpi=1,
        nodes=ALL_NODES,
    shell:
        "python -m workflow.scripts.plan.profile --config {input.cfg:q} --environment {input.env:q}"
        " --out {output:q} 2> {log:q}"


rule plan_network:
    input:
        cfg=f"{RESULTS}/{X.widest_run}/config/train.json",
        env=f"{RESULTS}/{X.widest_run}/environment.json",
    output:
        f"{RESULTS}/plan/network.json",
    log:
        f"logs/plan_network/{EXP}.log",
    conda:
        "../../envs/cpuddp.yaml"
    resources:
        mpi=1,
        nodes=ALL_NODES,
    params:
        rank_logs=f"logs/plan_network/{EXP}",
    shell:
        "python -m workflow.scripts.plan.network --config {input.cfg:q} --environment {input.env:q}"
        " --out {output:q} --log-dir {params.rank_logs:q} 2> {log:q}"


# The scaling plan: predicted efficiency on 1 to plan.max_nodes nodes for
# each lever, printed and marked for the report (in `rule all` with
# plan.report: true).
rule plan_scaling:
    input:
        cfg=f"{RESULTS}/config/plan.json",
        profile=f"{RESULTS}/plan/profile.json",
        network=lambda wc: X.plan_network(),
    output:
        plan=f"{RESULTS}/plan/plan.json",
        text=f"{RESULTS}/plan/plan.md",
        table=report(
            f"{RESULTS}/plan/plan.html",
            caption="../report/plan.rst",
            category="Scaling plan",
            labels={"table": "efficiency"},
        ),
        chart=report(
            f"{RESULTS}/plan/plan.png",
            caption="../report/plan.rst",
            category="Scaling plan",
            labels={"chart": "efficiency"},
        ),
    log:
        f"logs/plan_scaling/{EXP}.log",
    conda:
        "../../envs/cpuddp.yaml"
    params:
        network=lambda wc, input: ["--network", input.network] if input.network else [],
        out_dir=lambda wc, output: os.path.dirname(output.plan),
    shell:
        "python -m workflow.scripts.plan.plan --profile {input.profile:q} --config {input.cfg:q} {params.network:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1 && cat {output.text:q}"


rule plan:
    input:
        rules.plan_scaling.output,
