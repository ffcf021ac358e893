# Dataset: generated demo files, the Hub or local files -> Arrow -> tokens.


# Only the demo generates its data; real files are never rewritten.
if (CONFIG["data"] or {}).get("generate"):

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
            "python -m workflow.scripts.data.demo --task {params.task} --out $(dirname {output.train:q})"
            " --train {params.settings[train]} --dev {params.settings[validation]}"
            " --seed {params.settings[seed]} 2> {log}"


rule data_load:
    input:
        cfg="results/{experiment}/config/data.json",
        files=local_data_files,
    output:
        directory("results/{experiment}/data/raw"),
    log:
        "logs/data_load/{experiment}.log",
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.data.load --config {input.cfg} --out {output} 2> {log}"


# A Hub model is fetched once here, on the launch (or Slurm login) node,
# through the Hugging Face cache (HF_HOME); tokenizer and ranks read this
# copy with the Hub offline. A local folder or pkg: model is used in place.
if is_hub_id(CONFIG["model"]):

    rule data_fetch_model:
        output:
            directory("results/{experiment}/data/model"),
        log:
            "logs/data_fetch_model/{experiment}.log",
        conda:
            "../../envs/cpuddp.yaml"
        params:
            model=CONFIG["model"],
        shell:
            "python -m workflow.scripts.data.fetch_model --model {params.model} --out {output} 2> {log}"


rule data_tokenize:
    input:
        cfg="results/{experiment}/config/tokenize.json",
        raw="results/{experiment}/data/raw",
        model=fetched_model,
    output:
        directory("results/{experiment}/data/tokenized"),
    log:
        "logs/data_tokenize/{experiment}.log",
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.data.tokenize --config {input.cfg} --data {input.raw}"
        " --out {output} 2> {log}"
