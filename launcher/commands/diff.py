"""`submit.py diff RUN_A RUN_B [--json]`: what differs between two runs' resolved inputs, key by key, those in
their signatures first (why they are two runs, not one: docs/signatures.md), then the others (the same
result either way). Read from each run's run.json and tasks.json; nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from launcher.commands.console import EXIT_OK, ArgumentParser, relative
from launcher.commands.operate import add_runs_dir_arguments
from launcher.config.resolve import runs_dir
from launcher.rundir import layout, record, signature
from launcher.rundir.record import RecordedRun, find_run, load_run

# What every run.json holds that is about this run folder, not about what was computed: never a difference.
_ITS_OWN = ("run_dir", "task_dir", "log_dir", "submit_dir", "created", "argv", "job_ids")


def diff_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="submit.py diff", description="What differs between two runs' resolved inputs "
                            "(job, config, profile, code, interpreter), key by key: those in the signature first.")
    parser.add_argument("run_a", metavar="RUN_A", help="run folder, or its name under the runs folder")
    parser.add_argument("run_b", metavar="RUN_B", help="run folder, or its name under the runs folder")
    add_runs_dir_arguments(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object: both signatures and each difference")
    return parser


def diff(args: argparse.Namespace) -> int:
    where = runs_dir(args.profile, args.runs_dir)
    a, b = (load_run(find_run(name, where)) for name in (args.run_a, args.run_b))
    found = differences(a, b)
    if args.json:
        print(json.dumps({"run_a": str(a.run_dir), "run_b": str(b.run_dir), "signature_a": a.signature or None,
                          "signature_b": b.signature or None, "same_signature": _same(a, b), "differences": found},
                         default=str), flush=True)
        return EXIT_OK
    print(_text(a, b, found), flush=True)
    return EXIT_OK


def differences(a: RecordedRun, b: RecordedRun) -> list[dict[str, Any]]:
    """Each key whose value differs, as {"key", "a", "b", "in_signature"}: the job (a sweep: each point's), the
    profile, the code and the interpreter, those in the signature first, each group in key order."""
    found = []
    for section, left, right in (("job", _jobs(a), _jobs(b)), ("profile", a.profile, b.profile)):
        flat_a, flat_b = _flat(left), _flat(right)
        for key in sorted(set(flat_a) | set(flat_b)):
            if flat_a.get(key, _MISSING) != flat_b.get(key, _MISSING):
                top = key.split("]", 1)[-1].lstrip(".").split(".")[0]
                found.append({"key": f"{section}.{key}" if not key.startswith("[") else f"{section}{key}",
                              "a": flat_a.get(key), "b": flat_b.get(key), "in_signature": signature.counts(section, top)})
    parts_a, parts_b = a.record.get("signature_parts") or {}, b.record.get("signature_parts") or {}
    for part in ("code", "python"):
        if parts_a.get(part) != parts_b.get(part):
            found.append({"key": part, "a": parts_a.get(part), "b": parts_b.get(part), "in_signature": True})
    return sorted(found, key=lambda d: not d["in_signature"])


_MISSING = object()


def _jobs(run: RecordedRun) -> Any:
    """The run's job (a sweep: each point's, from tasks.json) less what names its own folders."""
    tasks = record.read_optional(run.run_dir / layout.TASKS_FILE) if run.is_sweep else None
    if tasks and isinstance(tasks.get("tasks"), list):
        return [{k: v for k, v in dict(t.get("job") or {}).items() if k not in _ITS_OWN} for t in tasks["tasks"]]
    return {k: v for k, v in run.job.items() if k not in _ITS_OWN}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings and lists as dotted keys (`config.lr`, `[1].lr` for a sweep's second point)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and value and prefix == "" and all(isinstance(v, dict) for v in value):
        out = {}
        for i, inner in enumerate(value):
            out.update(_flat(inner, f"[{i}]"))
        out["points"] = len(value)
        return out
    return {prefix: value}


def _same(a: RecordedRun, b: RecordedRun) -> bool | None:
    return None if not (a.signature and b.signature) else a.signature == b.signature


def _text(a: RecordedRun, b: RecordedRun, found: list[dict[str, Any]]) -> str:
    same = _same(a, b)
    head = (f"{relative(a.run_dir)} ({a.signature or 'no signature'}) and {relative(b.run_dir)} "
            f"({b.signature or 'no signature'}): "
            + ("the same signature" if same else "different signatures" if same is False else
               "a run recorded before signatures cannot be compared by them"))
    lines = [head]
    for in_signature, title in ((True, "in the signature (why they are two runs):"),
                                (False, "not in the signature (the same result either way):")):
        rows = [d for d in found if d["in_signature"] is in_signature]
        if rows:
            lines.append(title)
            lines += [f"  {d['key']}: {_shown(d['a'])} -> {_shown(d['b'])}" for d in rows]
    if not found:
        lines.append("no difference in what they recorded")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    return json.dumps(value, default=str) if not isinstance(value, str) or not value else value
