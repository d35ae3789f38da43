"""The cluster side of a submission over SSH (launcher.commands.remote; docs/remote.md), run there
by `python3 -c` from the synced code: `PYTHONPATH=REMOTE_DIR/code/<hash>`."""

from __future__ import annotations

import json
from pathlib import Path


def main(argv: list[str]) -> int:
    """The cluster side of a submission (run there from the synced code): write the shipped profile
    and job, keep the run folder name the laptop chose (its record already names it), and make the
    run's code snapshot a copy of the synced tree as it is (whatever the laptop's snapshot held),
    then the tool's own command line."""
    import shutil

    import yaml

    from launcher.commands.main import main as tool
    from launcher.rundir import layout, snapshot

    spec_file = Path(argv[0])
    spec = json.loads(spec_file.read_text())
    folder = spec_file.with_suffix("")
    folder.mkdir(exist_ok=True)
    for key in ("profile", "job"):
        (folder / f"{key}.yaml").write_text(yaml.safe_dump(spec[key]))
    synced = Path(spec["code"])

    # snapshot.ensure's signature; the project and the submit directory are the laptop's, so only the
    # synced tool code is copied (a user's own project does not travel yet: docs/remote.md).
    def copy_synced(run_dir: Path, project: object = None, submit_dir: object = None,
                    code_root: Path = synced) -> Path:
        target = snapshot.snapshot_dir(run_dir)
        if not (target / snapshot.NOTE_FILE).is_file():
            partial = target.with_name(f".{snapshot.SNAPSHOT_DIR}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(code_root, partial, symlinks=True)
            (partial / snapshot.NOTE_FILE).write_text(json.dumps({**spec["note"], "synced_to": str(code_root)},
                                                                 indent=1) + "\n")
            partial.replace(target)
        return target

    layout.new_run_dir = lambda *_: Path(spec["run_dir"])  # type: ignore[assignment]
    snapshot.ensure = copy_synced  # type: ignore[assignment]
    return tool(["--profile", str(folder / "profile.yaml"), "--job", str(folder / "job.yaml"), *argv[1:]])
