"""`python -m launcher ...`: the same command line as `submit.py` and `ddp-submit`.

It exists so that the command line runs wherever the package is importable, with no `submit.py`
beside it (an installed wheel): `launcher.client` starts it as `python -m launcher` with the
caller's own interpreter.
"""

import sys

if __name__ == "__main__":
    # Usage lines name the program as it was started (launcher.commands.console), not "__main__.py".
    sys.argv[0] = "python -m launcher"
    from launcher.commands.main import main

    sys.exit(main())
