"""Tests for examples/mnist.py, the training example's data (IDX parsing, MNIST source
selection, the offline sample). It is not part of lazyten; the script finds it because its
own directory is on sys.path, and so does this test."""

from __future__ import annotations

import gzip
import importlib
import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
mnist_data = importlib.import_module("mnist")
MNIST_FILES, mnist, mnist_sample = mnist_data.MNIST_FILES, mnist_data.mnist, mnist_data.mnist_sample
read_idx, write_idx = mnist_data.read_idx, mnist_data.write_idx

REAL_MNIST = Path(__file__).parents[2].parent / "shared/datasets/mnist"

IDX_CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C,
             np.float32: 0x0D, np.float64: 0x0E}


def _raw_idx(arr: np.ndarray, code: int) -> bytes:
    """Encode ``arr`` as IDX by hand, independently of ``write_idx``."""
    header = bytes([0, 0, code, arr.ndim]) + b"".join(d.to_bytes(4, "big") for d in arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


@pytest.mark.parametrize("dtype", list(IDX_CODES))
@pytest.mark.parametrize("shape", [(0,), (7,), (3, 5), (2, 3, 4), (2, 1, 3, 2)])
@pytest.mark.parametrize("compressed", [False, True])
def test_read_idx_roundtrip(tmp_path, dtype, shape, compressed):
    """Hand-written IDX files of every dtype/ndim read back exactly."""
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal(shape) * 100).astype(dtype)
    blob = _raw_idx(arr, IDX_CODES[dtype])
    path = tmp_path / ("a.idx.gz" if compressed else "a.idx")
    path.write_bytes(gzip.compress(blob) if compressed else blob)
    out = read_idx(path)
    assert out.shape == shape
    assert out.dtype == np.dtype(dtype)
    assert out.dtype.isnative
    np.testing.assert_array_equal(out, arr)
    out_str = read_idx(str(path))  # str paths work too, and the result is writable
    out_str[...] = 0


def test_read_idx_gzip_detected_by_magic(tmp_path):
    """A gzip file without a .gz suffix is recognised by its magic bytes."""
    arr = np.arange(12, dtype=np.uint8).reshape(3, 4)
    path = tmp_path / "noext"
    path.write_bytes(gzip.compress(_raw_idx(arr, 0x08)))
    np.testing.assert_array_equal(read_idx(path), arr)


@pytest.mark.parametrize("dtype", list(IDX_CODES))
def test_write_idx_roundtrip(tmp_path, dtype):
    """write_idx output matches the hand encoder and reads back."""
    arr = np.arange(24).reshape(2, 3, 4).astype(dtype)
    write_idx(tmp_path / "x.idx", arr)
    assert (tmp_path / "x.idx").read_bytes() == _raw_idx(arr, IDX_CODES[dtype])
    write_idx(tmp_path / "x.idx.gz", arr)
    np.testing.assert_array_equal(read_idx(tmp_path / "x.idx.gz"), arr)


@pytest.mark.parametrize("compressed", [False, True])
def test_read_idx_truncated(tmp_path, compressed):
    """Missing payload bytes raise ValueError naming the file."""
    blob = _raw_idx(np.arange(100, dtype=np.int32), 0x0C)[:-3]
    path = tmp_path / ("trunc.gz" if compressed else "trunc")
    path.write_bytes(gzip.compress(blob) if compressed else blob)
    with pytest.raises(ValueError, match="trunc"):
        read_idx(path)


def test_read_idx_truncated_gzip_stream(tmp_path):
    """A gzip stream cut short raises ValueError, not EOFError."""
    blob = gzip.compress(_raw_idx(np.arange(1000, dtype=np.int32), 0x0C))
    path = tmp_path / "cut.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ValueError, match="cut.gz"):
        read_idx(path)


@pytest.mark.parametrize("blob, what", [
    (b"\x01\x00\x08\x01" + (3).to_bytes(4, "big") + b"abc", "magic"),
    (b"\x00\x00\x07\x01" + (3).to_bytes(4, "big") + b"abc", "dtype"),
    (b"\x00\x00", "short"),
    (b"\x00\x00\x08\x03" + (3).to_bytes(4, "big"), "header"),
    (b"\x00\x00\x08\x01" + (3).to_bytes(4, "big") + b"abcd", "trailing"),
])
def test_read_idx_bad_header(tmp_path, blob, what):
    """Bad magic, unknown dtype, short header and extra bytes all raise ValueError."""
    path = tmp_path / "bad.idx"
    path.write_bytes(blob)
    with pytest.raises(ValueError, match=r"bad\.idx.*" + what):
        read_idx(path)


def _check_mnist_arrays(x_tr, y_tr, x_te, y_te):
    """Shared shape/dtype/label checks for any MNIST source."""
    for x, y in ((x_tr, y_tr), (x_te, y_te)):
        assert x.dtype == np.uint8 and y.dtype == np.uint8
        assert x.ndim == 3 and x.shape[1:] == (28, 28)
        assert y.shape == (x.shape[0],)
        assert y.max() <= 9
        assert set(np.unique(y).tolist()) == set(range(10))
        assert x.max() > 200  # real pixel data, not zeros


def test_sample():
    """The shipped sample loads with MNIST shapes, dtypes and all ten classes."""
    x_tr, y_tr, x_te, y_te, source = mnist_sample()
    _check_mnist_arrays(x_tr, y_tr, x_te, y_te)
    assert 1000 <= len(x_tr) < 60000 and 100 <= len(x_te) < 10000
    assert "sample" in source
    total = sum((mnist_data.SAMPLE_DIR / n).stat().st_size for n in MNIST_FILES)
    assert total < 1_800_000


@pytest.mark.skipif(not REAL_MNIST.is_dir(), reason=f"full MNIST not found at {REAL_MNIST}")
def test_mnist_data_dir_real():
    """mnist(data_dir=...) loads the full 60k/10k set."""
    x_tr, y_tr, x_te, y_te, source = mnist(data_dir=REAL_MNIST, download=False)
    assert x_tr.shape == (60000, 28, 28) and x_te.shape == (10000, 28, 28)
    _check_mnist_arrays(x_tr, y_tr, x_te, y_te)
    assert str(REAL_MNIST) in source and "60000 train" in source
    # The sample is a prefix of the real data.
    s_tr, s_ytr, s_te, s_yte, _ = mnist_sample()
    np.testing.assert_array_equal(s_tr, x_tr[: len(s_tr)])
    np.testing.assert_array_equal(s_yte, y_te[: len(s_yte)])


def test_mnist_data_dir_uncompressed(tmp_path, monkeypatch):
    """Uncompressed files are accepted, and data_dir wins over MNIST_DIR."""
    for name in MNIST_FILES:
        raw = gzip.decompress((mnist_data.SAMPLE_DIR / name).read_bytes())
        (tmp_path / name.removesuffix(".gz")).write_bytes(raw)
    monkeypatch.setenv("MNIST_DIR", str(tmp_path / "does-not-exist"))
    x_tr, y_tr, x_te, y_te, source = mnist(data_dir=tmp_path)
    _check_mnist_arrays(x_tr, y_tr, x_te, y_te)
    assert str(tmp_path) in source


def test_mnist_data_dir_incomplete(tmp_path):
    """A given but incomplete directory raises FileNotFoundError naming the missing file."""
    for name in MNIST_FILES[:3]:
        shutil.copy(mnist_data.SAMPLE_DIR / name, tmp_path / name)
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte"):
        mnist(data_dir=tmp_path)


def test_mnist_env_dir(tmp_path, monkeypatch):
    """MNIST_DIR is used when no data_dir is given."""
    shutil.copytree(mnist_data.SAMPLE_DIR, tmp_path / "m")
    monkeypatch.setenv("MNIST_DIR", str(tmp_path / "m"))
    *_, source = mnist(cache_dir=tmp_path / "cache")
    assert "MNIST_DIR" in source


def test_mnist_cache_dir(tmp_path, monkeypatch):
    """Files already in the cache are used without touching the network."""
    monkeypatch.delenv("MNIST_DIR", raising=False)
    monkeypatch.setattr(mnist_data, "_download", _no_network)
    shutil.copytree(mnist_data.SAMPLE_DIR, tmp_path / "cache")
    *_, source = mnist(cache_dir=tmp_path / "cache")
    assert "cache" in source and "sample" not in source
    monkeypatch.setenv("LAZYTEN_CACHE", str(tmp_path))  # default cache is $LAZYTEN_CACHE/mnist
    shutil.copytree(mnist_data.SAMPLE_DIR, tmp_path / "mnist")
    *_, source = mnist()
    assert str(tmp_path / "mnist") in source


def _no_network(cache):
    """Stand-in for _download that must not be reached."""
    raise AssertionError("network should not be used")


def test_mnist_offline_fallback(tmp_path, monkeypatch):
    """OFFLINE=1 with no MNIST_DIR and an empty cache falls back to the sample, and says so."""
    monkeypatch.setenv("OFFLINE", "1")
    monkeypatch.delenv("MNIST_DIR", raising=False)
    monkeypatch.setattr(mnist_data, "_download", _no_network)
    x_tr, y_tr, x_te, y_te, source = mnist(cache_dir=tmp_path)
    _check_mnist_arrays(x_tr, y_tr, x_te, y_te)
    assert len(x_tr) == len(mnist_sample()[0])
    assert "sample" in source and "OFFLINE" in source and "MNIST_DIR" in source
    assert f"{len(x_tr)} train / {len(x_te)} test" in source


def test_mnist_network_failure_fallback(tmp_path, monkeypatch):
    """When every mirror fails the sample is returned with a 'no network' description."""
    monkeypatch.delenv("OFFLINE", raising=False)
    monkeypatch.delenv("MNIST_DIR", raising=False)

    def refuse(url, timeout=None):
        raise OSError(f"refused {url}")

    monkeypatch.setattr(mnist_data.urllib.request, "urlopen", refuse)
    *_, source = mnist(cache_dir=tmp_path)
    assert "no network" in source and "sample" in source
    assert not list(tmp_path.glob("*.part"))  # no half-written files left behind


def test_mnist_download(tmp_path, monkeypatch):
    """A (faked) download lands atomically in the cache and skips a bad first mirror."""
    monkeypatch.delenv("OFFLINE", raising=False)
    monkeypatch.delenv("MNIST_DIR", raising=False)
    urls: list[str] = []

    def fake_urlopen(url, timeout=None):
        urls.append(url)
        assert timeout is not None and timeout <= 30
        if url.startswith(mnist_data.MIRRORS[0]):
            return io.BytesIO(b"<html>not found</html>")  # not IDX: must be rejected
        return io.BytesIO((mnist_data.SAMPLE_DIR / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(mnist_data.urllib.request, "urlopen", fake_urlopen)
    *_, source = mnist(cache_dir=tmp_path / "c")
    assert mnist_data.MIRRORS[1] in source
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == sorted(MNIST_FILES)
