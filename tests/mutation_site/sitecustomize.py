"""Loaded by every interpreter tests/mutation.py starts (its PYTHONPATH names this folder), so also by the
command lines, submitters and ranks that a test starts in a subprocess.

While mutmut learns which tests reach which function ("stats"), a mutated module records each call in the
test process's own mutmut state; a subprocess has none, and its first mutated call fails looking for a
mutmut configuration. What a subprocess calls is not a test's reach anyway (mutmut traces only the test
process), so there it runs the unmutated code. Tests that ask the command line in a subprocess (the Python
client's handles: tests/test_client_handles.py) can then be in the selection.
"""

import os

if os.environ.get("MUTANT_UNDER_TEST") == "stats":
    os.environ["MUTANT_UNDER_TEST"] = ""
