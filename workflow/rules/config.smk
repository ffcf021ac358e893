# Per-stage configuration files: the slice each stage depends on
# (workflow/helpers/stages.py), rewritten only when it changes.


rule config_stage:
    output:
        "results/{experiment}/{scope}config/{stage}.json",
    log:
        "logs/config_stage/{experiment}/{scope}{stage}.log",
    params:
        content=stage_content,
    run:
        write_stage_config(output[0], params.content, log[0])
