"""Rank 0's output echoed live while the submitter waits for a local run on a terminal (the verbs
start it: launcher.commands.sending).

The local executor writes each rank's stdout/stderr to log files, so rank 0's tqdm bar and its log
lines would otherwise only be visible with `submit.py logs`. A thread reads what rank 0 appends to
those files and draws it as a person wants to see it: log lines scroll, tqdm's bar (the text
after a carriage return) is redrawn in place on the last line, the attempt banner (written to both
files, so that each log has it) is shown once, and submitit's own INFO lines (pickles, job
environments) only with `--verbose`. The log files keep everything.
"""

from __future__ import annotations

import codecs
import sys
import threading
from pathlib import Path
from typing import IO, Any

from launcher.rundir.layout import ATTEMPT_BANNER

CLEAR_LINE = "\r\x1b[K"


class Screen:
    """Turns the two log streams into what the terminal shows: lines, and one bar drawn in place."""

    def __init__(self, out: IO[str], verbose: bool = False) -> None:
        self.out, self.verbose = out, verbose
        self.bar = ""  # the bar currently drawn on the last line ("" none)
        self.pending = {"out": "", "err": ""}  # text after the last separator, per stream

    def feed(self, stream: str, text: str) -> None:
        """New text from one stream ("out" or "err"); complete lines print, a '\\r' segment is a bar."""
        buf = self.pending[stream] + text
        start = 0
        for i, ch in enumerate(buf):
            if ch in "\r\n":
                self._segment(stream, buf[start:i], ended_by=ch)
                start = i + 1
        rest = buf[start:]
        self.pending[stream] = rest
        # tqdm writes "\r<bar>" without an end: the unfinished segment after a '\r' is the bar now.
        if stream == "err" and rest and start and buf[start - 1] == "\r":
            self._draw_bar(rest)
        self.out.flush()

    def close(self) -> None:
        for stream, rest in self.pending.items():
            if rest and not (stream == "err" and self.bar == rest):
                self._line(stream, rest)
        self._draw_bar("")
        self.out.flush()

    def _segment(self, stream: str, text: str, ended_by: str) -> None:
        if ended_by == "\r" and stream == "err":
            self._draw_bar(text)  # a bar state (tqdm starts each refresh with '\r')
        elif text.strip():
            self._line(stream, text)
        elif ended_by == "\n" and stream == "out" and not text:
            self._line(stream, "")  # an intended blank line on stdout

    def _line(self, stream: str, text: str) -> None:
        if stream == "err" and text.startswith(ATTEMPT_BANNER):
            return  # the same banner came on stdout
        if not self.verbose and text.startswith("submitit INFO"):
            return
        bar = self.bar
        self._draw_bar("")
        self.out.write(text + "\n")
        self._draw_bar(bar)

    def _draw_bar(self, text: str) -> None:
        text = text if text.strip() else ""
        if text == self.bar:
            return
        self.out.write(CLEAR_LINE + text)
        self.bar = text


class Echo:
    """A thread that feeds what rank 0 appends to its two log files to a Screen, until it leaves."""

    def __init__(self, pairs: list[tuple[Path, str]], screen: Screen, interval_s: float = 0.1) -> None:
        self.pairs, self.screen, self.interval_s = pairs, screen, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rank0-echo", daemon=True)

    def __enter__(self) -> "Echo":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        offsets = {path: 0 for path, _ in self.pairs}
        # Bytes, decoded incrementally: a text-mode read would turn tqdm's '\r' into '\n' (universal
        # newlines: every refresh a new line) and could split a multi-byte character between polls.
        decoders = {path: codecs.getincrementaldecoder("utf-8")(errors="replace") for path, _ in self.pairs}
        while True:
            stopping = self._stop.is_set()
            for path, stream in self.pairs:
                offsets[path], raw = _read_new(path, offsets[path])
                chunk = decoders[path].decode(raw)
                if chunk:
                    self.screen.feed(stream, chunk)
            if stopping:
                self.screen.close()
                return
            self._stop.wait(self.interval_s)


def _read_new(path: Path, offset: int) -> tuple[int, bytes]:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
            return offset + len(chunk), chunk
    except OSError:
        return offset, b""  # not created yet


def rank0_echo(job: Any, verbose: bool = False) -> Echo | None:
    """An echo of rank 0's logs for an interactive local run, else None (batch use stays quiet);
    `verbose` (--verbose): submitit's INFO lines too."""
    if not (sys.stderr.isatty() and sys.stdout.isatty()) or not hasattr(job, "task"):
        return None
    paths = job.task(0).paths if getattr(job, "num_tasks", 1) > 1 else job.paths
    # One terminal, one writer: both logs are drawn on stdout, so lines and the bar never interleave.
    return Echo([(paths.stdout, "out"), (paths.stderr, "err")], Screen(sys.stdout, verbose))
