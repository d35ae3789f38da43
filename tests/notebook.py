"""A real Jupyter kernel for the tests: ipykernel started through nbclient (what `jupyter nbconvert --execute`
uses), in a folder of the test's own, running cells one at a time as a person does in a notebook, and
what each cell showed (its printed text, its value, the error it raised) read back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.util import run_sync

from tests.helpers import ROOT


class Kernel:
    """One kernel, kept across cells (and tests: a module fixture), in `folder`."""

    def __init__(self, folder: Path, env: dict[str, str] | None = None, timeout: float = 900) -> None:
        self.folder = folder
        self.notebook = nbformat.v4.new_notebook()
        self.client = NotebookClient(self.notebook, kernel_name="python3", timeout=int(timeout), allow_errors=True,
                                     resources={"metadata": {"path": str(folder)}})
        # The project importable as if installed; the kernel starts in the notebook's folder.
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self._start()

    def _start(self) -> None:
        self.client.km = self.client.create_kernel_manager()
        self.client.start_new_kernel(env=self.env)
        self.client.start_new_kernel_client()

    def run(self, code: str) -> Cell:
        """Execute `code` as the next cell; what it showed."""
        cell = nbformat.v4.new_code_cell(code)
        self.notebook.cells.append(cell)
        self.client.execute_cell(cell, len(self.notebook.cells) - 1)
        return Cell(cell)

    def value(self, code: str) -> Any:
        """Run `code` (its last line an expression) and return that expression's value, read back with
        `repr` / `eval` (plain values only: numbers, strings, lists, dicts)."""
        shown = self.run(code)
        assert shown.error is None, shown.text
        import ast

        return ast.literal_eval(shown.result)

    def restart(self) -> None:
        """The kernel restarted (what "Restart kernel" does): every name is gone, the folder stays."""
        self.stop()
        self._start()

    def stop(self) -> None:
        if self.client.kc is not None:
            self.client.kc.stop_channels()
        if self.client.km is not None:
            run_sync(self.client.km.shutdown_kernel)(now=True)
        self.client.kc = None
        self.client.km = None


class Cell:
    """What one executed cell showed."""

    def __init__(self, cell: Any) -> None:
        self.outputs = list(cell.outputs)

    @property
    def text(self) -> str:
        """Everything printed, the value shown, and the error with its traceback, as the notebook shows it."""
        parts = []
        for out in self.outputs:
            if out.output_type == "stream":
                parts.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                parts.append(out.data.get("text/plain", ""))
            elif out.output_type == "error":
                parts.append(f"{out.ename}: {out.evalue}\n" + "\n".join(out.traceback))
        return "".join(parts)

    @property
    def result(self) -> str:
        found = [o.data.get("text/plain", "") for o in self.outputs if o.output_type == "execute_result"]
        return found[-1] if found else ""

    @property
    def error(self) -> tuple[str, str] | None:
        """(exception type, its message) of the error the cell raised, if any."""
        errors = [o for o in self.outputs if o.output_type == "error"]
        return (errors[-1].ename, errors[-1].evalue) if errors else None
