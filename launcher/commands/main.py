"""Command line: parse, dispatch, report errors. The work itself lives in the other modules.

    submit.py [--profile P] [--job J] [--set K=V ...] [--dry-run] [--json] [--wait] [--after RUN[:COND] ...]
    submit.py --resume RUN [--set K=V ...] [--dry-run] [--json] [--wait]
    submit.py status|logs|cancel|list|probe|list-profiles|list-jobs|show ...
    (installed: the same as `ddp-submit ...`)
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from launcher.commands import relay
from launcher.commands.console import EXIT_BAD_INPUT, EXIT_FAILED, ArgumentParser, error_line, one_line
from launcher.request import channel
from launcher.request.errors import PartiallySubmitted
from trainer.config.schema import ConfigError

# Each command as "module:function" of this wing, imported only when that command runs (as pip's
# command registry does): submitting (and --dry-run, what users wait for most) does not load the
# operating commands, and `status` does not load the submit path. benchmarks/submitter.py measures it.
COMMANDS = {
    "status": "operate:status", "logs": "operate:logs", "cancel": "operate:cancel", "list": "operate:list_runs",
    "probe": "probe:main", "list-profiles": "catalog:list_profiles", "list-jobs": "catalog:list_jobs",
    "show": "catalog:show", "watch": "watch:main",
}
# A new run's --dry-run only plans (launcher.commands.plan): it never loads the sending code.
SUBMIT, PREVIEW, RESUME = "submit:submit", "plan:preview", "resume:resume"


def load(target: str) -> Callable[..., int]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(f"launcher.commands.{module}"), function)  # type: ignore[no-any-return]


def submit_parser() -> ArgumentParser:
    parser = ArgumentParser(
        # `ddp-submit` installed, `submit.py` in the checkout: argparse names the program as it was started.
        description="Run a training job on a cluster profile: locally with N processes, in-process for "
                    "debugging, or on SLURM (single runs and job-array sweeps).",
        epilog="Other commands: status [RUN] | watch [RUN] | logs RUN | cancel RUN | list | probe | list-profiles | "
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
    parser.add_argument("--json", action="store_true", help="end standard output with one JSON object")
    parser.add_argument("--wait", action="store_true", help="wait for a SLURM run to finish and print its result")
    parser.add_argument("--after", metavar="RUN[:ok|any|notok]", action="append",
                        help="start only after RUN ended: successfully (ok, the default), in any way (any) or "
                             "failed (notok); repeatable, all must hold (SLURM)")
    parser.add_argument("--resume", metavar="RUN", help="resubmit the tasks of RUN that did not complete")
    parser.add_argument("--runs-dir", help="with --resume: where runs are (default: the profile's runs_dir)")
    # For programs that start the command line (launcher.client): data beside the human output.
    parser.add_argument("--events", type=int, metavar="FD", help="also write JSON lines (run_dir, queued, "
                        "refused, result) to this open file descriptor, for a program that started this one")
    parser.add_argument("--function", metavar="FILE", help="a function pickled by value (what "
                        "launcher.client.submit(fn) hands over, with a job naming it in 'function')")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show submitit's own INFO lines (pickles, job environments)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Run folders hold pickles that submitit and `status` load: what this process writes (and the
    # local processes and SLURM jobs it starts, which inherit the umask) is private to the user.
    os.umask(0o077)
    try:
        # A run recorded by a submission over SSH is operated on the cluster side (launcher.commands.remote).
        if (argv[:1] and argv[0] in ("status", "logs", "cancel", "watch") or "--resume" in argv) and (
                (code := load("remote_runs:relayed")(argv)) is not None):
            return code
        if argv and argv[0] in COMMANDS:
            return load(COMMANDS[argv[0]])(argv[1:])
        args = submit_parser().parse_args(argv)
        channel.open_events(args.events)
        relay.VERBOSE = args.verbose
        if args.resume is None:
            if args.runs_dir is not None:  # silently unused otherwise: a new run goes to the profile's runs_dir
                raise ConfigError(f"--runs-dir {args.runs_dir}: only --resume reads it (where to find RUN); a new "
                                  f"run goes to the profile's runs_dir (--set profile.runs_dir=FOLDER)")
            args.job = "digits" if args.job is None else args.job
        elif args.function is not None:
            raise ConfigError(f"--function {args.function}: --resume runs the function its run folder holds")
        # `is None`, not falsiness: `--resume ''` names a run (refused as such), never a new submission.
        return load(RESUME if args.resume is not None else PREVIEW if args.dry_run else SUBMIT)(args, argv)
    except ConfigError as err:
        channel.tell("refused", error=str(err), details=str(getattr(err, "details", "") or ""))
        print(error_line(err), file=sys.stderr)
        if getattr(err, "details", ""):  # the user's own traceback frames (trainer.runners.entrypoints)
            # Line by line, so the frames keep their lines while any control byte in them is escaped.
            print("\n".join(map(one_line, str(err.details).splitlines())), file=sys.stderr)  # type: ignore
        return EXIT_BAD_INPUT
    except PartiallySubmitted as err:
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
