"""The command line: parsing and dispatch (`main`), console output and exit codes (`console`), one
module per command family (`submit`, `resume`, `operate`, `waiting`, `probe`). Only `submit.py`
imports this wing."""
