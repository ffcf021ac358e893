# Dataset: generated demo files, the Hub or local files -> Arrow -> tokens.


# Only the demo generates its data (data.generate): the train and validation
# files, or a GLUE archive folder with every swept task's. Real files are
# never rewritten: without data.generate the rule has no output, and nothing
# asks for it.
rule data_generate_demo:
    output:
        X.demo_files(),
    log:
        f"logs/data_generate_demo/{EXP}.log",
    conda:
        "../../envs/cpuddp.yaml"
    params:
        args=X.demo_args(),
    shell:
        "python -m workflow.scripts.data.demo {params.args:q} 2> {log:q}"


rule data_load:
    input:
        cfg=lambda wc: X.data_config(wc.dkey, "data"),
        files=lambda wc: X.local_data_files(wc.dkey),
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
# experiment (a sweep's models each once; {mkey} matches only those); the
# tokenizer and ranks read it with the Hub offline. A local folder or pkg:
# model is used in place.
rule data_fetch_model:
    output:
        directory("results/{experiment}/data/models/{mkey}"),
    log:
        "logs/data_fetch_model/{experiment}/{mkey}.log",
    conda:
        "../../envs/cpuddp.yaml"
    params:
        model=lambda wc: X.hub_models[wc.mkey],
    shell:
        "python -m workflow.scripts.data.fetch_model --model {params.model:q} --out {output:q} 2> {log:q}"


# One per task, model and length: every run (seed, learning rate) shares it.
rule data_tokenize:
    input:
        cfg=lambda wc: X.data_config(wc.tkey, "tokenize"),
        raw=lambda wc: X.raw_for_tokens(wc.tkey),
        model=lambda wc: X.fetched_model_of(X.tokens_config(wc.tkey)),
    output:
        directory("results/{experiment}/data{tkey}/tokenized"),
    log:
        "logs/data_tokenize/{experiment}{tkey}.log",
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.data.tokenize --config {input.cfg:q} --data {input.raw:q}"
        " --out {output:q} 2> {log:q}"
