#!/usr/bin/env python3
"""Submit a training job: `python submit.py [--profile local] [--job digits] [--set KEY=VALUE ...]`.

See `python submit.py --help`. This file only hands over to the launcher's command line.
"""

import sys

from launcher.commands.main import main

if __name__ == "__main__":
    sys.exit(main())
