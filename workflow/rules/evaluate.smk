# Evaluation of the fine-tuned model: the task's metrics and samples/s.


rule evaluate_fp32:
    input:
        cfg="results/{experiment}/{run}/config/evaluate.json",
        env="results/{experiment}/{run}/environment.json",
        model="results/{experiment}/{run}/model",
        data="results/{experiment}/data/tokenized",
        raw="results/{experiment}/data/raw",
    output:
        "results/{experiment}/{run}/eval_fp32.json",
    log:
        "logs/evaluate_fp32/{experiment}/{run}.log",
    threads: workflow.cores
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.infer.evaluate --config {input.cfg} --environment {input.env}"
        " --model {input.model} --data {input.data} --raw {input.raw} --out {output} 2> {log}"
