"""MNIST for the training example (examples/lenet_mnist.py): IDX files, the offline sample,
the download. Not part of the lazyten package: only numpy and the standard library are used.

Contract:
  * ``read_idx(path)`` parses one IDX file (gzip-compressed or raw) into a numpy array with the
    file's shape and dtype; a bad magic number, an unknown dtype code or a size mismatch raises
    ``ValueError`` naming the file.
  * ``mnist(data_dir, download, cache_dir)`` returns ``(X_train, Y_train, X_test, Y_test, source)``
    with X as uint8 ``(N, 28, 28)``, Y as uint8 ``(N,)`` and ``source`` a human-readable sentence
    saying where the data came from. Sources are tried in order: ``data_dir``, ``$MNIST_DIR``,
    the cache dir, a download from public mirrors (skipped when ``download`` is false or
    ``OFFLINE=1``), and finally the small sample shipped in ``examples/data/mnist_sample``.
  * ``mnist_sample()`` returns the shipped sample in the same 5-tuple form.
The sample is tracked by git, so a fresh clone trains offline; tools/make_mnist_sample.py
rebuilds it from the full set.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

__all__ = ["read_idx", "write_idx", "mnist", "mnist_sample", "MNIST_FILES", "MIRRORS"]

# Canonical file names, in the order of the returned tuple.
MNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
MIRRORS = (
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
)
SAMPLE_DIR = Path(__file__).resolve().parent / "data" / "mnist_sample"
DOWNLOAD_TIMEOUT_S = 10.0

_GZIP_MAGIC = b"\x1f\x8b"
# IDX dtype codes; multi-byte types are big-endian on disk.
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def _read_bytes(path: Path) -> bytes:
    """Return the (decompressed, if gzip) contents of ``path``."""
    with open(path, "rb") as f:
        raw = f.read()
    if path.name.endswith(".gz") or raw[:2] == _GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as e:  # truncated or corrupt gzip stream
            raise ValueError(f"{path}: corrupt or truncated gzip data ({e})") from e
    return raw


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Parse an IDX file (optionally gzip-compressed) into a native-endian numpy array."""
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4:
        raise ValueError(f"{path}: too short for an IDX header ({len(data)} bytes)")
    if data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: bad IDX magic {data[:4].hex()} (must start with 0000)")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{path}: unknown IDX dtype code 0x{code:02x}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: truncated IDX header (need {header} bytes, got {len(data)})")
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    actual = len(data) - header
    if actual != expected:
        what = "truncated" if actual < expected else "trailing bytes in"
        raise ValueError(
            f"{path}: {what} IDX data (shape {shape} needs {expected} bytes, got {actual})"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    # Convert to native byte order and own the memory (frombuffer views are read-only).
    return arr.astype(dtype.newbyteorder("="), copy=True)


def write_idx(path: str | os.PathLike, arr: np.ndarray, compresslevel: int = 9) -> None:
    """Write ``arr`` as an IDX file, gzip-compressed when ``path`` ends in ``.gz``."""
    path = Path(path)
    arr = np.asarray(arr)
    encodings = [(code, dt) for code, dt in _IDX_DTYPES.items()
                 if dt.kind == arr.dtype.kind and dt.itemsize == arr.dtype.itemsize]
    if not encodings:
        raise ValueError(f"{path}: dtype {arr.dtype} has no IDX encoding")
    code, dt = encodings[0]
    header = bytes([0, 0, code, arr.ndim]) + np.asarray(arr.shape, dtype=">u4").tobytes()
    payload = header + np.ascontiguousarray(arr, dtype=dt).tobytes()
    if path.name.endswith(".gz"):
        # mtime=0 keeps the output byte-for-byte reproducible.
        payload = gzip.compress(payload, compresslevel=compresslevel, mtime=0)
    path.write_bytes(payload)


def _find_file(directory: Path, name: str) -> Path | None:
    """Return ``directory/name`` or its uncompressed twin, whichever exists."""
    for candidate in (name, name.removesuffix(".gz")):
        p = directory / candidate
        if p.is_file():
            return p
    return None


def _missing_files(directory: Path) -> list[str]:
    """Names of the four MNIST files absent from ``directory`` (gz or not)."""
    return [n for n in MNIST_FILES if _find_file(directory, n) is None]


def _load_dir(directory: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Load and validate the four MNIST arrays from ``directory``."""
    missing = _missing_files(directory)
    if missing:
        raise FileNotFoundError(f"{directory}: missing MNIST file {missing[0]} (gz or raw)")
    arrays = [read_idx(_find_file(directory, n)) for n in MNIST_FILES]  # type: ignore[arg-type]
    x_tr, y_tr, x_te, y_te = arrays
    for name, x, y in (("train", x_tr, y_tr), ("test", x_te, y_te)):
        if x.ndim != 3 or x.shape[1:] != (28, 28) or x.dtype != np.uint8:
            raise ValueError(f"{directory}: {name} images have shape {x.shape}, dtype {x.dtype}")
        if y.shape != (x.shape[0],) or y.dtype != np.uint8:
            raise ValueError(f"{directory}: {name} labels shape {y.shape} != ({x.shape[0]},)")
    return x_tr, y_tr, x_te, y_te


def _default_cache_dir() -> Path:
    """``$LAZYTEN_CACHE/mnist``, else ``~/.cache/lazyten/mnist``."""
    root = os.environ.get("LAZYTEN_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "lazyten"
    return base / "mnist"


def _offline() -> bool:
    """True when the ``OFFLINE`` environment variable asks to skip the network."""
    return os.environ.get("OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _download(cache: Path) -> str:
    """Fetch the missing MNIST files into ``cache``; return the mirror used. Raises OSError."""
    cache.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    for mirror in MIRRORS:
        try:
            for name in MNIST_FILES:
                if _find_file(cache, name) is not None:
                    continue
                with urllib.request.urlopen(mirror + name, timeout=DOWNLOAD_TIMEOUT_S) as r:
                    blob = r.read()
                # Temp file in the same dir + rename: readers never see a half-written file.
                fd, tmp = tempfile.mkstemp(dir=cache, prefix=name, suffix=".part")
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(blob)
                    read_idx(tmp)  # reject HTML error pages and truncated bodies
                    os.replace(tmp, cache / name)
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
            return mirror
        except (OSError, ValueError) as e:  # URLError/HTTPError/timeouts are OSErrors
            errors.append(f"{mirror}: {e}")
    raise OSError("all MNIST mirrors failed: " + "; ".join(errors))


def _describe(x_tr: np.ndarray, x_te: np.ndarray, where: str) -> str:
    """A one-line description of a loaded dataset."""
    return f"{where} ({len(x_tr)} train / {len(x_te)} test images)"


def _from_dir(
    directory: Path, prefix: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Load a directory source and describe it."""
    x_tr, y_tr, x_te, y_te = _load_dir(directory)
    return x_tr, y_tr, x_te, y_te, _describe(x_tr, x_te, f"{prefix} {directory}")


def mnist_sample() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Load the small MNIST subset shipped in ``examples/data/mnist_sample``."""
    x_tr, y_tr, x_te, y_te = _load_dir(SAMPLE_DIR)
    return x_tr, y_tr, x_te, y_te, _describe(x_tr, x_te, "bundled sample")


def mnist(
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Return ``(X_train, Y_train, X_test, Y_test, source)``, trying each source in turn."""
    if data_dir is not None:
        return _from_dir(Path(data_dir).expanduser(), "MNIST from")
    env_dir = os.environ.get("MNIST_DIR")
    if env_dir:
        # An explicitly configured directory that is incomplete is a user error: raise.
        return _from_dir(Path(env_dir).expanduser(), "MNIST from $MNIST_DIR =")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else _default_cache_dir()
    if cache.is_dir() and not _missing_files(cache):
        return _from_dir(cache, "MNIST from cache")
    if not download:
        reason = "download disabled"
    elif _offline():
        reason = "OFFLINE=1 set"
    else:
        try:
            mirror = _download(cache)
            return _from_dir(cache, f"MNIST downloaded from {mirror} into")
        except (OSError, ValueError):
            reason = "no network"
    x_tr, y_tr, x_te, y_te, _ = mnist_sample()
    source = (
        f"{_describe(x_tr, x_te, 'bundled sample')}: {reason} and no MNIST files found; "
        "pass --data DIR or set MNIST_DIR for the full set"
    )
    return x_tr, y_tr, x_te, y_te, source
