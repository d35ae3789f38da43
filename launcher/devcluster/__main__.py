"""``python -m launcher.devcluster install|up --nodes N|status|down|env``."""

import sys

from launcher.devcluster.cli import main

sys.exit(main())
