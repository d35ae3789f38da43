"""The user function as a `script:` job (tests/test_script_jobs.py): `script: tests/userpkg/script_job.py`
with `args: [EPOCHS, STEP_SLEEP_S]`. trainer.api.init() gives it the Context (run folder from
$TRAINER_RUN_DIR), so a stop signal checkpoints at a step boundary and the requeued job resumes."""

import json
import sys

from tests.userpkg.tiny import TinyConfig, train
from trainer.api import init

if __name__ == "__main__":
    ctx = init(threads=1)
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    step_sleep_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    result = train(ctx, TinyConfig(epochs=epochs, step_sleep_s=step_sleep_s))
    if ctx.is_main:
        print(json.dumps({**result, "attempt_restarts": ctx.restarts}))
