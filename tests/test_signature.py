"""A run's signature (launcher/request/signature.py; docs/signatures.md): what decides the result changes it,
what only says when or where does not. Read from the dry run (`--dry-run --json`), in this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.commands.main import main, submit_parser
from launcher.request.plan import Plan, new_run
from launcher.rundir.signature import LENGTH, of_run

JOB = """\
name: mine
entrypoint: mymodel:train
config:
  lr: 0.1
  width: 8
"""
CODE = "def train(ctx, config):\n    return {'lr': config['lr']}\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's project (a job file and its module) and no cluster: the dry runs are made here."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    (tmp_path / "mymodel.py").write_text(CODE)
    (tmp_path / "mine.yaml").write_text(JOB)
    return tmp_path


def shown(capsys: pytest.CaptureFixture[str], *args: str, job: str = "mine.yaml") -> dict[str, Any]:
    try:
        code = main(["--job", job, *args, "--dry-run", "--json"])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    assert code in (0, None), err
    assert not Path("runs").exists(), "a dry run made a run folder"
    return dict(json.loads(out.strip().splitlines()[-1]))


def signature(capsys: pytest.CaptureFixture[str], *args: str, job: str = "mine.yaml") -> str:
    value = shown(capsys, *args, job=job)["signature"]
    assert isinstance(value, str) and len(value) == LENGTH and int(value, 16) >= 0
    return value


def test_what_changes_the_result_changes_the_signature_and_nothing_else_does(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = signature(capsys)
    assert signature(capsys) == first  # the same inputs, the same signature (another run folder name)
    # When and where: a comment, the key order, the time limit, the runs folder, the checkpoint cadence, names.
    (project / "mine.yaml").write_text("# tried on Monday\n" + JOB.replace("  lr: 0.1\n  width: 8\n",
                                                                           "  width: 8   # wide enough\n  lr: 0.1\n"))
    for args in ([], ["--set", "profile.time=7"], ["--set", "profile.runs_dir=elsewhere"],
                 ["--set", "profile.checkpoint_every_steps=5"], ["--set", "job.name=renamed"],
                 ["--set", "job.log_every_steps=1"], ["--set", "profile.array_parallelism=2"]):
        assert signature(capsys, *args) == first, args
    # What: a config value, the world size, the code, the environment of the ranks, the seed.
    changed = {signature(capsys, *args) for args in (
        ["--set", "job.config.lr=0.2"], ["--set", "job.config.extra=1"], ["--set", "profile.tasks_per_node=3"],
        ["--set", "profile.cpus_per_task=2"], ["--set", "profile.env.OMP_NUM_THREADS=4"], ["--set", "job.seed=1"])}
    assert len(changed) == 6 and first not in changed
    (project / "mymodel.py").write_text("# a comment\n\n" + CODE.replace("}\n", "}  # the rate\n"))
    assert signature(capsys) == first  # a comment in the code is no change to it
    (project / "mymodel.py").write_text(CODE.replace("config['lr']", "config['lr'] * 2"))
    assert signature(capsys) not in changed | {first}


def test_a_sweep_point_is_the_run_it_would_be_alone_and_a_grown_grid_keeps_its_points(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A point's signature is the single run's with the same values (so a run already made counts for the
    sweep); the sweep's own is made of its points', in order; two more grid values leave the old points' alone."""
    alone = [signature(capsys, "--set", f"job.config.lr={lr}") for lr in (0.1, 0.2)]
    (project / "grid.yaml").write_text(JOB + "sweep:\n  grid:\n    config.lr: [0.1, 0.2]\n")
    small = shown(capsys, job="grid.yaml")
    assert small["task_signatures"] == alone and small["signature"] == of_run(alone, is_sweep=True)
    assert small["signature"] not in alone
    (project / "grid.yaml").write_text(JOB + "sweep:\n  grid:\n    config.lr: [0.1, 0.2, 0.4, 0.8]\n")
    grown = shown(capsys, job="grid.yaml")
    assert grown["task_signatures"][:2] == alone and len(set(grown["task_signatures"])) == 4
    assert grown["signature"] != small["signature"]


def test_the_built_in_recipe_has_one_too_and_its_job_keys_count(project: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    digits = signature(capsys, job="digits")
    assert signature(capsys, "--set", "job.lr=0.5", job="digits") != digits
    assert signature(capsys, "--set", "job.target_metric=test_loss", job="digits") == digits
    assert signature(capsys, job="digits") != signature(capsys)


def recorded(*sets: str) -> Path:
    """A run folder with the records a submission of `mine.yaml` writes before it queues (the plan's own
    `prepare`), never queued: what `list` and `diff` read."""
    args = submit_parser().parse_args(["--job", "mine.yaml", *[w for s in sets for w in ("--set", s)]])
    checked = new_run(args)
    plan = Plan(checked.submission(), checked.source, ["--job", "mine.yaml"])
    plan.prepare()
    return plan.sub.run_dir


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return int(code or 0), out, err


def test_list_finds_the_runs_with_a_signature_and_diff_says_why_two_runs_are_two(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, later, other = recorded(), recorded("profile.time=7"), recorded("job.config.lr=0.2")
    code, out, _ = cli(capsys, "list", "--json", "--same-as", str(first))
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and sorted(r["run_dir"] for r in rows) == sorted([str(first), str(later)])
    assert {r["signature"] for r in rows} == {json.loads((first / "run.json").read_text())["signature"]}
    theirs = json.loads((other / "run.json").read_text())["signature"]
    code, out, _ = cli(capsys, "list", "--json", "--signature", theirs)
    assert code == 0 and [json.loads(line)["run_dir"] for line in out.splitlines()] == [str(other)]
    code, out, err = cli(capsys, "list", "--signature", "3F;rm")
    assert code == 2 and out == "" and err.splitlines() == [
        "error: --signature '3F;rm': expected a signature as status shows it (lowercase hex digits, e.g. "
        "3f0c9a1e6b2d4c57)"]

    code, out, _ = cli(capsys, "diff", str(first), str(other), "--json")
    shown = json.loads(out)
    assert code == 0 and shown["same_signature"] is False and shown["signature_b"] == theirs
    assert shown["differences"] == [{"key": "job.config.lr", "a": 0.1, "b": 0.2, "in_signature": True}]
    code, out, _ = cli(capsys, "diff", str(first), str(later))
    lines = out.splitlines()
    assert code == 0 and lines[0].endswith(": the same signature")
    assert lines[1:] == ["not in the signature (the same result either way):", "  profile.time: 60 -> 7"]
    (project / "mymodel.py").write_text(CODE.replace("config['lr']", "-config['lr']"))
    code, out, _ = cli(capsys, "diff", str(first), str(recorded("job.config.lr=0.2", "profile.time=7")))
    lines = out.splitlines()
    assert lines[1] == "in the signature (why they are two runs):" and lines[2] == "  job.config.lr: 0.1 -> 0.2"
    assert lines[3].startswith("  code: ") and lines[4:] == ["not in the signature (the same result either way):",
                                                              "  profile.time: 60 -> 7"]
