# Inference: evaluation of the fine-tuned model (the task's metrics, samples/s,
# latency) and the optional static INT8 quantization (quantization.enabled):
# the artifact is verified by reloading it, and its evaluation holds int8 to
# fp32 (quantization.max_accuracy_drop). workflow/scripts/infer.


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
    conda:
        "../../envs/cpuddp.yaml"
    threads: machine_cores()
    shell:
        "python -m workflow.scripts.infer.evaluate --config {input.cfg} --environment {input.env}"
        " --model {input.model} --data {input.data} --raw {input.raw} --out {output} 2> {log}"


rule quantize_static:
    input:
        cfg="results/{experiment}/{run}/config/quantize.json",
        model="results/{experiment}/{run}/model",
        data="results/{experiment}/data/tokenized",
    output:
        directory("results/{experiment}/{run}/model_int8"),
    log:
        "logs/quantize_static/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    threads: machine_cores()
    shell:
        "python -m workflow.scripts.infer.quantize --config {input.cfg} --model {input.model}"
        " --data {input.data} --out {output} 2> {log}"


rule evaluate_int8:
    input:
        cfg="results/{experiment}/{run}/config/evaluate.json",
        env="results/{experiment}/{run}/environment.json",
        model="results/{experiment}/{run}/model_int8",
        data="results/{experiment}/data/tokenized",
        raw="results/{experiment}/data/raw",
        fp32="results/{experiment}/{run}/eval_fp32.json",
    output:
        "results/{experiment}/{run}/eval_int8.json",
    log:
        "logs/evaluate_int8/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    threads: machine_cores()
    params:
        max_drop=lambda wc: RUNS[wc.run]["quantization"]["max_accuracy_drop"],
    shell:
        "python -m workflow.scripts.infer.evaluate --int8 --config {input.cfg} --environment {input.env}"
        " --model {input.model} --data {input.data} --raw {input.raw} --fp32-metrics {input.fp32}"
        " --max-accuracy-drop {params.max_drop} --out {output} 2> {log}"
