"""The cluster side of a submission over SSH (launcher.commands.remote; docs/remote.md), run there
by `python3 -c` from the synced code: `PYTHONPATH=REMOTE_DIR/code/<hash>`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.rundir import snapshot


def main(argv: list[str]) -> int:
    """The cluster side of a submission (run there from the synced code): write the shipped profile
    and job, keep the run folder name the laptop chose (its record already names it), and make the
    run's code snapshot a copy of the synced tree as it is (whatever the laptop's snapshot held),
    then the tool's own command line. A job of your own comes with its project synced to
    REMOTE_DIR/projects/<hash>: that folder stands in for your checkout, as on a login node (the
    check imports from it, the run's RUN/project is copied from it, and the ranks start in its copy
    of the folder you submitted from)."""
    import os
    import shutil

    import yaml

    from launcher.commands.main import main as tool
    from launcher.rundir import layout, links, snapshot

    spec_file = Path(argv[0]).resolve()
    spec = json.loads(spec_file.read_text())
    folder = spec_file.with_suffix("")
    folder.mkdir(exist_ok=True)
    for key in ("profile", "job"):
        (folder / f"{key}.yaml").write_text(yaml.safe_dump(spec[key]))
    synced = Path(spec["code"])
    shipped = spec.get("project") or {}
    ensure = snapshot.ensure

    # snapshot.ensure's signature: the tool's code is the synced tree whole; the project (surveyed
    # here, in the synced project) is copied as on a login node.
    def copy_synced(run_dir: Path, project: snapshot.Survey | None = None, submit_dir: Path | None = None,
                    code_root: Path = synced) -> Path:
        target = snapshot.snapshot_dir(run_dir)
        if not (target / snapshot.NOTE_FILE).is_file():
            note = {**spec["note"], "synced_to": str(code_root)}
            manifest: bytes | None = None
            if project is not None:
                ensure(run_dir, project, submit_dir, code_root)  # RUN/project, and its part of the note
                note["project"] = {**(snapshot.read_note(run_dir) or {}).get("project", {}),
                                   "laptop_root": shipped.get("laptop_root"),
                                   "laptop_submit_dir": shipped.get("laptop_submit_dir")}
                kept = target / links.MANIFEST.format("project")  # what the next run may link to
                manifest = kept.read_bytes() if kept.is_file() else None
                shutil.rmtree(target)
            partial = target.with_name(f".{snapshot.SNAPSHOT_DIR}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            # (Not the caches the cluster side's Python writes there, as a login node's snapshot leaves them.)
            shutil.copytree(code_root, partial, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
            if project is not None and manifest is not None:
                (partial / links.MANIFEST.format("project")).write_bytes(manifest)
            (partial / snapshot.NOTE_FILE).write_text(json.dumps(note, indent=1) + "\n")
            partial.replace(target)
        return target

    layout.new_run_dir = lambda *_: Path(spec["run_dir"])  # type: ignore[assignment]
    snapshot.ensure = copy_synced  # type: ignore[assignment]
    function = []
    if spec.get("function"):  # a function handed over from Python by value, as the laptop's API sent it
        import base64

        (folder / "function.pkl").write_bytes(base64.b64decode(spec["function"]))
        function = ["--function", str(folder / "function.pkl")]
    if shipped.get("submit_dir"):  # submitted from inside the project: its place in the synced copy
        os.chdir(shipped["submit_dir"])
    return tool(["--profile", str(folder / "profile.yaml"), "--job", str(folder / "job.yaml"), *function, *argv[1:]])
