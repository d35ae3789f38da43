"""A submission as JSON, and back: what a submission over SSH ships to the cluster side, which
queues exactly that object (docs/remote.md).

The laptop plans the submission once, with the cluster side's folders (launcher.remote.cluster_side);
`dumps` writes its dataclasses as they are. `loads` rebuilds them with the same typed reader that
reads profiles and jobs (trainer.config.schema), so every field is checked again where it enters
there (a profile's and a job's own checks included), and a file that does not fit is one error line
naming it and the key. What only the machine that listed them can use is not sent: the snapshot
listing's file stamps (inodes and times of the laptop's files). A function handed over from Python by
value travels inside it (`function`: the pickle's bytes as base64 text), so the cluster side checks it
and writes it into the run folder as a local submission does (launcher.commands.receive).
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, replace
from typing import Any

from launcher.request.submission import Submission
from trainer.config.schema import ConfigError, build


def dumps(sub: Submission, argv: list[str], source: str) -> str:
    """`sub` as JSON, with the command line that made it (recorded in run.json) and the profile file it came from."""
    sent = replace(sub, project=replace(sub.project, stats={}, stat_at=0.0)) if sub.project is not None else sub
    return json.dumps({"submission": asdict(sent), "argv": list(argv), "source": source}, default=_text)


def loads(text: str, where: str) -> tuple[Submission, list[str], str]:
    """The submission, command line and profile source `dumps` wrote (read from `where`, as errors name it)."""
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ConfigError(f"{where}: not a submission that can be read ({type(err).__name__}: {err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("argv"), list) or not isinstance(data.get("source"), str):
        raise ConfigError(f"{where}: expected a JSON object with the keys submission, argv and source")
    sub = build(Submission, data.get("submission"), where, "submission.")
    return sub, [str(word) for word in data["argv"]], data["source"]


def _text(value: Any) -> str:
    """A value JSON has no type for: bytes as base64 (the typed reader takes them back), the rest as text (paths)."""
    return base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else str(value)
