"""A submission's places on the cluster side over SSH: the profile, the jobs and the folders as they
are there (docs/remote.md), so that the laptop plans the submission once, as it will be queued there.

remote_dir holds the code and your project, each in its content-addressed folder
(launcher.remote.folders): `projects/<hash>` stands in for your checkout, exactly as your checkout
does on a login node (the project root; the job file's folder and the directory you submitted from
are their places in it). The profile runs there without `login` (the cluster side queues it
itself), its runs and data under remote_dir, SLURM_CONF from the login environment and its Python
named as the cluster side runs it. Paths there are kept as written: they mean nothing here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from launcher.config.profile import Profile
from launcher.config.resolve import Point, point
from launcher.remote import folders
from trainer.config import project
from trainer.config.job import JobConfig


def interpreter(profile: Profile) -> str:
    """The cluster side's Python: the profile's `python` there, else python3 on the login PATH."""
    return profile.python or "python3"


@dataclass(frozen=True)
class ClusterSide:
    """remote_dir there (absolute once the preflight found it; as the profile writes it where nothing
    connects, a dry run), the content addresses of the tool's code and of your project ("": none),
    and your project's root here."""

    root: str
    code: str
    project: str = ""
    laptop_root: str = ""

    @property
    def code_dir(self) -> str:
        return folders.code_dir(self.root, self.code)

    @property
    def project_dir(self) -> str:
        return folders.project_dir(self.root, self.project) if self.project else ""

    def run_dir(self, name: str) -> Path:
        return Path(folders.run_dir(self.root, name))

    def profile(self, profile: Profile) -> Profile:
        """The profile as the cluster side runs it."""
        return dataclasses.replace(profile, login="", runs_dir=folders.runs_dir(self.root),
                                   data_dir=folders.data_dir(self.root), slurm_conf="", python=interpreter(profile))

    def moved(self, path: str) -> str | None:
        """A path of your project here at its place in the synced copy there (None: outside it)."""
        if not self.project:
            return None
        where, root = Path(path).resolve(), Path(self.laptop_root)
        if not project.inside(where, root):
            return None
        rel = where.relative_to(root)
        return self.project_dir if rel == Path(".") else f"{self.project_dir}/{rel}"

    def job(self, job: JobConfig) -> JobConfig:
        """The job as the cluster side reads it: the project root, the job file's folder and the
        script (made absolute by the check here) at their places in the synced project; a job file's
        folder outside the project does not travel (the synced project root stands for it)."""
        if not self.project:
            return job
        script = (job.script and self.moved(job.script)) or job.script
        return dataclasses.replace(job, project_root=self.project_dir, script=script,
                                   code_dir=(job.code_dir and self.moved(job.code_dir)) or self.project_dir)

    def points(self, profile: Profile, points: list[Point]) -> list[Point]:
        """Each point with its job there, its data folder and trackers as `profile` (as it runs there) decides."""
        return [point(profile, p.task, self.job(p.job), p.overrides, p.source, here=False) for p in points]

    def submit_dir(self, here: Path) -> Path:
        """Where the ranks start there: the synced copy of the directory you submitted from, inside
        the project; else remote_dir."""
        return Path((self.moved(str(here)) if self.project else None) or self.root)
