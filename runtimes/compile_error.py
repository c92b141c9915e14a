"""The error every runtime raises for a kernel that fails to compile."""
from __future__ import annotations


class CompileError(RuntimeError):
    """A kernel failed to compile; the message includes its source."""

    def __init__(self, name: str, log: str, src: str):
        numbered = "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(src.splitlines()))
        super().__init__(f"kernel {name} failed to compile:\n{log}\n--- source ---\n{numbered}")
        self.src, self.log = src, log
