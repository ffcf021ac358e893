# Inference: evaluation of the fine-tuned model (the task's metrics, samples/s,
# latency); with quantization.enabled auto or true, the fp32 model in
# OpenVINO, the static INT8 model (where quantization.enabled says so for
# this CPU), both measured beside eager fp32 with the accuracy and speed
# gates; and always deploy/, the fastest model that meets the gates.
# workflow/scripts/infer.


rule evaluate_fp32:
    input:
        cfg="results/{experiment}/{run}/config/evaluate.json",
        env="results/{experiment}/{run}/environment.json",
        model="results/{experiment}/{run}/model",
        data=run_tokens,
        raw=run_raw,
    output:
        "results/{experiment}/{run}/eval_fp32.json",
    log:
        "logs/evaluate_fp32/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    threads: machine_cores()
    shell:
        "python -m workflow.scripts.infer.evaluate --config {input.cfg:q} --environment {input.env:q}"
        " --model {input.model:q} --data {input.data:q} --raw {input.raw:q} --out {output:q} 2> {log:q}"


rule convert_openvino:
    input:
        cfg="results/{experiment}/{run}/config/convert.json",
        model="results/{experiment}/{run}/model",
        data=run_tokens,
    output:
        directory("results/{experiment}/{run}/model_openvino"),
    log:
        "logs/convert_openvino/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    threads: machine_cores()
    shell:
        "python -m workflow.scripts.infer.convert --config {input.cfg:q} --model {input.model:q}"
        " --data {input.data:q} --out {output:q} 2> {log:q}"


# The OpenVINO stack quantizes convert_openvino's fp32 IR (one conversion a run).
rule quantize_static:
    input:
        cfg="results/{experiment}/{run}/config/quantize.json",
        model="results/{experiment}/{run}/model",
        openvino="results/{experiment}/{run}/model_openvino",
        data=run_tokens,
    output:
        directory("results/{experiment}/{run}/model_int8"),
    log:
        "logs/quantize_static/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    threads: machine_cores()
    shell:
        "python -m workflow.scripts.infer.quantize --config {input.cfg:q} --model {input.model:q}"
        " --openvino {input.openvino:q} --data {input.data:q} --out {output:q} 2> {log:q}"


# Eager fp32, OpenVINO fp32 and OpenVINO int8 timed side by side in one job.
rule evaluate_runtimes:
    input:
        cfg="results/{experiment}/{run}/config/runtimes.json",
        env="results/{experiment}/{run}/environment.json",
        model="results/{experiment}/{run}/model",
        openvino="results/{experiment}/{run}/model_openvino",
        int8="results/{experiment}/{run}/model_int8",
        data=run_tokens,
        raw=run_raw,
        fp32="results/{experiment}/{run}/eval_fp32.json",
    output:
        "results/{experiment}/{run}/eval_runtimes.json",
    log:
        "logs/evaluate_runtimes/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    threads: machine_cores()
    shell:
        "python -m workflow.scripts.infer.runtimes --config {input.cfg:q} --environment {input.env:q}"
        " --model {input.model:q} --openvino {input.openvino:q} --int8 {input.int8:q} --data {input.data:q}"
        " --raw {input.raw:q} --fp32-metrics {input.fp32:q} --out {output:q} 2> {log:q}"


rule deploy_model:
    input:
        unpack(deploy_inputs),
        cfg="results/{experiment}/{run}/config/deploy.json",
        env="results/{experiment}/{run}/environment.json",
    output:
        directory("results/{experiment}/{run}/deploy"),
    log:
        "logs/deploy_model/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    params:
        folders=lambda wc, input: [
            a
            for name in ("model", "model_openvino", "model_int8")
            if name in input.keys()
            for a in (f"--{name.replace('_', '-')}", input[name])
        ],
    shell:
        "python -m workflow.scripts.infer.deploy --config {input.cfg:q} --environment {input.env:q}"
        " --evaluation {input.evaluation:q}"
        " {params.folders:q} --out {output:q} 2> {log:q}"


# deploy.push_to_hub: deploy/ uploaded from this node (a local rule on Slurm),
# whose Hub and token the config check asked before any training. A failed
# upload keeps deploy/ and names the command that uploads it later.
rule deploy_push:
    input:
        "results/{experiment}/{run}/deploy",
    output:
        "results/{experiment}/{run}/pushed.json",
    log:
        "logs/deploy_push/{experiment}/{run}.log",
    conda:
        "../../envs/cpuddp.yaml"
    params:
        repo=lambda wc: RUNS[wc.run]["deploy"]["push_to_hub"],
    shell:
        "python -m workflow.scripts.infer.push {input:q} {params.repo:q} --out {output:q} 2> {log:q}"
