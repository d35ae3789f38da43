"""Errors from the user's own code (issue 19): a module that fails to import, a config dataclass
that refuses its values, a function with a flexible signature. Submitted with --dry-run as a user
would: each bad case is one `error:` line naming the job file and the module or key, followed by the
user's own traceback frames only (none of the submitter's), exit 2, nothing queued."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_submit

JOB = 'entrypoint: "mypkg.train:main"\ntarget_metric: answer\n'
CONFIG_JOB = JOB + "config:\n  lr: -1.0\n"

BAD_MODULES = {
    "raises": ("import os\nraise RuntimeError('boom at import')\ndef main(ctx):\n    pass\n",
               "RuntimeError: boom at import"),
    "syntax": ("def main(ctx):\n    return (\n", "SyntaxError"),
    "missing-package": ("import wandbx\ndef main(ctx):\n    pass\n",
                        "ModuleNotFoundError: No module named 'wandbx'"),
    "sys-exit": ("import sys\nsys.exit(3)\ndef main(ctx):\n    pass\n", "module 'mypkg.train' called sys.exit(3)"),
}


def write_package(tmp_path: Path, train: str, job: str = JOB) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "train.py").write_text(train)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "mine.yaml").write_text(job)


def submit(tmp_path: Path):  # type: ignore[no-untyped-def]
    return run_submit(["--profile", "debug", "--job", "jobs/mine.yaml", "--dry-run"], cwd=tmp_path, timeout=120)


def assert_users_error(proc, tmp_path: Path, *needles: str) -> str:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: jobs/mine.yaml: key "), errors[0]
    for needle in needles:
        assert needle in errors[0], errors[0]
    assert "launcher/" not in proc.stderr and "trainer/" not in proc.stderr, proc.stderr
    assert "importlib" not in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()
    return errors[0]


@pytest.mark.parametrize("case", sorted(BAD_MODULES))
def test_module_failing_at_import_is_one_error_line_with_the_users_frames(tmp_path: Path, case: str) -> None:
    source, cause = BAD_MODULES[case]
    write_package(tmp_path, source)
    proc = submit(tmp_path)
    line = assert_users_error(proc, tmp_path, "'entrypoint'", "'mypkg.train:main'", cause)
    if case != "sys-exit":
        assert "importing module 'mypkg.train' failed" in line
        assert "train.py" in proc.stderr.split(line, 1)[1], proc.stderr  # the user's frame, after the line
    if case == "syntax":
        assert "line 2" in proc.stderr or "line 3" in proc.stderr, proc.stderr


def test_entrypoint_module_itself_missing_still_says_where_it_looked(tmp_path: Path) -> None:
    write_package(tmp_path, "def main(ctx):\n    pass\n", JOB.replace("mypkg.train", "mypkg.trian"))
    line = assert_users_error(submit(tmp_path), tmp_path, "no module named 'mypkg.trian' (looked in")
    assert "importing" not in line


def test_config_dataclass_refusing_its_values_is_one_error_line(tmp_path: Path) -> None:
    write_package(tmp_path, "from dataclasses import dataclass\n\n@dataclass\nclass TinyConfig:\n"
                            "    lr: float = 0.1\n\n    def __post_init__(self):\n        if self.lr <= 0:\n"
                            "            raise ValueError('lr must be > 0')\n\n"
                            "def main(ctx, config: TinyConfig):\n    pass\n", CONFIG_JOB)
    proc = submit(tmp_path)
    assert_users_error(proc, tmp_path, "key 'config' has invalid value", "TinyConfig rejected it",
                       "ValueError: lr must be > 0")
    assert "train.py" in proc.stderr


@pytest.mark.parametrize("signature", ["*args, **kwargs", "ctx, *rest", "ctx, config=None, **extra"])
def test_flexible_signatures_are_accepted(tmp_path: Path, signature: str) -> None:
    write_package(tmp_path, f"def main({signature}):\n    pass\n")
    proc = submit(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "runs").exists()


def test_incompatible_signature_is_still_refused(tmp_path: Path) -> None:
    write_package(tmp_path, "def main(ctx, config, extra):\n    pass\n")
    assert_users_error(submit(tmp_path), tmp_path, "the function must take (ctx) or (ctx, config), its "
                                                   "signature is (ctx, config, extra)")
