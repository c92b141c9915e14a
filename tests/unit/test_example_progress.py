"""Tests for examples/progress.py, the training example's progress bar. It is not part of
lazyten; the script finds it because its own directory is on sys.path, and so does this test."""

from __future__ import annotations

import importlib
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
Progress = importlib.import_module("progress").Progress


def test_progress_plain_lines():
    """Non-TTY output gets periodic plain lines plus a final line with the postfix."""
    buf = io.StringIO()
    bar = Progress(range(50), desc="epoch 1", file=buf)
    seen = []
    for i in bar:
        seen.append(i)
        bar.set(loss=0.5 / (i + 1), acc="ok")
    assert seen == list(range(50))
    lines = buf.getvalue().splitlines()
    assert 2 <= len(lines) <= 12
    assert lines[-1].startswith("epoch 1:") and "50/50" in lines[-1]
    assert "loss=0.01" in lines[-1] and "acc=ok" in lines[-1] and "it/s" in lines[-1]
    assert "\r" not in buf.getvalue()


def test_progress_tty_and_int_total():
    """A TTY stream gets carriage-return redraws; an int argument means range(n)."""

    class FakeTTY(io.StringIO):
        def isatty(self) -> bool:
            return True

    buf = FakeTTY()
    bar = Progress(5, desc="x", file=buf, min_interval=0.0)
    assert len(bar) == 5
    assert list(bar) == [0, 1, 2, 3, 4]
    text = buf.getvalue()
    assert text.count("\r") >= 2 and text.endswith("\n") and "5/5" in text


def test_progress_unknown_total():
    """A generator without len still works, showing a bare count."""
    buf = io.StringIO()
    assert sum(Progress((i for i in range(7)), file=buf)) == 21
    assert buf.getvalue().splitlines()[-1].startswith("7 ")
