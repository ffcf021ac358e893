# Dataset: generated demo files, the Hub or local files -> Arrow -> tokens.


# Only the demo generates its data; real files are never rewritten.
if (CONFIG["data"] or {}).get("generate") and CONFIG["data"].get("glue_dir"):

    # A task sweep's demo: a GLUE archive folder with every swept task.
    rule data_generate_demo_glue:
        output:
            demo_glue_files(),
        log:
            f"logs/data_generate_demo/{EXP}.log",
        conda:
            "../../envs/cpuddp.yaml"
        params:
            tasks=",".join(dict.fromkeys(r["task"] for r in RUNS.values())),
            settings=CONFIG["data"]["generate"],
            out=CONFIG["data"]["glue_dir"],
        shell:
            "python -m workflow.scripts.data.demo --task glue --tasks {params.tasks:q} --out {params.out:q}"
            " --train {params.settings[train]:q} --dev {params.settings[validation]:q}"
            " --seed {params.settings[seed]:q} 2> {log:q}"

elif (CONFIG["data"] or {}).get("generate"):

    rule data_generate_demo:
        output:
            train=CONFIG["data"]["train"],
            validation=CONFIG["data"]["validation"],
        log:
            f"logs/data_generate_demo/{EXP}.log",
        conda:
            "../../envs/cpuddp.yaml"
        params:
            task=CONFIG["task"],
            settings=CONFIG["data"]["generate"],
        shell:
            "python -m workflow.scripts.data.demo --task {params.task:q} --out $(dirname {output.train:q})"
            " --train {params.settings[train]:q} --dev {params.settings[validation]:q}"
            " --seed {params.settings[seed]:q} 2> {log:q}"


rule data_load:
    input:
        cfg=lambda wc: data_config(wc.dkey, "data"),
        files=local_data_files,
    output:
        directory("results/{experiment}/data{dkey}/raw"),
    log:
        "logs/data_load/{experiment}{dkey}.log",
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.data.load --config {input.cfg:q} --out {output:q} 2> {log:q}"


# A Hub model is fetched once here, on the launch (or Slurm login) node,
# through the Hugging Face cache (HF_HOME): one copy per model of the
# experiment (a sweep's models each once); tokenizer and ranks read it with
# the Hub offline. A local folder or pkg: model is used in place.
if HUB_MODELS:

    rule data_fetch_model:
        output:
            directory("results/{experiment}/data/models/{mkey}"),
        log:
            "logs/data_fetch_model/{experiment}/{mkey}.log",
        conda:
            "../../envs/cpuddp.yaml"
        params:
            model=lambda wc: HUB_MODELS[wc.mkey],
        shell:
            "python -m workflow.scripts.data.fetch_model --model {params.model:q} --out {output:q} 2> {log:q}"


# One per task, model and length: every run (seed, learning rate) shares it.
rule data_tokenize:
    input:
        cfg=lambda wc: data_config(wc.tkey, "tokenize"),
        raw=lambda wc: raw_for_tokens(wc.tkey),
        model=lambda wc: fetched_model_of(tokens_config(wc.tkey)),
    output:
        directory("results/{experiment}/data{tkey}/tokenized"),
    log:
        "logs/data_tokenize/{experiment}{tkey}.log",
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.data.tokenize --config {input.cfg:q} --data {input.raw:q}"
        " --out {output:q} 2> {log:q}"
