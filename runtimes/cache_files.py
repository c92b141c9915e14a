"""The files behind the disk cache (runtimes/disk_cache.py): who may be trusted, private
directories, and the entries on disk with their ages and sizes."""
from __future__ import annotations
import os
import pathlib
import stat


def unsafe(info: os.stat_result, what: str, directory: bool = False) -> str | None:
    """Why a file or directory may not be trusted (not a regular file or directory, owned
    by another user, writable by others), or None."""
    if directory and not stat.S_ISDIR(info.st_mode):
        return f"the {what} is not a directory"
    if not directory and not stat.S_ISREG(info.st_mode):
        return f"the {what} is not a regular file"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"the {what} belongs to another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"the {what} is writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def trusted_dir(path: pathlib.Path) -> bool:
    try:
        return unsafe(os.lstat(path), "directory", directory=True) is None
    except OSError:
        return False


def entries(root: pathlib.Path, kinds: tuple[str, ...]) -> list[tuple[float, pathlib.Path, int]]:
    """(mtime, path, size) of every regular file under root/<kind>/<2 hex>/."""
    found = []
    for kind in kinds:
        for sub in _scandir(root / kind):
            for entry in _scandir(pathlib.Path(sub.path)):
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    found.append((info.st_mtime, pathlib.Path(entry.path), info.st_size))
    return found


def makedirs_private(path: pathlib.Path) -> None:
    """Create `path` and each missing parent private to this user (0700; mkdir's own
    `parents=True` would give the parents the umask's mode)."""
    missing = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)


def _scandir(path: pathlib.Path) -> list:
    try:
        with os.scandir(path) as it:
            return [e for e in it if e.is_dir(follow_symlinks=False) or e.is_file(follow_symlinks=False)]
    except OSError:
        return []
