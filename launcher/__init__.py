"""The submitter: cluster profiles, run folders, building a submission as data and sending it.

Nothing here imports torch at module level: `submit.py --help`, `--dry-run` and `status` stay fast.
"""
