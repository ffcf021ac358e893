# The documentation site: docs/*.md with mkdocs.yml, Material theme; --strict
# turns every warning (a broken link, a page missing from the nav) into a failure.
# First, every `snakemake` command in README.md and docs/ must dry-run, with the
# hostfile and files the pages say it needs (mk/doc_commands.py, about a minute).
# docs/configuration.md's reference tables are generated from
# workflow/schemas/config.schema.yaml by docs/hooks/config_reference.py and
# checked in (tests/unit/test_docs_pages.py fails when they are not current).
#   make config-reference   rewrites them (after a schema change)
#   make docs               the same, then builds site/ (not committed)

.PHONY: docs config-reference

config-reference: venv
	$(BIN)/python docs/hooks/config_reference.py

docs: venv config-reference
	$(BIN)/python mk/doc_commands.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site
