"""The configuration: the schema and the views built from it, validation,
sweeps and recipes, profiles and hostfiles, the step's levers."""
