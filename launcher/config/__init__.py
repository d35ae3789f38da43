"""Configuration: cluster profiles, resolving a profile and a job with `--set`, sweep expansion,
and the checks that need nothing but this machine."""
