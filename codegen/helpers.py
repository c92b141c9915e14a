"""Small utilities shared by every layer: environment variables, DEBUG, math on shapes.

Stdlib only. Every environment variable lazyten reads goes through `getenv`, so the
README's list of variables can be checked against this one helper.
"""
from __future__ import annotations
import functools
import hashlib
import math
import os
import pathlib
import sys
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, TypeVar, overload

T = TypeVar("T")
Setting = TypeVar("Setting", int, float, str)  # the types a setting converts to


# settings set by `with Context(...)`: per thread and per asyncio task, like the switches
_OVERRIDES: ContextVar[Mapping[str, Any]] = ContextVar("lazyten_settings",
                                                      default=MappingProxyType({}))


def allow_recursion(levels: int) -> None:
    """Let Python recurse `levels` deep plus a margin for the caller. The kernel builder and
    the compiler's passes recurse about three frames per level of a kernel's expression,
    which the scheduler bounds (rule 6); the limit is only ever raised, once, at import."""
    need = 4 * levels + 2000
    if sys.getrecursionlimit() < need:
        sys.setrecursionlimit(need)


@overload
def getenv(key: str) -> int: ...
@overload
def getenv(key: str, default: Setting) -> Setting: ...


def getenv(key: str, default: Any = 0) -> Any:
    """A setting: a `Context` override, else the environment variable, converted to the
    type of `default`."""
    overrides = _OVERRIDES.get()
    if overrides and key in overrides:
        return type(default)(overrides[key])
    return _environ(key, default)


@functools.lru_cache(maxsize=None)
def _environ(key: str, default: Setting) -> Setting:
    value = os.environ.get(key)
    if value is None:
        return default
    return type(default)(value)


_READ_AT_EACH_USE: list[dict[int, Any]] = []  # the memos of `settings_memo`: cleared with getenv's


def _clear_settings() -> None:
    _environ.cache_clear()
    for memo in _READ_AT_EACH_USE:
        memo.clear()


getenv.cache_clear = _clear_settings  # type: ignore[attr-defined]  # tests re-read


def settings_memo(read: Callable[[], T]) -> Callable[[], T]:
    """`read` (a function of settings alone) computed once per set of Context overrides
    (each `with Context(...)` makes a new, never changed mapping, kept here so its
    identity is not reused) and environment (until getenv.cache_clear()): what the
    engine reads on every realize costs a ContextVar read and a dict lookup."""
    memo: dict[int, tuple[Mapping[str, Any], T]] = {}
    _READ_AT_EACH_USE.append(memo)

    @functools.wraps(read)
    def cached() -> T:
        overrides = _OVERRIDES.get()
        found = memo.get(id(overrides))
        if found is None or found[0] is not overrides:
            if len(memo) > 64:  # (contexts come and go: keep the memo small)
                memo.clear()
            found = memo[id(overrides)] = (overrides, read())
        return found[1]
    return cached


class Context:
    """`with Context(DEBUG=4):` sets settings for the block, in this thread (or asyncio
    task) only, over the environment; blocks nest. Settings read at each use (DEBUG,
    FUZZ_*, COMPILE_*) follow it; ones already baked into a compiled kernel do not."""

    def __init__(self, **settings: Any):
        self.settings = settings

    def __enter__(self) -> Context:
        self._token = _OVERRIDES.set({**_OVERRIDES.get(), **self.settings})
        return self

    def __exit__(self, *exc: object) -> None:
        _OVERRIDES.reset(self._token)


@functools.lru_cache(maxsize=None)
def codegen_version() -> str:
    """A hash of codegen's own source: cached programs lowered by other code are stale."""
    digest = hashlib.sha256()
    for path in sorted(pathlib.Path(__file__).parent.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@settings_memo
def debug_level() -> int:
    """The DEBUG level, read at each use (so `with Context(DEBUG=2):` scopes it)."""
    return getenv("DEBUG", 0)


def prod(xs: Iterable[int]) -> int:
    """Product of integers (1 for an empty sequence)."""
    return math.prod(xs)


def dedup(xs: Iterable[T]) -> list[T]:
    """Unique items in first-seen order."""
    return list(dict.fromkeys(xs))


def argfix(*x: Any) -> tuple[Any, ...]:
    """Accept f(1, 2) and f((1, 2)) alike."""
    if x and isinstance(x[0], (tuple, list)):
        if len(x) != 1:
            raise ValueError(f"bad arguments {x}: pass either a sequence or separate ints")
        return tuple(x[0])
    return tuple(x)


def make_pair(x: int | tuple[int, ...], n: int = 2) -> tuple[int, ...]:
    """Broadcast an int to an n-tuple; pass tuples through."""
    return (x,) * n if isinstance(x, int) else tuple(x)


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
    """One level of flattening."""
    return [x for xs in xss for x in xs]

