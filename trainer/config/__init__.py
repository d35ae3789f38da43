"""Configuration as users write it, torch-free: YAML, the schema, file lookup, relative paths, the job."""
