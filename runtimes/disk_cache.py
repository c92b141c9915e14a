"""The disk cache: compiled kernels and lowered programs, kept as verified data.

Whatever is read back from disk is untrusted input. Nothing is unpickled or executed
from it: an entry is a plain, versioned file, and it is checked before its payload is
handed to any loader.

An entry is a plain file of verified data (its format: runtimes/cache_entry.py). `get`
returns (metadata, payload) only when the file is an entry for the key asked for; any
other file (truncated, flipped bits, an entry stored under another key, a directory, a
symlink, a file of another user or writable by others) is ignored, removed where
possible, rebuilt by the caller, and reported once under DEBUG>=1.

Trust: the cache directory must belong to this user and be writable by nobody else; it
is created 0700, entries 0600. A directory that fails that check is not used (one
warning); neither is one that cannot be written (read-only, not a directory, disk full):
lazyten then runs without the disk cache. Writes are atomic (a temporary file and a
rename), so processes can share one cache. The cache is bounded (`CACHE_MAX_MB`): when
it grows past the bound, the least recently used entries are removed.
"""
from __future__ import annotations
import os
import pathlib
import shutil
import sys
import tempfile
import threading

from codegen.helpers import debug_level, getenv
from runtimes.cache_entry import MAGIC, MAX_ENTRY, decode, encode, sha256
from runtimes.cache_files import entries, makedirs_private, trusted_dir, unsafe

__all__ = ["MAGIC", "DiskCache"]
_KINDS = ("kernels", "programs")


class DiskCache:
    """Entries under `root/<kind>/<2 hex>/<digest>`; see the module docstring."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.usable: bool | None = None  # decided on first use
        self.size: int | None = None     # bytes in entries, counted on the first write
        self.said: set[str] = set()
        self.lock = threading.Lock()

    # ---- reading ----
    def get(self, kind: str, key: str) -> tuple[dict, bytes] | None:
        """(metadata, payload) stored for `key`, or None (absent or rejected)."""
        if not self._ready():
            return None
        path = self._path(kind, key)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            self._reject(path, f"cannot stat it ({e.strerror})")
            return None
        problem = unsafe(info, "entry")
        if problem is None and not trusted_dir(path.parent):
            problem = "its directory is writable by other users or owned by another user"
        if problem is not None:
            self._reject(path, problem)
            return None
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_ENTRY + 1)
        except OSError as e:
            self._reject(path, f"cannot read it ({e.strerror})")
            return None
        try:
            meta, payload = decode(data, kind, key)
        except ValueError as e:
            self._reject(path, str(e))
            return None
        try:
            os.utime(path)  # recently used: evicted last
        except OSError:
            pass
        return meta, payload

    def drop(self, kind: str, key: str, reason: str) -> None:
        """Remove an entry whose payload the caller found unusable."""
        self._reject(self._path(kind, key), reason)

    # ---- writing ----
    def put(self, kind: str, key: str, meta: dict, payload: bytes) -> None:
        """Store an entry atomically; a failure turns the disk cache off (one warning)."""
        if not self._ready():
            return
        data = encode(kind, key, meta, payload)
        path = self._path(kind, key)
        try:
            makedirs_private(path.parent)
            with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
                tmp.write(data)  # NamedTemporaryFile creates the file 0600
            os.replace(tmp.name, path)
        except OSError as e:
            self._disable(f"cannot write to it ({e.strerror or e})")
            return
        self._account(len(data))

    # ---- the directory ----
    def _ready(self) -> bool:
        if self.usable is None:
            with self.lock:
                if self.usable is None:
                    self.usable = self._check_root()
        return self.usable

    def _check_root(self) -> bool:
        try:
            makedirs_private(self.root)
            info = os.stat(self.root)
        except OSError as e:
            return self._warn(f"cannot create or use it ({e.strerror or e})")
        problem = unsafe(info, "directory", directory=True)
        if problem is not None:
            return self._warn(problem)
        if not os.access(self.root, os.W_OK | os.X_OK):
            return self._warn("it is not writable")
        return True

    def _path(self, kind: str, key: str) -> pathlib.Path:
        digest = sha256(f"{kind}\n{key}".encode())
        return self.root / kind / digest[:2] / digest

    # ---- size bound ----
    def _account(self, added: int) -> None:
        limit = getenv("CACHE_MAX_MB", 1024) << 20
        with self.lock:
            if self.size is None:
                self.size = sum(size for _, _, size in entries(self.root, _KINDS))
            else:
                self.size += added
            if self.size <= limit:
                return
            # least recently used first, down to 3/4 of the bound
            for _, path, size in sorted(entries(self.root, _KINDS)):
                if self.size <= limit * 3 // 4:
                    break
                try:
                    os.unlink(path)
                    self.size -= size
                except OSError:
                    pass

    # ---- reporting ----
    def _reject(self, path: pathlib.Path, reason: str) -> None:
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:
            pass
        if debug_level() >= 1:
            self._say(f"lazyten: ignored the cache entry {path}: {reason}; rebuilding it")

    def _warn(self, reason: str) -> bool:
        self._say(f"lazyten: running without the disk cache: {self.root}: {reason}")
        return False

    def _disable(self, reason: str) -> None:
        self.usable = False
        self._warn(reason)

    def _say(self, line: str) -> None:
        if line not in self.said:
            self.said.add(line)
            print(line, file=sys.stderr)
