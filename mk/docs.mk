# The documentation site: docs/*.md with mkdocs.yml, Material theme; --strict
# turns every warning (a broken link, a page missing from the nav) into a failure.
# First, every `snakemake` command in README.md and docs/ must dry-run, with the
# hostfile and files the pages say it needs (mk/doc_commands.py, about a minute).
# docs/configuration.md's reference tables are generated from
# workflow/schemas/config.schema.yaml by docs/hooks/config_reference.py.
#   make docs     builds site/ (not committed)

.PHONY: docs

docs: venv
	$(BIN)/python mk/doc_commands.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site
