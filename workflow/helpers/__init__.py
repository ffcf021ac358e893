"""Python helpers of the rule files (Snakefile, workflow/rules/*.smk) and of
nothing else: the experiment's runs and paths behind the input functions,
the lines printed before a run, the stage slices, the jobs' environment."""
