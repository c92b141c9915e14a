"""A tiny dependency-free progress bar for the training example (not part of lazyten).

Contract: ``Progress(iterable_or_total, desc=..., total=None, file=sys.stderr)`` is iterable and
yields the items of the iterable (or ``range(n)`` when given an int). On a TTY it redraws one
line in place (carriage return) with desc, bar, count/total, elapsed time, rate and the postfix
set by ``bar.set(key=value, ...)``; elsewhere it prints a plain line every ~10% of the total
(or every 1000 items when the total is unknown). A final line is always printed at the end.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Iterator, TextIO


class Progress:
    """Wrap an iterable (or an item count) and report progress on ``file``."""

    def __init__(self, iterable: Iterable[Any] | int, desc: str = "", total: int | None = None,
                 file: TextIO | None = None, width: int = 24, min_interval: float = 0.1) -> None:
        """Remember the iterable, its length if knowable, and the output stream."""
        self.iterable: Iterable[Any] = range(iterable) if isinstance(iterable, int) else iterable
        if total is None and hasattr(self.iterable, "__len__"):
            total = len(self.iterable)  # type: ignore[arg-type]
        self.total, self.desc, self.width = total, desc, width
        self.file = file if file is not None else sys.stderr
        self.tty = bool(getattr(self.file, "isatty", lambda: False)())
        self.min_interval = min_interval  # redraw throttle, so tight loops stay cheap
        self.postfix: dict[str, Any] = {}
        self.n = 0
        self._start = self._last = 0.0
        self._next_plain = 0

    def set(self, **postfix: Any) -> None:
        """Update the key=value pairs shown after the bar."""
        self.postfix.update(postfix)

    def _line(self) -> str:
        """Render the current state as one line."""
        elapsed = time.perf_counter() - self._start
        rate = self.n / elapsed if elapsed > 0 else 0.0
        if self.total:
            filled = min(self.width, self.width * self.n // self.total)
            bar = "[" + "#" * filled + "." * (self.width - filled) + "] "
            count = f"{self.n}/{self.total}"
        else:
            bar, count = "", str(self.n)
        post = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in self.postfix.items())
        head = f"{self.desc}: " if self.desc else ""
        return f"{head}{bar}{count} {elapsed:.1f}s {rate:.1f}it/s {post}".rstrip()

    def _plain_step(self) -> int:
        """Items between plain (non-TTY) lines: ~10% of the total."""
        return max(1, self.total // 10) if self.total else 1000

    def _report(self, final: bool = False) -> None:
        """Redraw (TTY) or print a periodic line (non-TTY) when it is due."""
        now = time.perf_counter()
        if self.tty:
            if final or now - self._last >= self.min_interval:
                # Trailing spaces erase leftovers of a longer previous line.
                self.file.write("\r" + self._line().ljust(79) + ("\n" if final else ""))
                self.file.flush()
                self._last = now
        elif final or self.n >= self._next_plain:
            self.file.write(self._line() + "\n")
            self.file.flush()
            self._next_plain = self.n + self._plain_step()

    def __iter__(self) -> Iterator[Any]:
        """Yield the wrapped items, updating the display after each one."""
        self._start = self._last = time.perf_counter()
        self._next_plain = self._plain_step()  # no plain line at 0 items
        try:
            for item in self.iterable:
                yield item
                self.n += 1
                if self.n != self.total:  # the last item is reported by the final line
                    self._report()
        finally:
            self._report(final=True)

    def __len__(self) -> int:
        """The total, so ``len(Progress(...))`` works like the wrapped sequence."""
        if self.total is None:
            raise TypeError("Progress over an iterable of unknown length has no len()")
        return self.total
