"""SLURM's own spellings of a time limit and of memory, as users copy them from `sbatch --help`.

Profiles take them in `time` and `mem_per_task`; the submitter hands SLURM whole minutes and
megabytes, so what `--dry-run` shows is exactly what `sbatch` gets.
"""

from __future__ import annotations

import math
import re

TIME_FORMATS = ("minutes (90), MM:SS, HH:MM:SS (1:30:00), D-HH (1-12), D-HH:MM or D-HH:MM:SS (2-00:00:00)")
MEMORY_FORMATS = "a size with a unit such as 500M, 64G or 1.5T (a bare number is megabytes, as in SLURM)"

# Pattern strings: re compiles (and caches) each on first use, so a profile that gives its time and
# memory as plain numbers never pays for compiling them.
_DAYS = r"^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$"
_CLOCK = r"^(\d+)(?::(\d+))?(?::(\d+))?$"
_MEMORY = r"(?i)^(\d+(?:\.\d+)?|\.\d+)\s*([KMGT]?)B?$"
_MB_PER_UNIT = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


def time_minutes(value: int | float | str) -> int:
    """A SLURM time limit in whole minutes (seconds round up, as SLURM does); ValueError otherwise.

    The formats are SLURM's (`man sbatch`, --time): "90" is 90 minutes, "1:30" is one minute and
    thirty seconds (MM:SS), "1:30:00" is an hour and a half, "1-12" a day and a half."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(TIME_FORMATS)
    if isinstance(value, (int, float)):
        if value != int(value):
            raise ValueError(TIME_FORMATS)
        return int(value)
    text = value.strip()
    days, hours, minutes, seconds, has_hours = 0, 0, 0, 0, True
    if match := re.match(_DAYS, text):
        d, h, m, s = match.groups()
        days, hours, minutes, seconds = int(d), int(h), int(m or 0), int(s or 0)
    elif match := re.match(_CLOCK, text):
        parts = [int(p) for p in match.groups() if p is not None]
        has_hours = len(parts) == 3
        if len(parts) == 3:
            hours, minutes, seconds = parts
        else:
            minutes, seconds = (parts + [0])[:2]
    else:
        raise ValueError(TIME_FORMATS)
    if seconds >= 60 or (has_hours and minutes >= 60) or (days and hours >= 24):
        raise ValueError(f"{TIME_FORMATS}, with hours < 24 after days and minutes, seconds < 60 after hours")
    return days * 24 * 60 + hours * 60 + minutes + math.ceil(seconds / 60)


def memory_mb(value: int | float | str) -> int:
    """Memory in whole megabytes from `64G`, `500M`, `1.5T` or a bare number (megabytes, as SLURM
    reads `--mem=4000`); ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(MEMORY_FORMATS)
    match = re.match(_MEMORY, str(value).strip())
    if not match:
        raise ValueError(MEMORY_FORMATS)
    number, unit = float(match.group(1)), match.group(2).upper()
    return math.ceil(number * _MB_PER_UNIT[unit])
