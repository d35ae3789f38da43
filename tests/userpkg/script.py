"""The user function as a plain script: `torchrun --nproc_per_node=2 tests/userpkg/script.py RUN_DIR`.
trainer.api.init() gives it the same Context the submitter would."""

import json
import sys

from tests.userpkg.tiny import TinyConfig, train
from trainer.api import init

if __name__ == "__main__":
    ctx = init(run_dir=sys.argv[1], threads=1)
    result = train(ctx, TinyConfig(epochs=2))
    if ctx.is_main:
        print(json.dumps({**result, "world_size": ctx.world_size, "restarts": ctx.restarts}))
