"""Values that reach a shell line, an argument vector or a path are checked where they enter
(trainer.config.values): one line, no control characters, no leading '-' where a program reads
options, container binds of the form SRC[:DST[:ro|rw]] with an existing absolute SRC, names and
paths that fit the file system. Each refusal is one `error:` line naming the file the value came
from (through `extends:` too), the key and the value; exit 2; no run folder. The batch script is
checked whole before sbatch reads it, and error lines never carry raw control bytes.

In-process (launcher.commands.main.main, what submit.py runs): milliseconds per case. One case goes
through `python submit.py` to show the bytes a terminal receives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.request.executor import check_script
from tests.helpers import run_submit
from tests.test_bad_inputs import write
from tests.test_cli_in_process import call  # the command line in this process, its exit code and output
from trainer.config import values
from trainer.config.schema import ConfigError

CTL = "expected one line of text without control characters"
DASH = "expected a value not starting with '-'"
SLURM = "extends: slurm-cpu\n"

# (id, files {name: text}, arguments, substrings of the one error line); {p.yaml} etc. become paths.
CASES = [
    ("newline in runs_dir (a file)", {"p.yaml": 'extends: local\nruns_dir: "r\\n#SBATCH --qos=hi"\n'},
     ["--profile", "{p.yaml}"], ["p.yaml", "key 'runs_dir'", "#SBATCH --qos=hi", CTL, "'\\n'"]),
    ("newline in runs_dir (--set)", {}, ["--set", "profile.runs_dir=r\n#SBATCH --qos=hi"],
     ["with --set profile.runs_dir: key 'runs_dir'", CTL]),
    ("newline in data_dir", {"p.yaml": 'extends: local\ndata_dir: "d\\nx"\n'}, ["--profile", "{p.yaml}"],
     ["p.yaml", "key 'data_dir'", CTL]),
    ("newline in slurm_conf", {"p.yaml": SLURM + 'slurm_conf: "c\\nx"\n'}, ["--profile", "{p.yaml}"],
     ["p.yaml", "key 'slurm_conf'", CTL]),
    ("python starting with -", {"p.yaml": SLURM + "python: -c\n"}, ["--profile", "{p.yaml}"],
     ["p.yaml", "key 'python' has invalid value '-c'", DASH]),
    ("container starting with -", {"p.yaml": SLURM + "container: --writable\n"}, ["--profile", "{p.yaml}"],
     ["p.yaml", "key 'container' has invalid value '--writable'", DASH]),
    ("script starting with -", {"j.yaml": "script: -x.py\n", "-x.py": ""}, ["--job", "{j.yaml}"],
     ["j.yaml", "key 'script' has invalid value '-x.py'", DASH]),
    ("NUL in args", {"j.yaml": 'script: t.py\nargs: ["a\\0b"]\n', "t.py": ""}, ["--job", "{j.yaml}"],
     ["j.yaml", "key 'args[0]' has invalid value 'a\\x00b'", CTL]),
    ("NUL in env", {"p.yaml": 'extends: local\nenv: {A: "x\\0y"}\n'}, ["--profile", "{p.yaml}"],
     ["p.yaml", "key 'env.A'", CTL]),
    ("newline in a setup line", {"p.yaml": SLURM + 'setup: ["true\\n#SBATCH --qos=hi"]\n'}, ["--profile", "{p.yaml}"],
     ["p.yaml", "key 'setup[0]'", CTL]),
    ("newline in a job name", {"j.yaml": 'extends: digits\nname: "a\\nb"\n'}, ["--job", "{j.yaml}"],
     ["j.yaml", "key 'name'", CTL]),
    ("bind with four fields", {"p.yaml": SLURM + "container: docker://x\ncontainer_binds: ['/tmp:/a:ro:x']\n"},
     ["--profile", "{p.yaml}"], ["p.yaml", "key 'container_binds[0]' has invalid value '/tmp:/a:ro:x'",
                                  "SRC[:DST[:ro|rw]]"]),
    ("bind with an unknown option", {"p.yaml": SLURM + "container: docker://x\ncontainer_binds: ['/tmp:/a:rx']\n"},
     ["--profile", "{p.yaml}"], ["p.yaml", "'container_binds[0]'", "the option is 'ro' or 'rw', not 'rx'"]),
    ("bind with an empty source", {"p.yaml": SLURM + "container: docker://x\ncontainer_binds: [':/x']\n"},
     ["--profile", "{p.yaml}"], ["p.yaml", "'container_binds[0]' has invalid value ':/x'", "SRC[:DST[:ro|rw]]"]),
    ("bind of a missing source", {"p.yaml": SLURM + "container: docker://x\ncontainer_binds: ['/no/such:/x']\n"},
     ["--profile", "{p.yaml}"], ["p.yaml", "'/no/such' does not exist here"]),
    ("bind with a relative target", {"p.yaml": SLURM + "container: docker://x\ncontainer_binds: ['/tmp:x']\n"},
     ["--profile", "{p.yaml}"], ["p.yaml", "'container_binds[0]'", "DST absolute"]),
    ("profile name over 255 bytes", {}, ["--profile", "p" * 300], ["profile 'ppp", "(300 bytes)", "at most 255 bytes"]),
    ("profile name that fits only without .yaml", {}, ["--profile", "q" * 252], ["profile 'qqq", "not found"]),
    ("status of a run name over 255 bytes", {}, ["status", "r" * 300], ["RUN 'rrr", "at most 255 bytes"]),
    ("--resume of a run name over 255 bytes", {}, ["--resume", "r" * 300], ["RUN 'rrr", "at most 255 bytes"]),
    ("list with a runs folder over 255 bytes", {}, ["list", "--runs-dir", "r" * 300], ["--runs-dir 'rrr", "255 bytes"]),
    ("job name over 255 bytes", {}, ["--job", "j" * 300], ["job 'jjj", "at most 255 bytes"]),
    ("extends name over 255 bytes", {"p.yaml": "extends: " + "x" * 300 + "\n"}, ["--profile", "{p.yaml}"],
     ["p.yaml: key 'extends'", "at most 255 bytes"]),
    ("profile path over PATH_MAX", {}, ["--profile", "/".join(["d" * 200] * 25)], ["profile 'ddd", "4096 bytes"]),
    ("extends a missing file names the extending one", {"c.yaml": "extends: nosuch\n"}, ["--profile", "{c.yaml}"],
     ["c.yaml: key 'extends': profile 'nosuch' not found"]),
    ("constraint refused names the file through extends",
     {"p.yaml": SLURM + 'constraint: "a\\n#SBATCH --qos=hi"\n', "c.yaml": "extends: p.yaml\n"},
     ["--profile", "{c.yaml}"], ["c.yaml (extending ", "p.yaml", "key 'constraint'", CTL]),
    ("sbatch_extra refused names the file", {"p.yaml": SLURM + 'sbatch_extra: {comment: "a\\nb"}\n'},
     ["--profile", "{p.yaml}"], ["p.yaml", "key 'sbatch_extra.comment'", CTL]),
    ("script that is not a Python file", {"j.yaml": "script: run.sh\n", "run.sh": "echo\n"}, ["--job", "{j.yaml}"],
     ["j.yaml: key 'script' has invalid value 'run.sh'", "a Python file"]),
    ("local python that does not exist", {"p.yaml": "extends: local\npython: /no/such/python\n"},
     ["--profile", "{p.yaml}"], ["p.yaml", "key 'python' has invalid value '/no/such/python'", "does not exist"]),
    ("local python that is not executable", {"p.yaml": "extends: local\npython: ./notes.txt\n", "notes.txt": ""},
     ["--profile", "{p.yaml}"], ["p.yaml", "key 'python'", "is not executable"]),
    ("local python not on PATH", {"p.yaml": "extends: local\npython: no-such-python3\n"},
     ["--profile", "{p.yaml}"], ["p.yaml", "key 'python'", "not a command on this machine's PATH"]),
    ("an escape sequence in a value", {"p.yaml": 'extends: local\nqos: "\\e[2J"\n'}, ["--profile", "{p.yaml}"],
     ["p.yaml", "key 'qos' has invalid value '\\x1b[2J'"]),
    # The hostile-input sweep (issue 22's outside corpus): each was a traceback or a silent change.
    ("NUL in a job's project_root", {"j.yaml": 'entrypoint: "tests.userpkg.tiny:train"\nproject_root: "a\\0b"\n'},
     ["--job", "{j.yaml}"], ["j.yaml: key 'project_root' has invalid value 'a\\x00b'", CTL]),
    ("project_root over 255 bytes", {"j.yaml": "extends: digits\nproject_root: " + "r" * 300 + "\n"}, ["--job", "{j.yaml}"],
     ["j.yaml (extending ", "key 'project_root'", "at most 255 bytes"]),
    ("~user of no user in runs_dir", {"p.yaml": "extends: local\nruns_dir: ~nosuchuser/runs\n"}, ["--profile", "{p.yaml}"],
     ["p.yaml", "key 'runs_dir' has invalid value '~nosuchuser/runs'", "'~nosuchuser' names a user of this machine"]),
    ("~user of no user as --job", {}, ["--job", "~nosuchuser/j.yaml"], ["job '~nosuchuser/j.yaml'", "names a user"]),
    ("--runs-dir of no user", {}, ["list", "--runs-dir", "~nosuchuser/r"], ["--runs-dir '~nosuchuser/r'", "names a user"]),
    ("a byte that is not UTF-8 in --set", {}, ["--set", "job.name=caf\udce9"],
     ["with --set job.name: key 'name' has invalid value 'caf\\udce9'", "UTF-8 text"]),
    ("an escape sequence in a profile's name", {"p.yaml": 'extends: local\nname: "\\e]0;x\\a"\n'},
     ["--profile", "{p.yaml}"], ["p.yaml", "key 'name' has invalid value '\\x1b]0;x\\x07'", CTL]),
    ("python over 255 bytes", {"p.yaml": SLURM + "python: " + "p" * 300 + "\n"}, ["--profile", "{p.yaml}"],
     ["p.yaml", "key 'python'", "at most 255 bytes"]),
    ("a job file that cannot be read", {}, ["--job", "/proc/self/mem"], ["/proc/self/mem: cannot read it"]),
    ("--after a name over 255 bytes", {}, ["--profile", "slurm-cpu", "--after", "a" * 300],
     ["--after 'aaa", "(300 bytes)", "at most 255 bytes"]),
    ("--after an empty name", {}, ["--profile", "slurm-cpu", "--after", ""], ["--after", "not a run folder"]),
    ("--resume of an empty name", {}, ["--resume", ""], ["run ''", "not a run folder"]),
    ("--runs-dir without --resume", {}, ["--runs-dir", "elsewhere"],
     ["--runs-dir elsewhere: only --resume reads it", "--set profile.runs_dir"]),
    ("--runs-dir empty", {}, ["status", "--runs-dir", ""], ["--runs-dir ''", "leave --runs-dir out"]),
    ("a --set value of 100,000 characters is cut short", {}, ["--set", "job.lr=0.1 #" + "y" * 100_000],
     ["--set job.lr=0.1 #yyy", "... (100005 characters): YAML would not read the value '0.1 #yyy",
      "... (100007 characters) as written: '#yyy", "... (100001 characters) is a YAML comment"]),
    ("watch with an endless interval", {}, ["watch", "--interval", "inf"], ["--interval", "'inf'", "(0, 3600]"]),
]


@pytest.fixture(autouse=True)
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("files,args,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_value_that_would_reach_a_shell_argv_or_path_is_refused_where_it_enters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, str], args: list[str],
        expected: list[str]) -> None:
    paths = {name: write(tmp_path / name, text) for name, text in files.items()}
    for name, path in paths.items():
        args = [a.replace("{" + name + "}", path) for a in args]
    code, out, err = call(args, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), out + err
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    assert "\x1b" not in err and not (tmp_path / "runs").exists()


def test_values_that_fit_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The rule refuses only what it says: binds of each documented form, a value with a '-' inside."""
    write(tmp_path / "p.yaml", SLURM + "container: docker://x\npython: /opt/my-env/bin/python\n"
          "container_binds: [/tmp, '/tmp:/data', '/tmp:/data:ro', '/var/tmp:/s:rw']\nconstraint: a-b\n")
    code, out, err = call(["--profile", str(tmp_path / "p.yaml"), "--dry-run", "--json"], capsys)
    assert code == 0, err
    shown = json.loads(out.strip().splitlines()[-1])["profile"]
    assert shown["container_binds"] == ["/tmp", "/tmp:/data", "/tmp:/data:ro", "/var/tmp:/s:rw"]
    assert values.bind("/tmp:/x") is None and values.argument("a-b") is None and values.path("a/" * 1000) is None
    # A job file whose name holds a byte that is not UTF-8 is still found (the sweep refuses such bytes only
    # in values that are written into a file or script).
    write(tmp_path / "caf\udce9.yaml", "extends: digits\n")
    code, out, err = call(["--job", str(tmp_path / "caf\udce9.yaml"), "--dry-run", "--json"], capsys)
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["job"]["name"] == "digits", err


def test_the_batch_script_is_checked_whole_before_sbatch_reads_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A #SBATCH line the request did not make (anywhere in the text) is refused; the real one passes."""
    code, out, err = call(["--profile", "slurm-cpu", "--set", "profile.sbatch_extra.mail-type=END", "--dry-run",
                           "--json"], capsys)
    assert code == 0, err
    shown = json.loads(out.strip().splitlines()[-1])
    # The request's own parameters (launcher.cluster.slurm.sbatch.parameters), as submitit gets them:
    # a copy written here would pass a script the request no longer makes.
    script, params = shown["sbatch_script"], shown["executor_parameters"]
    assert params["additional_parameters"]["mail-type"] == "END"
    check_script(script, params)
    lines = script.splitlines()
    header_end = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    for injected in (lines[:header_end + 1] + ["#SBATCH --qos=high"] + lines[header_end + 1:],
                     lines + ["#SBATCH --partition=p"],  # after the first command: a sign something leaked
                     lines[:2] + ["#SBATCH --time=1"] + lines[2:]):  # a second --time
        with pytest.raises(ConfigError, match="an #SBATCH line the request did not make"):
            check_script("\n".join(injected), params)


def test_an_error_line_reaches_the_terminal_without_control_bytes(tmp_path: Path) -> None:
    """Through `python submit.py`: the bytes on stderr, not only the text, carry no ESC or BEL."""
    write(tmp_path / "p.yaml", 'extends: local\nqos: "\\e]0;owned\\a\\e[2J"\n')
    proc = run_submit(["--profile", "p.yaml"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    assert "'\\x1b]0;owned\\x07\\x1b[2J'" in proc.stderr
