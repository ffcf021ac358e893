# Optional static INT8 quantization (quantization.enabled) and its
# evaluation: the artifact is verified by reloading it, the evaluation holds
# int8 to fp32 (quantization.max_accuracy_drop). docs/quantization.md.


rule config_quantize:
    output:
        "results/{experiment}/{run}/config/quantize.json",
    # What quantize_static depends on: not `enabled`, not the accuracy gate
    # (changing max_accuracy_drop reruns evaluate_int8 only).
    params:
        content=lambda wc: json.dumps(
            {
                "task": RUNS[wc.run]["task"],
                "quantization": {
                    k: v
                    for k, v in RUNS[wc.run]["quantization"].items()
                    if k not in ("enabled", "max_accuracy_drop")
                },
            },
            sort_keys=True,
        ),
    log:
        "logs/config_quantize/{experiment}/{run}.log",
    run:
        with open(output[0], "w") as handle:
            print(params.content, file=handle)


rule quantize_static:
    input:
        cfg="results/{experiment}/{run}/config/quantize.json",
        model="results/{experiment}/{run}/model",
        data="results/{experiment}/data/tokenized",
    output:
        directory("results/{experiment}/{run}/model_int8"),
    log:
        "logs/quantize_static/{experiment}/{run}.log",
    threads: workflow.cores
    conda:
        "../../envs/cpuddp.yaml"
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
    params:
        max_drop=lambda wc: RUNS[wc.run]["quantization"]["max_accuracy_drop"],
    log:
        "logs/evaluate_int8/{experiment}/{run}.log",
    threads: workflow.cores
    conda:
        "../../envs/cpuddp.yaml"
    shell:
        "python -m workflow.scripts.infer.evaluate --int8 --config {input.cfg} --environment {input.env}"
        " --model {input.model} --data {input.data} --raw {input.raw} --fp32-metrics {input.fp32}"
        " --max-accuracy-drop {params.max_drop} --out {output} 2> {log}"
