"""The disk cache is untrusted input: damaged, planted or foreign entries are never loaded
or executed, a directory others can write is not used, and an unusable directory means
running without the cache, never a failure."""
import os
import pathlib
import pickle
import stat
import subprocess
import sys

import numpy as np
import pytest

from codegen.helpers import getenv
from runtimes.disk_cache import MAGIC, DiskCache

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAM = ("import numpy as np\nfrom lazyten import Tensor\n"
           "x = Tensor(np.arange(8, dtype=np.float32))\n"
           "print(((x * 3 + 1).exp2().sum() + x.max()).item())\n")
EXPECTED = float((np.exp2(np.arange(8) * 3.0 + 1)).sum() + 7)


def run_program(cache: pathlib.Path, debug: int = 0) -> subprocess.CompletedProcess:
    env = dict(os.environ, CACHEDIR=str(cache), DEBUG=str(debug), COMPILE_WORKERS="0")
    env.pop("DISABLE_CACHE", None)
    return subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def check_result(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-3000:]}"
    assert float(done.stdout.split()[-1]) == pytest.approx(EXPECTED, rel=1e-6), done.stdout


def entries(cache: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file())


# ---- the entry format ----
@pytest.fixture
def disk(tmp_path):
    return DiskCache(tmp_path / "cache")


def test_round_trip_and_private_modes(disk):
    old = os.umask(0o002)  # a umask that would make directories group-writable
    try:
        disk.put("kernels", "key one", {"name": "k"}, b"\x7fELF binary")
    finally:
        os.umask(old)
    assert disk.get("kernels", "key one") == ({"name": "k"}, b"\x7fELF binary")
    assert disk.get("kernels", "another key") is None
    for path in [disk.root, *disk.root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} has mode {mode:o}; the cache is private"
    (path,) = entries(disk.root)
    assert path.read_bytes().startswith(MAGIC), "entries are plain data, not pickles"


def _flip(data: bytes) -> bytes:
    i = len(data) - 3
    return data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1:]


CORRUPTIONS = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:-5]),
    "empty": lambda p: p.write_bytes(b""),
    "random": lambda p: p.write_bytes(np.random.default_rng(0).bytes(300)),
    "flipped bit": lambda p: p.write_bytes(_flip(p.read_bytes())),
    "header bit": lambda p: p.write_bytes(p.read_bytes().replace(b'"kernels"', b'"kernelt"')),
    "huge header length": lambda p: p.write_bytes(MAGIC + b"99999999999\n{}"),
    "deep json": lambda p: p.write_bytes(MAGIC + b"200000\n" + b"[" * 100000 + b"]" * 100000),
    "pickle": lambda p: p.write_bytes(pickle.dumps(({"name": "k"}, b"x"))),
    "directory": lambda p: (p.unlink(), p.mkdir(), (p / "inner").write_bytes(b"x")),
    "symlink": lambda p: (p.unlink(), p.symlink_to("/etc/hostname")),
    "group writable": lambda p: p.chmod(0o664),
    "foreign owner": lambda p: os.chown(p, 12345, 12345),
}


@pytest.mark.parametrize("corrupt", sorted(CORRUPTIONS))
def test_a_damaged_entry_is_ignored_and_removed(disk, corrupt):
    if corrupt == "foreign owner" and os.getuid() != 0:
        pytest.skip("simulating another user's file needs root (chown)")
    disk.put("kernels", "key", {"name": "k"}, b"payload bytes")
    (path,) = entries(disk.root)
    CORRUPTIONS[corrupt](path)
    assert disk.get("kernels", "key") is None
    assert not path.exists() or path.is_symlink() is False and not path.is_dir(), \
        "a rejected entry is removed"
    disk.put("kernels", "key", {"name": "k"}, b"payload bytes")  # and rebuilt
    assert disk.get("kernels", "key") == ({"name": "k"}, b"payload bytes")


def test_an_entry_stored_under_another_key_is_rejected(disk):
    disk.put("kernels", "key a", {}, b"binary of a")
    disk.put("kernels", "key b", {}, b"binary of b")
    path_a, path_b = disk._path("kernels", "key a"), disk._path("kernels", "key b")
    data_a = path_a.read_bytes()
    path_a.write_bytes(path_b.read_bytes())
    path_b.write_bytes(data_a)
    assert disk.get("kernels", "key a") is None and disk.get("kernels", "key b") is None


def test_a_directory_others_can_write_is_not_used(tmp_path, capsys):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    disk = DiskCache(root)
    disk.put("kernels", "key", {}, b"x")
    assert disk.get("kernels", "key") is None and not list(root.iterdir())
    assert "writable by other users" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["a file", "read-only"])
def test_an_unusable_directory_means_no_cache_and_one_warning(tmp_path, capsys, kind):
    root = tmp_path / "cache"
    if kind == "a file":
        root.write_bytes(b"not a directory")
    else:
        root.mkdir(mode=0o500)
        if os.getuid() == 0:
            pytest.skip("root can write a read-only directory")
    disk = DiskCache(root)
    for _ in range(3):
        disk.put("kernels", "key", {}, b"x")
        assert disk.get("kernels", "key") is None
    err = capsys.readouterr().err
    assert err.count("running without the disk cache") == 1, err


@pytest.fixture
def one_megabyte_bound(monkeypatch):
    monkeypatch.setenv("CACHE_MAX_MB", "1")
    getenv.cache_clear()  # environment variables are read once
    yield
    monkeypatch.delenv("CACHE_MAX_MB")
    getenv.cache_clear()


def test_the_cache_stays_under_its_size_bound(tmp_path, one_megabyte_bound):
    disk = DiskCache(tmp_path / "cache")
    for i in range(40):
        disk.put("kernels", f"key {i}", {}, bytes(64 << 10))
    total = sum(p.stat().st_size for p in entries(disk.root))
    assert total <= 1 << 20, f"{total} bytes in a 1 MB cache"
    assert disk.get("kernels", "key 39") is not None, "the newest entry is kept"


# ---- whole processes ----
def test_every_entry_damaged_still_computes_the_right_answer(tmp_path):
    cache = tmp_path / "cache"
    check_result(run_program(cache))  # fill the cache
    paths = entries(cache)
    assert len(paths) >= 4, paths
    kinds = sorted(CORRUPTIONS)
    for i, path in enumerate(paths):
        kind = kinds[i % len(kinds)]
        if kind == "foreign owner" and os.getuid() != 0:
            kind = "truncated"
        CORRUPTIONS[kind](path)
    done = run_program(cache, debug=1)
    check_result(done)
    assert "ignored the cache entry" in done.stderr
    check_result(run_program(cache))  # the rebuilt cache works


def test_planted_pickle_and_object_file_are_never_executed(tmp_path):
    cache = tmp_path / "cache"
    check_result(run_program(cache))
    marker = tmp_path / "hijacked"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    planted = pickle.dumps(Payload())
    for path in entries(cache):
        if "programs" in path.parts:
            path.write_bytes(planted)
        else:  # a raw object file in the place of a kernel, the old format
            path.write_bytes(_object_file_calling_system(f"touch {marker}"))
    check_result(run_program(cache))
    assert not marker.exists(), "a planted cache entry ran code"


def _object_file_calling_system(command: str) -> bytes:
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    text = command.encode() + b"\0"
    ir = (f'@cmd = private constant [{len(text)} x i8] c"{command}\\00"\n'
          'declare i32 @system(ptr)\n'
          'define void @run() {\n  %r = call i32 @system(ptr @cmd)\n  ret void\n}\n')
    module = llvm.parse_assembly(ir)
    return llvm.Target.from_default_triple().create_target_machine().emit_object(module)
