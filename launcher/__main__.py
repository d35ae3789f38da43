"""`python -m launcher ...`: the same command line as `submit.py` and `ddp-submit`.

It exists so that the command line runs wherever the package is importable, with no `submit.py`
beside it (an installed wheel): `launcher.client` starts it as `python -m launcher` with the
caller's own interpreter.
"""

import sys

from launcher.commands.main import main

if __name__ == "__main__":
    sys.exit(main())
