"""Configuration as users write it, torch-free: `yamlio` (the one YAML reader), `schema` (mappings into
validated dataclasses), `values` (the rule for values that reach a process or a path), `lookup` (where
names are found), `filepaths` (the relative-path rule), `files` (jobs and profiles as file kinds, with
`extends:`), `overrides` (`--set`), `sweep` (expansion into points), `tracker_key` (the `tracker:` key),
`project` (where your code is found) and `job` (`JobConfig`)."""
