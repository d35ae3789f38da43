"""Command line: parse, dispatch, report errors. The work itself lives in the verbs' modules.

    submit.py [--profile P] [--job J] [--set K=V ...] [--dry-run] [--json] [--wait] [--after RUN[:COND] ...]
    submit.py --resume RUN [--set K=V ...] [--dry-run] [--json] [--wait]
    submit.py status|logs|cancel|watch|list|diff|probe|list-profiles|list-jobs|show ...
    (installed: the same as `ddp-submit ...`)

A command on one run (a RUN argument: its parser's `run`, or `--resume RUN`) whose RUN is the local
record of a submission over SSH runs on the cluster side (launcher.remote.relay): which commands do,
and which of their options take a value, is read from their parsers here, not listed by hand.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable

from launcher.commands.console import EXIT_BAD_INPUT, EXIT_FAILED, ArgumentParser, error_line, escaped
from launcher.request import channel
from launcher.request.errors import LostAfterSending, PartiallySubmitted
from trainer.config.schema import ConfigError

# Each command as "module:function" of this wing; the module also has `function_parser()`. Imported
# only when that command runs (as pip's command registry does): submitting (and --dry-run, what
# users wait for most) does not load the operating commands, and `status` does not load the submit
# path. benchmarks/submitter.py measures it. (`receive`: the cluster side of a submission over SSH.)
COMMANDS = {
    "status": "operate:status", "logs": "operate:logs", "cancel": "cancel:cancel", "list": "recent:list_runs",
    "probe": "probe:probe", "list-profiles": "catalog:list_profiles", "list-jobs": "catalog:list_jobs",
    "show": "catalog:show", "watch": "watch:watch", "receive": "receive:receive", "diff": "diff:diff",
}
SUBMIT, RESUME = "submit:submit_new_run", "resume:resume"


def load(target: str) -> Callable[..., int]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(f"launcher.commands.{module}"), function)  # type: ignore[no-any-return]


def parser_of(command: str) -> argparse.ArgumentParser:
    """The parser of `command` ("": submitting, the main parser)."""
    if not command:
        return submit_parser()
    return load(COMMANDS[command] + "_parser")()  # type: ignore[return-value]


def submit_parser() -> ArgumentParser:
    parser = ArgumentParser(
        # `ddp-submit` installed, `submit.py` in the checkout: argparse names the program as it was started.
        description="Run a training job on a cluster profile: locally with N processes, in-process for "
                    "debugging, or on SLURM (single runs and job-array sweeps).",
        epilog="Other commands: status [RUN] | watch [RUN] | logs RUN | cancel RUN | list | diff RUN_A RUN_B | probe | "
               "list-profiles | "
               "list-jobs | show  (each has --help). Profiles and jobs are found by path, in ./cluster_profiles and ./jobs, "
               "in the user folder ($DDP_SUBMIT_CONFIG_DIR, else $XDG_CONFIG_HOME/ddp-submit or "
               "~/.config/ddp-submit), then among the shipped ones.",
    )
    parser.add_argument("--profile", default="local", help="cluster profile: a path or a NAME (see list-profiles) "
                        "(default: local; with --resume: where to look for RUN by name)")
    # None: not given (digits), so that `--resume` can refuse a --job it would not use.
    parser.add_argument("--job", help="job or sweep: a path or a NAME (see list-jobs; default: digits)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field, e.g. job.epochs=3 or profile.tasks_per_node=4 (YAML scalar)")
    parser.add_argument("--dry-run", action="store_true", help="show what would be submitted; submit nothing")
    parser.add_argument("--when", action="store_true", help="SLURM: when would it start (this request and a few "
                        "variants, asked of sbatch --test-only); submit nothing")
    parser.add_argument("--in-allocation", action="store_true", help="SLURM: run the ranks as a job step of the "
                        "allocation this shell holds (salloc), not as a new job (profile key in_allocation)")
    parser.add_argument("--json", action="store_true", help="end standard output with one JSON object")
    parser.add_argument("--wait", action="store_true", help="wait for a SLURM run to finish and print its result")
    parser.add_argument("--after", metavar="RUN[:ok|any|notok]", action="append",
                        help="start only after RUN ended: successfully (ok, the default), in any way (any) or "
                             "failed (notok); repeatable, all must hold (SLURM)")
    parser.add_argument("--resume", metavar="RUN", help="resubmit the tasks of RUN that did not complete")
    parser.add_argument("--rerun", action="store_true", help="a new run even where an identical one (the same "
                        "signature) exists in the runs folder; without it, submitting one answers with it "
                        "(docs/signatures.md)")
    parser.add_argument("--runs-dir", help="with --resume: where runs are (default: the profile's runs_dir)")
    # For programs that start the command line (launcher.client): data beside the human output.
    parser.add_argument("--events", type=int, metavar="FD", help="also write JSON lines (run_dir, queued, "
                        "refused, result) to this open file descriptor, for a program that started this one")
    parser.add_argument("--function", metavar="FILE", help="a function pickled by value (what "
                        "launcher.client.submit(fn) hands over, with a job naming it in 'function')")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show submitit's own INFO lines (pickles, job environments)")
    return parser


def main(argv: list[str] | None = None, job: bytes | None = None) -> int:
    """The command line: `argv` (this process's own arguments if None); `job`: what `--job -` reads instead of
    standard input (launcher.client runs a debug profile's run here, with the user's stdin left to pdb)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Run folders hold pickles that submitit and `status` load: what this process writes (and the
    # local processes and SLURM jobs it starts, which inherit the umask) is private to the user.
    os.umask(0o077)
    try:
        command, words = (argv[0], argv[1:]) if argv and argv[0] in COMMANDS else ("", argv)
        parser = parser_of(command)
        args = parser.parse_args(words)
        if not command:
            channel.open_events(args.events)  # (for a program that started this one: launcher.client)
            from trainer.config import files  # (YAML: not for `--help` or the subcommands)

            files.use_stdin(job)
            if args.resume is not None and args.rerun:
                raise ConfigError(f"--rerun: --resume {args.resume} continues that run; submit without --resume "
                                  f"for a new one")
            if args.resume is not None and args.function is not None:
                raise ConfigError(f"--function {args.function}: --resume runs the function its run folder holds")
        if (code := over_ssh(parser, command, words, args)) is not None:
            return code
        if command:
            return load(COMMANDS[command])(args)
        if args.in_allocation:  # the profile key, checked with the others
            args.sets.append("profile.in_allocation=true")
        if args.resume is None:
            if args.runs_dir is not None:  # silently unused otherwise: a new run goes to the profile's runs_dir
                raise ConfigError(f"--runs-dir {args.runs_dir}: only --resume reads it (where to find RUN); a new "
                                  f"run goes to the profile's runs_dir (--set profile.runs_dir=FOLDER)")
            args.job = "digits" if args.job is None else args.job
            return load(SUBMIT)(args, argv)
        # `is None`, not falsiness: `--resume ''` names a run (refused as such), never a new submission.
        return load(RESUME)(args, argv)
    except ConfigError as err:
        channel.tell("refused", error=str(err), details=str(getattr(err, "details", "") or ""))
        print(error_line(err), file=sys.stderr)
        if getattr(err, "details", ""):  # the user's own traceback frames (trainer.runners.entrypoints)
            # Line by line, so the frames keep their lines while any control byte in them is escaped.
            print("\n".join(map(escaped, str(err.details).splitlines())), file=sys.stderr)  # type: ignore
        return EXIT_BAD_INPUT
    except (PartiallySubmitted, LostAfterSending) as err:
        channel.tell("failed", error=str(err))
        print(error_line(err), file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`submit.py list | head`): nothing more to say, and no traceback. Standard
        # output goes to /dev/null so that the interpreter's final flush cannot fail again; the
        # status is what a shell reports for a process ended by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    finally:
        channel.close()


def over_ssh(parser: argparse.ArgumentParser, command: str, words: list[str], args: argparse.Namespace) -> int | None:
    """A command on one run recorded here by a submission over SSH, run on the cluster side; None: not one.
    The run is the parser's `run` (RUN) or `resume` (--resume RUN); RUN is replaced there by the run
    folder there, and this machine's --profile, --runs-dir and --events dropped (the cluster side has none
    of them; how a relayed --resume ended is told here, from its exit status)."""
    dest = "run" if command else "resume"
    word = getattr(args, dest, None)
    if word is None:
        return None
    from launcher.remote import ssh_record  # (only for a command on a run: `--help` and a new run load none of it)

    if (folder := ssh_record.find(word, getattr(args, "profile", "local"), getattr(args, "runs_dir", None))) is None:
        return None
    run = ssh_record.read_remote_record(folder)
    assert run is not None
    from launcher.remote.relay import relay

    rest = _replaced(parser, words, dest, run.remote_run_dir, dropped=("profile", "runs_dir", "events"))
    tty = command == "watch" and sys.stdin.isatty() and sys.stdout.isatty()  # it redraws there, and reads `q`
    code = relay(folder, run, [*([command] if command else []), *rest], tty)
    if not command:  # --resume: how it ended, as data (its own lines went to this terminal)
        if code == 0:
            channel.tell("result", payload={"run_dir": str(folder)})
        else:
            channel.tell("refused" if code == EXIT_BAD_INPUT else "failed", details="",
                         error=f"the cluster side's --resume of {folder} ended with exit status {code}")
    return code


def _replaced(parser: argparse.ArgumentParser, words: list[str], dest: str, value: str,
              dropped: tuple[str, ...]) -> list[str]:
    """`words` with the word that fills `dest` replaced by `value`, and the options of `dropped` left
    out; which words are options' values is read from the parser (its options that take one)."""
    options = {s: action for action in parser._actions for s in action.option_strings}
    out: list[str] = []
    positional_done, i = False, 0
    while i < len(words):
        word = words[i]
        name, eq, attached = word.partition("=")
        action = options.get(name if word.startswith("--") else word)
        if action is not None:
            takes = action.nargs != 0
            given = [word] if eq or not takes else words[i:i + 2]
            i += len(given)
            if action.dest in dropped:
                continue
            if action.dest == dest:
                given = [f"{name}={value}"] if eq else [word, value]
            out += given
            continue
        if not word.startswith("-") and dest == "run" and not positional_done:
            out.append(value)
            positional_done = True
        else:
            out.append(word)
        i += 1
    return out
