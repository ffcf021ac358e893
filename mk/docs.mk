# The documentation site: docs/*.md with mkdocs.yml, Material theme; --strict
# turns every warning (a broken link, a page missing from the nav) into a failure.
# docs/configuration.md's reference tables are generated from
# workflow/schemas/config.schema.yaml by docs/hooks/config_reference.py.
#   make docs     builds site/ (not committed)

.PHONY: docs

docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site
