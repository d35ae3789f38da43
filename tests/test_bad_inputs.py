"""Bad input gets one clear line naming the problem, exit status 2, no traceback, nothing submitted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, run_submit

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
    ("zero time limit", {}, ["--set", "profile.time=0"], ["'time'", "> 0"]),
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


LONG = "x" * 300
BOMB = ("extends: digits\na: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
        + "extra: {k: v}\n")
SWEEP = "extends: digits\nsweep:\n"

# sbatch_extra options that contradict what the profile models (`--set profile.sbatch_extra.OPTION`, an
# abbreviation sbatch would read as one of them, or a key written as an option): the error names the key
# (sbatch_extra.NAME) and says this.
SBATCH_EXTRA_REFUSED = {
    "nodes=3": "--nodes would change nodes", "ntasks=8": "nodes x tasks_per_node",
    "ntasks-per-node=4": "tasks_per_node", "cpus-per-task=2": "set cpus_per_task instead",
    "gpus=8": "gpus_per_node", "gres=gpu:4": "gpus_per_node", "time=5": "set time instead", "array=0-9": "sweep",
    "output=/tmp/x.out": "logs", "error=/tmp/x.err": "logs", "job-name=x": "job.name",
    "mem=1G": "set mem_per_task instead", "partition=gpu": "set partition instead", "dependency=afterok:1": "--after",
    "node=3": "nodes", "tim=3": "set time instead", "no-requeue=x": "requeue", "--nodes=3": "long option name",
}


# Job keys given a number that is not finite (or one that overflows to inf), and the value as the error shows it.
NON_FINITE = [("lr", ".inf", "inf"), ("lr", "-.inf", "-inf"), ("lr", ".nan", "nan"), ("lr", "1e999", "inf"),
              ("weight_decay", ".inf", "inf"), ("momentum", ".NaN", "nan"), ("label_smoothing", ".nan", "nan"),
              ("warmup_fraction", "-.inf", "-inf"), ("stop_at_accuracy", ".nan", "nan")]
# Families the first corpus did not cover (issue 12): numbers, collisions, names and paths, sweeps,
# local setup/env, sbatch_extra. Same shape as CASES.
MORE_CASES = [
    # -- numbers that are not usable: non-finite floats --
    *[(f"{key} {value}", {}, ["--set", f"job.{key}={value}"],
       [f"key '{key}' has invalid value {shown}; expected a finite number"]) for key, value, shown in NON_FINITE],
    ("memory .inf", {}, ["--set", "profile.mem_per_task_gb=.inf"], ["--set: key 'profile.mem_per_task_gb'",
                                                                    "a finite number"]),
    ("memory .nan on SLURM", {}, ["--profile", "dev-cluster", "--set", "profile.mem_per_task_gb=.nan"],
     ["--set: key 'profile.mem_per_task_gb'", "nan", "a finite number"]),
    ("memory beyond SLURM", {}, ["--set", "profile.mem_per_task_gb=1e12"], ["'profile.mem_per_task_gb'", "at most"]),
    ("lr .inf in a job file", {"j.yaml": "extends: digits\nlr: .inf\n"}, ["--job", "{j.yaml}"],
     ["j.yaml", "'lr'", "a finite number"]),
    ("memory .nan in a profile file", {"p.yaml": "extends: local\nmem_per_task_gb: .nan\n"},
     ["--profile", "{p.yaml}"], ["p.yaml: key 'mem_per_task_gb' has invalid value nan", "a finite number"]),
    ("sweep grid point .inf", {"s.yaml": SWEEP + "  grid: {lr: [0.1, .inf]}\n"}, ["--job", "{s.yaml}"],
     ["sweep task 1", "'lr'", "a finite number"]),
    # -- integers beyond what torch, SLURM or the OS accept --
    ("negative seed", {}, ["--set", "job.seed=-1"], ["'seed'", "-1", "[0, 4294967295]"]),
    ("seed beyond 32 bits", {}, ["--set", "job.seed=4294967296"], ["'seed'", "4294967296", "[0, 4294967295]"]),
    ("seed beyond 64 bits", {}, ["--set", "job.seed=18446744073709551616"], ["'seed'", "fits in 64 bits"]),
    ("hex seed beyond 64 bits", {}, ["--set", "job.seed=0xffffffffffffffffff"], ["'seed'", "fits in 64 bits"]),
    ("epochs beyond 32 bits", {}, ["--set", "job.epochs=2147483648"], ["'epochs'", "2147483647"]),
    ("batch size beyond 32 bits", {}, ["--set", "job.batch_size_per_rank=99999999999"],
     ["'batch_size_per_rank'", "2147483647"]),
    ("grad accumulation beyond 32 bits", {}, ["--set", "job.grad_accum_steps=4294967296"], ["'grad_accum_steps'"]),
    ("log cadence beyond 32 bits", {}, ["--set", "job.log_every_steps=1099511627776"], ["'log_every_steps'"]),
    ("checkpoint cadence beyond 32 bits", {}, ["--set", "job.checkpoint_every_steps=2147483648"],
     ["'checkpoint_every_steps'", "or null"]),
    ("synthetic data set too large", {},
     ["--set", "job.dataset=synthetic-cifar10", "--set", "job.model=lenet", "--set",
      "job.synthetic_train_size=10000000"],
     ["'synthetic_train_size'", "1000000"]),
    ("interrupt step beyond 64 bits", {}, ["--set", "job.interrupt_at=99999999999999999999"],
     ["'interrupt_at'", "fits in 64 bits"]),
    ("cpus per task beyond SLURM", {}, ["--set", "profile.cpus_per_task=65536"], ["'cpus_per_task'", "65535"]),
    ("tasks per node beyond SLURM", {}, ["--profile", "dev-cluster", "--set", "profile.tasks_per_node=70000"],
     ["'tasks_per_node'", "65535"]),
    ("nodes beyond 32 bits", {}, ["--profile", "dev-cluster", "--set", "profile.nodes=4294967296"],
     ["'nodes'", "2147483647"]),
    ("time limit beyond 32 bits", {}, ["--set", "profile.time_min=2147483648"],
     ["--set: key 'profile.time_min' has invalid value 2147483648", "2147483647"]),
    # -- former key names (time_min, mem_per_task_gb) refused as written: the key, the value, the file or --set --
    ("former time_min in a profile", {"p.yaml": "extends: local\ntime_min: -5\n"}, ["--profile", "{p.yaml}"],
     ["p.yaml: key 'time_min' has invalid value -5; expected a SLURM time limit > 0"]),
    ("former mem_per_task_gb in a profile", {"p.yaml": "extends: local\nmem_per_task_gb: -5\n"},
     ["--profile", "{p.yaml}"], ["p.yaml: key 'mem_per_task_gb' has invalid value -5; expected a number of GB that makes a valid "
                                 "mem_per_task", "(mem_per_task: '-5G' is refused: expected memory > 0"]),
    ("former time_min by --set", {}, ["--set", "profile.time_min=-5"],
     ["--set: key 'profile.time_min' has invalid value -5; expected a SLURM time limit > 0"]),
    ("former mem_per_task_gb by --set", {}, ["--set", "profile.mem_per_task_gb=-5"],
     ["--set: key 'profile.mem_per_task_gb' has invalid value -5; expected a number of GB that makes"]),
    ("former time_min by --set, refused with another key", {}, ["--set", "profile.time_min=1"],
     ["with --set profile.time_min: key 'signal_delay_s'"]),
    ("signal delay beyond SLURM", {}, ["--set", "profile.time_min=100000", "--set", "profile.signal_delay_s=65536"],
     ["'signal_delay_s'", "65535"]),
    ("array parallelism beyond 32 bits", {}, ["--set", "profile.array_parallelism=2147483648"],
     ["'array_parallelism'"]),
    ("max array size beyond 32 bits", {}, ["--set", "profile.max_array_size=2147483648"], ["'max_array_size'"]),
    ("init timeout beyond 32 bits", {}, ["--set", "profile.init_timeout_s=9999999999"], ["'init_timeout_s'"]),
    ("collective timeout beyond 32 bits", {}, ["--set", "profile.collective_timeout_s=9999999999"],
     ["'collective_timeout_s'"]),
    ("timeout requeues beyond 32 bits", {}, ["--set", "profile.max_timeout_requeues=2147483648"],
     ["'max_timeout_requeues'"]),
    ("negative GPUs", {}, ["--set", "profile.gpus_per_node=-1"], ["'gpus_per_node'", ">= 0"]),
    ("negative max_failures", {}, ["--profile", "dev-cluster", "--set", "profile.max_failures=-1"],
     ["'max_failures'", "-1", "an integer from 0 to 1000, or null"]),
    ("retries for the local executor", {}, ["--set", "profile.max_failures=2"],
     ["'max_failures'", "0 or null for the local executor", "--resume"]),
    ("node error pattern that does not compile", {}, ["--profile", "dev-cluster", "--set",
                                                       "profile.node_error_patterns=['Xid (']"],
     ["node_error_patterns[0]", "'Xid ('", "a regular expression"]),
    # -- overrides that collide --
    ("--set a mapping key under a scalar", {}, ["--set", "profile.env=x", "--set", "profile.env.A=1"],
     ["--set profile.env.A=1", "'env' was already set", "'x'"]),
    ("--set a scalar over a mapping", {}, ["--set", "profile.env.A=1", "--set", "profile.env=x"],
     ["--set profile.env=x", "already holds keys", "A"]),
    ("--set sbatch_extra scalar over keys", {}, ["--profile", "dev-cluster", "--set",
                                                 "profile.sbatch_extra.comment=a", "--set",
                                                 "profile.sbatch_extra=b"], ["sbatch_extra", "already holds"]),
    ("--set extra key under a scalar", {}, ["--set", "job.extra=v", "--set", "job.extra.k=1"],
     ["'extra' was already set"]),
    ("--set a key under a scalar field", {}, ["--set", "job.lr.x=1"], ["'lr'", "{'x': 1}", "a number"]),
    ("--set a key under a string field", {}, ["--set", "job.name.x=1"], ["'name'", "a string"]),
    ("--set a mapping one level too deep", {}, ["--set", "profile.env.A.B=1"], ["env.A", "a string, number"]),
    ("--set with an empty key part", {}, ["--set", "job..lr=1"], ["'job..lr' has an empty part"]),
    ("--set with a trailing dot", {}, ["--set", "job.lr.=1"], ["'job.lr.' has an empty part"]),
    ("--set with no key", {}, ["--set", "=3"], ["--set =3", "KEY=VALUE"]),
    ("--set a mapping value for env", {}, ["--set", "profile.env.A=[1, 2]"],
     ["--set profile.env.A=[1, 2]", "single scalar"]),
    ("--set an undefined alias", {}, ["--set", "job.lr=*a"], ["--set job.lr=*a", "not a valid YAML scalar"]),
    # -- --set values YAML would not read as written: refused with the reason where the key is not text --
    ("--set a document marker", {}, ["--set", "job.lr=---"], ["--set job.lr=---", "'---' starts a YAML document"]),
    ("--set a comment YAML would drop", {}, ["--set", "job.lr=0.1 # warmup"],
     ["--set job.lr=0.1 # warmup", "'# warmup' is a YAML comment", "which YAML drops", "quote it",
      "--set \"job.lr='0.1 # warmup'\""]),
    ("--set only a comment", {}, ["--set", "job.config.note=#3"], ["--set job.config.note=#3", "'#3' is a YAML comment"]),
    ("--set a tag YAML would drop", {}, ["--set", "job.epochs=!!str 3"], ["--set job.epochs=!!str 3", "YAML tag"]),
    ("--set an anchor YAML would drop", {}, ["--set", "job.seed=&s 3"], ["--set job.seed=&s 3", "'&s' is a YAML anchor"]),
    ("--set a block scalar", {}, ["--set", "profile.setup=|"], ["--set profile.setup=|", "block scalar"]),
    ("--set a list after a comment", {}, ["--set", "profile.setup=[echo a] # b"], ["'# b' is a YAML comment"]),
    ("--set a nested key onto a scalar from the file", {}, ["--set", "job.epochs.x=1"], ["'epochs'", "an integer"]),
    # -- sbatch_extra keys that contradict what the profile models --
    *[(f"sbatch_extra {option}", {}, ["--profile", "dev-cluster", "--set", f"profile.sbatch_extra.{option}"],
       [f"sbatch_extra.{option.split('=')[0]}", said]) for option, said in SBATCH_EXTRA_REFUSED.items()],
    ("sbatch_extra in a profile file", {"p.yaml": "extends: dev-cluster\nsbatch_extra: {gpus-per-node: 2}\n"},
     ["--profile", "{p.yaml}"], ["p.yaml", "sbatch_extra.gpus-per-node", "gpus_per_node"]),
    # -- names and paths --
    ("job name longer than a file name", {}, ["--set", f"job.name={LONG}"],
     ["job.name", "300 bytes", "use a shorter job.name"]),
    ("job and profile names together too long", {"p" * 200 + ".yaml": "extends: local\n"},
     ["--profile", "{" + "p" * 200 + ".yaml}", "--set", "job.name=" + "j" * 60],
     ["job.name", "the file system allows"]),
    ("runs_dir deeper than PATH_MAX", {}, ["--set", "profile.runs_dir={empty}/" + "/".join(["y" * 250] * 17)],
     ["profile.runs_dir", "too deep", "4096"]),
    ("runs_dir under a regular file", {"afile": "x"}, ["--set", "profile.runs_dir={afile}/runs"],
     ["profile.runs_dir", "is under", "afile", "a file, not a folder"]),
    ("runs_dir is a regular file", {"afile": "x"}, ["--set", "profile.runs_dir={afile}"],
     ["profile.runs_dir", "is a file, not a folder"]),
    ("runs_dir on a read-only file system", {}, ["--set", "profile.runs_dir=/proc/sys/runs"],
     ["profile.runs_dir", "/proc/sys", "not writable"]),
    ("runs_dir under a file on SLURM", {"afile": "x"},
     ["--profile", "dev-cluster", "--set", "profile.runs_dir={afile}/runs"], ["profile.runs_dir", "a file"]),
    ("data_dir under a regular file", {"afile": "x"}, ["--job", "cifar10", "--set", "profile.data_dir={afile}/d"],
     ["profile.data_dir", "afile", "a file, not a folder", "download"]),
    ("data_dir on a read-only file system", {}, ["--job", "cifar10", "--set", "profile.data_dir=/proc/sys/data"],
     ["profile.data_dir", "not writable"]),
    ("job data_dir is a regular file", {"afile": "x"}, ["--job", "cifar10", "--set", "job.data_dir={afile}"],
     ["job.data_dir", "afile", "a file, not a folder"]),
    ("job file is a folder", {"jobs/.keep": ""}, ["--job", "{empty}"], ["job '", "not found"]),
    ("profile is a device", {}, ["--profile", "/dev/null"], ["profile '/dev/null' not found"]),
    ("empty profile name", {}, ["--profile", ""], ["profile '' not found"]),
    # -- local profiles: setup is refused, malformed or not --
    ("malformed setup line on a local profile", {"p.yaml": "extends: local\nsetup: [\"echo 'unclosed\"]\n"},
     ["--profile", "{p.yaml}"], ["p.yaml", "'setup'", "local executor", "SLURM batch scripts"]),
    ("setup line on a local profile", {}, ["--set", "profile.setup=[\"module load cuda\"]"],
     ["'setup'", "local executor"]),
    ("setup line on the debug profile", {}, ["--profile", "debug", "--set", "profile.setup=[\"echo hi\"]"],
     ["'setup'", "debug executor"]),
    ("setup that is not a list", {}, ["--profile", "dev-cluster", "--set", "profile.setup=echo"],
     ["'setup'", "a list of a string"]),
    ("env value that is a mapping", {"p.yaml": "extends: local\nenv: {A: {b: 1}}\n"}, ["--profile", "{p.yaml}"],
     ["env.A", "a string, number or boolean"]),
    ("env value that is null", {"p.yaml": "extends: local\nenv: {A: null}\n"}, ["--profile", "{p.yaml}"],
     ["env.A", "a string, number or boolean"]),
    # -- sweeps --
    ("sweep grid with a repeated value", {"s.yaml": SWEEP + "  grid: {lr: [0.1, 0.2, 0.1]}\n"}, ["--job", "{s.yaml}"],
     ["task 2", "same job as task 0", "each point once"]),
    ("sweep task equal to a grid point", {"s.yaml": SWEEP + "  grid: {lr: [0.1, 0.2]}\n  tasks: [{lr: 0.2}]\n"},
     ["--job", "{s.yaml}"], ["task 2", "same job as task 1"]),
    ("sweep tasks listed twice", {"s.yaml": SWEEP + "  tasks: [{lr: 0.3, epochs: 2}, {epochs: 2, lr: 0.3}]\n"},
     ["--job", "{s.yaml}"], ["task 1", "same job as task 0"]),
    ("sweep point equal to the base job", {"s.yaml": SWEEP + "  tasks: [{epochs: 5}, {lr: 0.1}]\n"},
     ["--job", "{s.yaml}", "--set", "job.epochs=5", "--set", "job.lr=0.1"], ["task 1", "same job as task 0"]),
    ("sweep grid too large", {"s.yaml": SWEEP + "  grid:\n    lr: [" + ", ".join(f"0.{i:03d}1" for i in range(101))
                              + "]\n    seed: [" + ", ".join(str(i) for i in range(100)) + "]\n"},
     ["--job", "{s.yaml}"], ["10100 tasks", "101 x 100", "at most 10000"]),
    ("sweep grid of a billion points", {"s.yaml": SWEEP + "  grid:\n" + "".join(
        f"    {k}: [{', '.join(str(i + 1) for i in range(32))}]\n"
        for k in ("epochs", "seed", "batch_size_per_rank", "log_every_steps", "eval_every_epochs",
                  "keep_checkpoints"))},
     ["--job", "{s.yaml}"], ["1073741824 tasks", "at most 10000"]),
    ("sweep that is a list", {"s.yaml": "extends: digits\nsweep: [1, 2]\n"}, ["--job", "{s.yaml}"],
     ["'sweep' must be a mapping"]),
    ("sweep tasks not mappings", {"s.yaml": SWEEP + "  tasks: [0.1, 0.2]\n"}, ["--job", "{s.yaml}"],
     ["'sweep.tasks' must be a list of mappings"]),
    ("sweep grid value not a list", {"s.yaml": SWEEP + "  grid: {lr: 0.1}\n"}, ["--job", "{s.yaml}"],
     ["'sweep.grid.lr' must be a non-empty list"]),
    ("sweep grid empty list", {"s.yaml": SWEEP + "  grid: {lr: []}\n"}, ["--job", "{s.yaml}"],
     ["'sweep.grid.lr' must be a non-empty list"]),
    ("sweep with no points", {"s.yaml": SWEEP + "  grid: {}\n"}, ["--job", "{s.yaml}"], ["defines no tasks"]),
    ("sweep task with an unknown key", {"s.yaml": SWEEP + "  tasks: [{lrr: 0.1}]\n"}, ["--job", "{s.yaml}"],
     ["sweep.tasks[0].lrr", "lr"]),
    ("sweep task with a bad value", {"s.yaml": SWEEP + "  tasks: [{lr: -1}]\n"}, ["--job", "{s.yaml}"],
     ["sweep task 0", "'lr'", "> 0"]),
    ("sweep task seed beyond 32 bits", {"s.yaml": SWEEP + "  tasks: [{seed: 5000000000}]\n"}, ["--job", "{s.yaml}"],
     ["sweep task 0", "'seed'"]),
    ("sweep with another section", {"s.yaml": SWEEP + "  grids: {lr: [0.1]}\n"}, ["--job", "{s.yaml}"],
     ["unknown key 'sweep.grids'", "grid"]),
    # -- YAML that the loader already refuses --
    ("two YAML documents in one file", {"j.yaml": "extends: digits\n---\nepochs: 3\n"}, ["--job", "{j.yaml}"],
     ["j.yaml", "malformed YAML"]),
    ("a python object tag", {"j.yaml": "extends: digits\nname: !!python/object/apply:os.system ['true']\n"},
     ["--job", "{j.yaml}"], ["j.yaml", "python/object"]),
    ("a list as a key", {"j.yaml": "extends: digits\n? [a, b]\n: 1\n"}, ["--job", "{j.yaml}"], ["j.yaml"]),
    ("a tab-indented file", {"p.yaml": "extends: local\nenv:\n\tA: 1\n"}, ["--profile", "{p.yaml}"],
     ["p.yaml", "malformed YAML"]),
    ("extends that is a list", {"p.yaml": "extends: [local]\n"}, ["--profile", "{p.yaml}"],
     ["'extends'", "the name or path of another file"]),
    ("extends itself", {"p.yaml": "extends: p.yaml\n"}, ["--profile", "{p.yaml}"], ["cycle"]),
    # -- operating commands on what is not a run --
    ("status of a missing run", {}, ["status", "no-such-run"], ["run 'no-such-run'", "not a run folder"]),
    ("logs of a missing run", {}, ["logs", "no-such-run"], ["run 'no-such-run'"]),
    ("cancel of a missing run", {}, ["cancel", "no-such-run"], ["run 'no-such-run'"]),
    ("--resume of a missing run", {}, ["--resume", "no-such-run"], ["no-such-run"]),
    ("--after a folder that is not a run", {"r/.keep": ""}, ["--profile", "dev-cluster", "--after", "{empty}"],
     ["--after", "not a run folder"]),
]

# YAML itself (trainer/config/yamlio.py, read by trainer.config.schema.read_yaml): duplicate keys, alias bombs,
# deep nesting, text that is not UTF-8, empty files.
YAML_CASES = [
    ("duplicate key in a job file", {"j.yaml": "extends: digits\nepochs: 2\nepochs: 3\n"}, ["--job", "{j.yaml}"],
     ["j.yaml", "duplicate key 'epochs'"]),
    ("duplicate key in a profile file", {"p.yaml": "extends: local\ntasks_per_node: 2\ntasks_per_node: 1\n"},
     ["--profile", "{p.yaml}"], ["p.yaml", "duplicate key 'tasks_per_node'"]),
    ("duplicate nested key", {"p.yaml": "extends: local\nenv: {A: 1, A: 2}\n"}, ["--profile", "{p.yaml}"],
     ["p.yaml", "duplicate key 'A'"]),
    ("alias expansion bomb", {"j.yaml": BOMB}, ["--job", "{j.yaml}"], ["j.yaml", "alias"]),
    ("very deep nesting", {"j.yaml": "extends: digits\nextra: " + "[" * 500 + "]" * 500 + "\n"},
     ["--job", "{j.yaml}"], ["j.yaml", "nested deeper than"]),
    ("job file that is not UTF-8", {"j.yaml": "extends: digits\nname: caf\xe9\n".encode("latin-1")},
     ["--job", "{j.yaml}"], ["j.yaml", "not UTF-8"]),
    # The offset counts the byte-order mark: it is the byte's place in the file as written.
    ("job file with a byte-order mark, not UTF-8 after it",
     {"j.yaml": b"\xef\xbb\xbfextends: digits\nname: \xff\n"}, ["--job", "{j.yaml}"],
     ["j.yaml", "not UTF-8 text (byte 25: b'\\xff')"]),
    ("profile file that is not UTF-8", {"p.yaml": b"extends: local\nqos: \xff\xfe\n"}, ["--profile", "{p.yaml}"],
     ["p.yaml", "not UTF-8"]),
    ("empty job file", {"j.yaml": ""}, ["--job", "{j.yaml}"], ["j.yaml", "empty"]),
    ("empty profile file", {"p.yaml": ""}, ["--profile", "{p.yaml}"], ["p.yaml", "empty"]),
    ("job file of comments only", {"j.yaml": "# nothing\n"}, ["--job", "{j.yaml}"], ["j.yaml", "empty"]),
]

# GPU requests, and sbatch options no profile can use (issue 20). Same shape as CASES.
GPU = ["--profile", "dev-cluster-gpu"]
GPU_CASES = [
    ("gpu_type without GPUs", {}, ["--profile", "dev-cluster", "--set", "profile.gpu_type=a100"],
     ["'gpu_type'", "'a100'", "gpus_per_node > 0"]),
    ("gpu_type with a colon", {}, [*GPU, "--set", "profile.gpu_type=a100:8"], ["'gpu_type'", "'a100:8'", "GRES type"]),
    ("gpu_type no node has", {}, [*GPU, "--set", "profile.gpu_type=a100"],
     ["profile.gpu_type", "'a100'", "partition gpu", "its nodes have: fake"]),
    ("more typed GPUs than a node has", {}, [*GPU, "--set", "profile.gpu_type=fake", "--set", "profile.gpus_per_node=8",
                                           "--set", "profile.tasks_per_node=8", "--set", "profile.mem_per_task=100M"],
     ["profile.gpus_per_node", "8"]),
    ("gpus_per_task that leaves GPUs unbound", {}, [*GPU, "--set", "profile.gpus_per_task=2"],
     ["'gpus_per_task'", "2", "gpus_per_node / tasks_per_node = 1"]),
    ("unknown gpu_request style", {}, [*GPU, "--set", "profile.gpu_request=gpu"], ["'gpu_request'", "'gres'", "'gpus'"]),
    ("sbatch_extra clusters", {}, ["--profile", "dev-cluster", "--set", "profile.sbatch_extra.clusters=other"],
     ["sbatch_extra.clusters", "'other'", "--clusters is not supported", "clusters: NAME", "-M on all of them"]),
    ("clusters, one named twice", {"p.yaml": "extends: dev-cluster\nclusters: [a, a]\n"}, ["--profile", "{p.yaml}"],
     ["'clusters'", "['a', 'a']", "each cluster named once"]),
    ("clusters, not a name", {}, ["--profile", "dev-cluster", "--set", "profile.clusters=a;b"],
     ["'clusters'", "'a;b'", "a SLURM cluster name"]),
    ("clusters on the local executor", {}, ["--set", "profile.clusters=second"],
     ["'clusters'", "'second'", "empty for the local executor"]),
    ("sbatch_extra abbreviated --cluster", {}, ["--profile", "dev-cluster", "--set", "profile.sbatch_extra.cluster=o"],
     ["sbatch_extra.cluster", "not supported"]),
    ("sbatch_extra hetjob", {}, ["--profile", "dev-cluster", "--set", "profile.sbatch_extra.hetjob=1"],
     ["sbatch_extra.hetjob", "not supported", "heterogeneous"]),
    ("sbatch_extra parsable", {}, ["--profile", "dev-cluster", "--set", "profile.sbatch_extra.parsable=x"],
     ["sbatch_extra.parsable", "job id"]),
    ("launch torchrun on the local executor", {}, ["--set", "profile.launch=torchrun"],
     ["'launch'", "'torchrun'", "'tasks' for the local executor"]),
    ("launch torchrun with gpus_per_task", {}, [*GPU, "--set", "profile.launch=torchrun", "--set",
                                                "profile.gpus_per_task=1"], ["'gpus_per_task'", "launch: torchrun"]),
    ("unknown launch shape", {}, ["--set", "profile.launch=mpirun"], ["'launch'", "'mpirun'", "'torchrun'"]),
    ("sbatch_extra wait", {}, ["--profile", "dev-cluster", "--set", "profile.sbatch_extra.wait=x"],
     ["sbatch_extra.wait", "block"]),
    # -- node lists, parsed at load by the one reader, counted before they are expanded (issue 43) --
    ("exclude of 10^8 nodes", {}, ["--profile", "dev-cluster", "--set", "profile.sbatch_extra.exclude=cpu[1-100000000]"],
     ["sbatch_extra.exclude", "100000000 hosts", "more than the 100000"]),
    ("exclude of 10^6 nodes in two groups", {}, ["--profile", "dev-cluster", "--set",
                                                 "profile.sbatch_extra.exclude=r[1-1000]n[1-1000]"],
     ["sbatch_extra.exclude", "1000000 hosts"]),
    ("nodelist with a shell character", {}, ["--profile", "dev-cluster", "--set", "profile.sbatch_extra.nodelist=cpu1;reboot"],
     ["sbatch_extra.nodelist", "';' in node list item", "letters, digits"]),
    ("exclude with a descending range", {}, ["--profile", "dev-cluster", "--set", "profile.sbatch_extra.exclude=cpu[3-1]"],
     ["sbatch_extra.exclude", "descending range"]),
    ("nodelist with an unclosed bracket", {}, ["--profile", "dev-cluster", "--set", "profile.sbatch_extra.nodelist=cpu[1-2"],
     ["sbatch_extra.nodelist", "unbalanced '['"]),
]

ALL_CASES = [pytest.param(*c[1:], id=c[0]) for c in CASES + MORE_CASES + YAML_CASES + GPU_CASES]
# Through `python submit.py`, as a user types it, without --dry-run: the core corpus, the YAML cases
# (a bomb or a deep nesting must not take the process down) and the GPU/SLURM ones, and of MORE_CASES
# those that meet the machine (file systems, devices, a profile file, a SLURM limit). The rest of
# MORE_CASES are value ranges and --set spellings met by the same code in the same process: they run
# in-process in tests/test_cli_in_process.py (every case there), which spares the suite about 120
# interpreters (90 s of a worker on a quiet 2-core machine).
MORE_THROUGH_SUBMIT = {"memory .nan on SLURM", "memory beyond SLURM", "lr .inf in a job file", "--set an undefined alias",
                       "sbatch_extra in a profile file", "runs_dir deeper than PATH_MAX", "runs_dir on a read-only file system",
                       "data_dir on a read-only file system", "job file is a folder", "profile is a device"}
SUBMIT_CASES = [pytest.param(*c[1:], id=c[0]) for c in CASES + [c for c in MORE_CASES if c[0] in MORE_THROUGH_SUBMIT]
                + YAML_CASES + GPU_CASES]


def write(path: Path, text: str | bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)



def test_a_job_file_with_a_byte_order_mark_is_read_as_utf8(tmp_path: Path) -> None:
    """Editors on Windows write one; it is not part of the first key."""
    job = write(tmp_path / "j.yaml", b"\xef\xbb\xbfextends: digits\nname: caf\xc3\xa9\n")
    proc = run_submit(["--job", job, "--dry-run"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "\n  name: café\n" in proc.stdout  # the dry run shows the name as written


def test_the_cases_through_submit_py_are_named_as_in_the_corpus() -> None:
    """A renamed case must not silently leave the subprocess run."""
    assert MORE_THROUGH_SUBMIT <= {c[0] for c in MORE_CASES}


@pytest.mark.parametrize("files,args,expected", SUBMIT_CASES)
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
    assert len(CASES) + len(MORE_CASES) >= 100


# ----- your own code (issue 10): entrypoint jobs, each exit 2 with nothing queued ------------------

TINY = 'entrypoint: "tests.userpkg.tiny:train"\n'
USER_CODE_CASES = [
    ("entrypoint module missing", {"u.yaml": 'entrypoint: "nosuchpkg.train:main"\n'}, ["--job", "{u.yaml}"],
     ["u.yaml: key 'entrypoint'", "nosuchpkg.train:main", "no module named 'nosuchpkg'", "PYTHONPATH and installed packages"]),
    ("entrypoint function missing", {"u.yaml": 'entrypoint: "tests.userpkg.tiny:trian"\n'}, ["--job", "{u.yaml}"],
     ["u.yaml: key 'entrypoint'", "has no function 'trian'", "train"]),
    ("entrypoint not module:function", {"u.yaml": 'entrypoint: "tests/userpkg/tiny.py"\n'}, ["--job", "{u.yaml}"],
     ["u.yaml: key 'entrypoint'", "'package.module:function'"]),
    ("config key the function's dataclass does not accept", {"u.yaml": TINY + "config: {epoch: 3}\n"},
     ["--job", "{u.yaml}"], ["u.yaml: unknown key 'config.epoch'", "did you mean 'epochs'", "lr"]),
    ("config value of the wrong type", {"u.yaml": TINY}, ["--job", "{u.yaml}", "--set", "job.config.epochs=two"],
     ["u.yaml with --set job.config.epochs: key 'config.epochs'", "'two'", "an integer"]),
    ("sweep over a config key the function does not accept",
     {"u.yaml": TINY + "sweep: {grid: {config.lrr: [0.1, 0.2]}}\n"}, ["--job", "{u.yaml}"],
     ["u.yaml (sweep task 0): unknown key 'config.lrr'"]),
    ("script that does not exist", {"u.yaml": "script: nothere/train.py\n"}, ["--job", "{u.yaml}"],
     ["u.yaml: key 'script'", "nothere/train.py", "no such file"]),
    ("both entrypoint and script", {"u.yaml": TINY + "script: train.py\n"}, ["--job", "{u.yaml}"],
     ["u.yaml", "'script'", "'entrypoint'"]),
    ("config on the built-in recipe", {}, ["--set", "job.config.lr=0.1"],
     ["jobs/digits.yaml with --set job.config.lr: key 'config' has invalid value {'lr': 0.1}",
      "empty without an 'entrypoint'", "--set job.lr=0.1"]),
    ("args beside an entrypoint", {"u.yaml": TINY + "args: [--epochs, '3']\n"}, ["--job", "{u.yaml}"],
     ["u.yaml: key 'args' has invalid value ['--epochs', '3']", "empty without a 'script'", "config:"]),
    ("entrypoint with a debug profile too", {"u.yaml": 'entrypoint: "tests.userpkg.tiny:missing"\n'},
     ["--profile", "debug", "--job", "{u.yaml}"], ["u.yaml: key 'entrypoint'", "has no function 'missing'"]),
    # (issue 30) what is named must be a function, and a script must compile, before the queue wait
    ("entrypoint naming a class", {"u.yaml": 'entrypoint: "tests.userpkg.tiny:TinyConfig"\n'}, ["--job", "{u.yaml}"],
     ["u.yaml: key 'entrypoint' has invalid value 'tests.userpkg.tiny:TinyConfig'", "names a class, not a function",
      "(ctx) or (ctx, config)"]),
    ("entrypoint naming a callable object",
     {"u.yaml": 'entrypoint: "mine:train"\n', "mine.py": "class A:\n    def __call__(self, ctx):\n        return {}\n"
      "train = A()\n"}, ["--job", "{u.yaml}"], ["u.yaml: key 'entrypoint'", "an object of type A, not a function"]),
    ("script with a syntax error", {"u.yaml": "script: train.py\n", "train.py": "import os\ndef main(:\n    pass\n"},
     ["--job", "{u.yaml}", "--dry-run"], ["u.yaml: key 'script'", "not Python that compiles: SyntaxError: invalid syntax",
                                          "train.py, line 2)"]),
    ("script that is a shell script", {"u.yaml": "script: train.py\n", "train.py": "#!/bin/sh\necho start && ls\n"},
     ["--job", "{u.yaml}"], ["u.yaml: key 'script'", "SyntaxError: invalid syntax", "train.py, line 2)"]),
    ("script that is a binary file", {"u.yaml": "script: train.py\n", "train.py": b"\x7fELF\x02\x01\x01\x00\x00\x00"},
     ["--job", "{u.yaml}"], ["u.yaml: key 'script'", "not Python that compiles", "null bytes", "train.py)"]),
]


@pytest.mark.parametrize("files,args,expected", [c[1:] for c in USER_CODE_CASES], ids=[c[0] for c in USER_CODE_CASES])
def test_bad_user_code_input_is_one_clear_line_and_exit_2(tmp_path: Path, files: dict[str, str], args: list[str],
                                                          expected: list[str]) -> None:
    test_bad_input_is_one_clear_line_and_exit_2(tmp_path, files, args, expected)


def test_user_code_errors_name_the_job_file_as_the_user_gave_it(tmp_path: Path) -> None:
    write(tmp_path / "jobs" / "mine.yaml", 'entrypoint: "tests.userpkg.tiny:trian"\n')
    write(tmp_path / "jobs" / "run.yaml", "script: nothere/train.py\n")
    for job, key, value in [("jobs/mine.yaml", "entrypoint", "tests.userpkg.tiny:trian"),
                            ("jobs/run.yaml", "script", "nothere/train.py")]:
        proc = run_submit(["--job", job], cwd=tmp_path, timeout=60)
        assert proc.returncode == 2 and proc.stderr.startswith(f"error: {job}: key '{key}' has invalid value '{value}'; ")
    assert not (tmp_path / "runs").exists()


def test_help_does_not_import_the_users_module(tmp_path: Path) -> None:
    write(tmp_path / "loud.py", "raise SystemExit('imported')\n")
    write(tmp_path / "u.yaml", 'entrypoint: "loud:main"\n')
    proc = run_submit(["--job", "u.yaml", "--help"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 0 and "imported" not in proc.stdout + proc.stderr


def test_a_set_value_with_a_hash_is_taken_literally_where_the_key_holds_text(tmp_path: Path) -> None:
    """`#` would start a YAML comment: an env value keeps it, and the dry run shows exactly what was set."""
    proc = run_submit(["--set", "profile.env.NOTE=run #3", "--set", "profile.env.TAG=&a x", "--dry-run", "--json"],
                      cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout.strip().splitlines()[-1])
    assert shown["profile"]["env"]["NOTE"] == "run #3" and shown["profile"]["env"]["TAG"] == "&a x"
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, named", [(["--runs", "0"], "--runs"), (["--parallel", "-3"], "--parallel")])
def test_the_chaos_soak_refuses_a_count_that_is_not_one_before_it_starts(tmp_path: Path, args: list[str],
                                                                         named: str) -> None:
    """Benchmark command lines (issue 43): `benchmarks/chaos.py --runs 0` started the soak and ended in a
    traceback; a count is at least 1, refused in one argparse line (exit 2) before anything runs."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "chaos.py"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "Traceback" not in done.stderr and not done.stdout, done.stderr
    assert last.startswith(f"chaos.py: error: argument {named}: ") and "a whole number of at least 1" in last, last
