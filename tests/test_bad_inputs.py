"""Bad input gets one clear line naming the problem, exit status 2, no traceback, nothing submitted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_submit


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


# (id, files to write {relative name: text}, arguments, substrings the error must contain)
CASES = [
    ("unknown profile name", {}, ["--profile", "nope"], ["profile 'nope' not found", "local", "slurm-gpu"]),
    ("unknown job name", {}, ["--job", "nope"], ["job 'nope' not found", "digits"]),
    ("unknown key in profile file", {"p.yaml": "executor: local\ntask_per_node: 2\n"}, ["--profile", "{p.yaml}"],
     ["unknown key 'task_per_node'", "did you mean 'tasks_per_node'", "valid keys:", "p.yaml"]),
    ("unknown key in job file", {"j.yaml": "extends: digits\nepoch: 3\n"}, ["--job", "{j.yaml}"],
     ["unknown key 'epoch'", "epochs", "j.yaml"]),
    ("wrong type in job file", {"j.yaml": "extends: digits\nepochs: ten\n"}, ["--job", "{j.yaml}"],
     ["'epochs'", "'ten'", "an integer"]),
    ("float where int expected", {}, ["--set", "job.epochs=2.5"], ["'epochs'", "2.5", "an integer"]),
    ("negative epochs", {}, ["--set", "job.epochs=-1"], ["'epochs'", "-1", "> 0"]),
    ("zero tasks", {}, ["--set", "profile.tasks_per_node=0"], ["'tasks_per_node'", "0", "> 0"]),
    ("zero cpus", {}, ["--set", "profile.cpus_per_task=0"], ["'cpus_per_task'", "> 0"]),
    ("zero time limit", {}, ["--set", "profile.time_min=0"], ["'time_min'", "> 0"]),
    ("zero learning rate", {}, ["--set", "job.lr=0"], ["'lr'", "> 0"]),
    ("momentum out of range", {}, ["--set", "job.momentum=1.5"], ["'momentum'", "1.5", "[0, 1)"]),
    ("bool where int expected", {}, ["--set", "job.batch_size_per_rank=true"], ["'batch_size_per_rank'", "True"]),
    ("unknown optimizer", {}, ["--set", "job.optimizer=adam"], ["'optimizer'", "'adam'", "'sgd'", "'adamw'"]),
    ("unknown executor", {}, ["--set", "profile.executor=kubernetes"], ["'executor'", "'kubernetes'", "'slurm'"]),
    ("invalid signal", {}, ["--set", "profile.signal=KILL"], ["'signal'", "'KILL'", "'USR2'"]),
    ("model does not fit dataset", {}, ["--set", "job.model=lenet"], ["'model'", "'lenet'", "'mlp'"]),
    ("malformed YAML", {"p.yaml": "executor: local\n  tasks_per_node: [2\n"}, ["--profile", "{p.yaml}"],
     ["malformed YAML", "line", "p.yaml"]),
    ("YAML that is not a mapping", {"j.yaml": "- epochs: 3\n"}, ["--job", "{j.yaml}"],
     ["expected a mapping", "list"]),
    ("--set without '='", {}, ["--set", "job.epochs"], ["--set job.epochs", "KEY=VALUE"]),
    ("--set with an unknown scope", {}, ["--set", "model.lr=0.1"], ["'model' is not a scope", "job, profile"]),
    ("--set an unknown job key", {}, ["--set", "job.epochz=3"], ["unknown key 'job.epochz'", "epochs"]),
    ("--set an unknown profile key", {}, ["--set", "profile.gpus=2"], ["unknown key 'profile.gpus'", "gpus_per_node"]),
    ("--set a list where a scalar is expected", {}, ["--set", "job.epochs=[1,2]"], ["single scalar"]),
    ("--set malformed YAML value", {}, ["--set", "job.lr=[0.1"], ["not a valid YAML scalar"]),
    ("GPUs on a CPU-only machine", {}, ["--set", "profile.gpus_per_node=2", "--set", "profile.tasks_per_node=2"],
     ["gpus_per_node", "no NVIDIA GPU"]),
    ("GPU profile with tasks != GPUs", {}, ["--set", "profile.gpus_per_node=1"], ["one task per GPU"]),
    ("missing data dir", {}, ["--job", "cifar10", "--set", "job.data_dir={missing}"],
     ["job.data_dir", "missing/cifar", "does not exist"]),
    ("no data and download off", {"empty/.keep": ""},
     ["--job", "cifar10", "--set", "job.download=false", "--set", "profile.data_dir={empty}"],
     ["cifar-10-batches-py", "download"]),
    ("local executor with 2 nodes", {}, ["--set", "profile.nodes=2"], ["'nodes'", "1 for the local executor"]),
    ("debug executor with 2 tasks", {}, ["--profile", "debug", "--set", "profile.tasks_per_node=2"],
     ["'tasks_per_node'", "debug"]),
    ("invalid env variable name", {"p.yaml": "extends: local\nenv: {'BAD-NAME': x}\n"}, ["--profile", "{p.yaml}"],
     ["env.BAD-NAME", "shell variable name"]),
    ("extends cycle", {"a.yaml": "extends: b.yaml\n", "b.yaml": "extends: a.yaml\n"}, ["--profile", "{a.yaml}"],
     ["cycle"]),
    ("extends a missing parent", {"a.yaml": "extends: no-such-profile\n"}, ["--profile", "{a.yaml}"],
     ["profile 'no-such-profile' not found"]),
    ("signal delay longer than the time limit", {}, ["--set", "profile.time_min=1", "--set",
                                                     "profile.signal_delay_s=90"], ["'signal_delay_s'", "90"]),
    ("bad fail_at format", {}, ["--set", "job.fail_at=soon"], ["'fail_at'", "STEP:RANK"]),
    ("--after on a local profile", {}, ["--after", "runs/x"], ["--after", "slurm profile"]),
    ("unknown command-line option", {}, ["--frobnicate"], ["unrecognized arguments: --frobnicate"]),
    ("sweep with an unknown key", {"s.yaml": "extends: digits\nsweep: {grid: {lrr: [0.1, 0.2]}}\n"},
     ["--job", "{s.yaml}"], ["unknown key 'sweep.grid.lrr'", "lr"]),
]


@pytest.mark.parametrize("files,args,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path: Path, files: dict[str, str], args: list[str],
                                                expected: list[str]) -> None:
    paths = {name: write(tmp_path / name, text) for name, text in files.items()}
    paths["empty"] = str(tmp_path / "empty")
    paths["missing"] = str(tmp_path / "missing" / "cifar")  # not a fixed path that something may create
    for name, path in paths.items():
        args = [a.replace("{" + name + "}", path) for a in args]
    proc = run_submit(args, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr + proc.stdout
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    assert not (tmp_path / "runs").exists(), "a run folder was created for bad input"


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 25
