"""`list-profiles`, `list-jobs` and `show`: what is found where, and which file a name resolves to.

    ddp-submit list-profiles [--json]      every profile in lookup order (trainer/config/lookup.py)
    ddp-submit list-jobs [--json]          the same for jobs
    ddp-submit show [--profile P] [--job J] [--set K=V ...]   the files P and J resolve to

Nothing here imports torch or submitit.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from launcher.commands.console import EXIT_OK, ArgumentParser
from launcher.config.profile import PROFILE_FILES
from launcher.config.resolve import resolve
from trainer.config import lookup
from trainer.config.job import JOB_FILES

KINDS = {"profiles": PROFILE_FILES, "jobs": JOB_FILES}


def _listing_parser(kind: str) -> ArgumentParser:
    parser = ArgumentParser(prog=f"submit.py list-{kind}",
                            description=f"List the {kind} a name can stand for, in lookup order (the first "
                                        f"file of a name wins).")
    parser.add_argument("--json", action="store_true", help="one JSON object per file")
    return parser


def _listing(kind: str, args: argparse.Namespace) -> int:
    folder, shipped = KINDS[kind].folder, KINDS[kind].shipped
    rows = lookup.catalog(folder, shipped)
    if args.json:
        for place, name, path, used in rows:
            print(json.dumps({"name": name, "file": str(path), "from": place.label, "used": used}))
        return EXIT_OK
    print(f"{kind}, looked up in this order (a path given explicitly comes first):")
    for i, place in enumerate(lookup.places(folder, shipped), 1):
        note = f"  (${lookup.CONFIG_DIR_VAR} moves it)" if place.label == "user folder" else ""
        print(f"  {i}. {place.label + ':':<19} {place.folder}{'' if place.folder.is_dir() else '  (absent)'}{note}")
    width = max([len(name) for _, name, _, _ in rows] + [4])
    for place, name, path, used in rows:
        hidden = "" if used else "  (hidden by the same name above)"
        print(f"{name:<{width}}  {place.label:<17}  {path}{hidden}")
    return EXIT_OK


def list_profiles_parser() -> ArgumentParser:
    return _listing_parser("profiles")


def list_profiles(args: argparse.Namespace) -> int:
    return _listing("profiles", args)


def list_jobs_parser() -> ArgumentParser:
    return _listing_parser("jobs")


def list_jobs(args: argparse.Namespace) -> int:
    return _listing("jobs", args)


def show_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="submit.py show",
                            description="Which files a profile and a job resolve to (with what they extend).")
    parser.add_argument("--profile", default="local", help="NAME or path (default: local)")
    parser.add_argument("--job", default="digits", help="NAME or path (default: digits)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    return parser


def show(args: argparse.Namespace) -> int:
    resolved = resolve(args.profile, args.job, args.sets)
    if args.json:
        print(json.dumps({"profile": resolved.profile_source, "job": resolved.job_source}))
    else:
        print(f"profile {args.profile}: {resolved.profile_source}")
        print(f"job {args.job}: {resolved.job_source}")
        print(f"(user folder: {lookup.user_dir()}; see list-profiles, list-jobs; current directory: {Path.cwd()})")
    return EXIT_OK
