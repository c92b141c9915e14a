"""State dicts (naming, loading in place, checks) and safetensors files (bit-exact round
trip, a header that follows the spec, files written by hand from the spec)."""
import json
import struct

import numpy as np
import pytest

from lazyten import Tensor, dtypes, nn
from lazyten.nn.state import (get_parameters, get_state_dict, load_state_dict, safe_load,
                              safe_load_metadata, safe_save)
from lazyten.tensor import to_numpy_dtype


class Block:
    def __init__(self):
        self.conv = nn.Conv2d(2, 3, 3)
        self.norm = nn.BatchNorm2d(3)


class Model:
    def __init__(self):
        self.blocks = [Block(), Block()]
        self.heads = {"cls": nn.Linear(4, 2), "box": nn.Linear(4, 3, bias=False)}
        self.scale = Tensor(np.ones(1, np.float32), requires_grad=True)
        self._cache = Tensor(np.zeros(1, np.float32))  # private: not state
        self.config = {"depth": 2, "name": "m"}
        self.me = self  # cycles are fine


def test_state_dict_names_follow_dotted_paths():
    m = Model()
    sd = get_state_dict(m)
    assert list(sd) == [
        "blocks.0.conv.weight", "blocks.0.conv.bias", "blocks.0.norm.weight",
        "blocks.0.norm.bias", "blocks.0.norm.running_mean", "blocks.0.norm.running_var",
        "blocks.0.norm.num_batches_tracked",
        "blocks.1.conv.weight", "blocks.1.conv.bias", "blocks.1.norm.weight",
        "blocks.1.norm.bias", "blocks.1.norm.running_mean", "blocks.1.norm.running_var",
        "blocks.1.norm.num_batches_tracked",
        "heads.cls.weight", "heads.cls.bias", "heads.box.weight", "scale"]
    assert sd["heads.cls.weight"] is m.heads["cls"].weight
    assert list(get_state_dict(m.heads, prefix="heads")) == [
        "heads.cls.weight", "heads.cls.bias", "heads.box.weight"]
    assert list(get_state_dict([Tensor.ones(1), (Tensor.ones(2),)])) == ["0", "1.0"]


def test_get_parameters_lists_each_tensor_once():
    shared = nn.Linear(2, 2)
    holder = [shared, {"again": shared}]
    params = get_parameters(holder)
    assert len(get_state_dict(holder)) == 4 and len(params) == 2
    assert params[0] is shared.weight and params[1] is shared.bias
    assert len(get_parameters(Model())) == 18


def test_load_state_dict_copies_in_place():
    src, dst = Model(), Model()
    buffers = {k: v.lazydata.base.realized for k, v in get_state_dict(dst).items()}
    load_state_dict(dst, get_state_dict(src))
    for name, t in get_state_dict(dst).items():
        np.testing.assert_array_equal(t.numpy(), get_state_dict(src)[name].numpy())
        assert t.lazydata.base.realized is buffers[name], f"{name} lost its storage"
    # later changes to the source do not leak into the copy
    src.scale.assign(src.scale * 3).realize()
    assert dst.scale.numpy()[0] == 1.0


def test_load_state_dict_into_lazy_tensors_makes_own_copies():
    target = {"a": Tensor.zeros(2, 3), "b": Tensor(np.arange(6.0)).reshape(2, 3)}
    source = {"a": Tensor(np.full((2, 3), 7.0, np.float32)), "b": Tensor(np.ones((2, 3)))}
    load_state_dict(target, source)
    for k in target:
        np.testing.assert_array_equal(target[k].numpy(), source[k].numpy())
        assert target[k].lazydata.base is not source[k].lazydata.base


def test_load_state_dict_checks():
    m = nn.Linear(3, 2)
    good = {k: Tensor(v.numpy()) for k, v in get_state_dict(m).items()}
    with pytest.raises(KeyError, match=r"missing keys \['bias'\]"):
        load_state_dict(m, {"weight": good["weight"]})
    with pytest.raises(KeyError, match=r"unexpected keys \['extra'\]"):
        load_state_dict(m, {**good, "extra": Tensor.ones(1)})
    with pytest.raises(ValueError, match=r"'weight' has shape \(3, 2\).*\(2, 3\)"):
        load_state_dict(m, {**good, "weight": Tensor.ones(3, 2)})
    with pytest.raises(TypeError, match="'bias' has dtype float64.*float32"):
        load_state_dict(m, {**good, "bias": Tensor(np.zeros(2))})
    load_state_dict(m, {"weight": Tensor(np.ones((2, 3), np.float32))}, strict=False)
    np.testing.assert_array_equal(m.weight.numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(m.bias.numpy(), good["bias"].numpy())


# ---- safetensors ----
def awkward_values(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    npd = to_numpy_dtype(dtype)
    if dtype == dtypes.bool:
        return rng.random(shape) < 0.5
    if dtype.is_float:
        a = rng.standard_normal(shape).astype(npd).reshape(-1)
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype=npd)
        a[:min(a.size, 5)] = special[:min(a.size, 5)]
        return a.reshape(shape)
    info = np.iinfo(npd)
    return rng.integers(info.min, info.max, size=shape, dtype=npd, endpoint=True)


def test_round_trip_is_bit_identical(tmp_path):
    shapes = {"f16": (3, 5), "f32": (2, 3, 4), "f64": (7,), "i8": (9,), "u8": (2, 2),
              "i16": (3,), "i32": (1, 5), "i64": (4,), "bool": (3, 3), "u16": (6,),
              "u32": (2, 3), "u64": (5,)}
    kinds = dict(zip(shapes, [dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int8,
                              dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64,
                              dtypes.bool, dtypes.uint16, dtypes.uint32, dtypes.uint64]))
    arrays = {k: awkward_values(kinds[k], s, i) for i, (k, s) in enumerate(shapes.items())}
    arrays["scalar"] = np.array(2.5, np.float32)
    arrays["empty"] = np.zeros((0, 4), np.float32)
    state = {k: Tensor(a) for k, a in arrays.items()}
    state["view"] = Tensor(np.arange(12, dtype=np.int32).reshape(3, 4)).T[::2]
    arrays["view"] = np.arange(12, dtype=np.int32).reshape(3, 4).T[::2]
    path = tmp_path / "all.safetensors"
    safe_save(state, path, metadata={"format": "pt", "note": "lazyten"})
    loaded = safe_load(path)
    assert set(loaded) == set(arrays)
    for k, a in arrays.items():
        t = loaded[k]
        assert t.shape == a.shape and to_numpy_dtype(t.dtype) == a.dtype, k
        assert t.lazydata.is_realized
        assert t.numpy().tobytes() == np.ascontiguousarray(a).tobytes(), k
    assert safe_load_metadata(path) == {"format": "pt", "note": "lazyten"}


def test_header_follows_the_spec(tmp_path):
    state = {"b": Tensor(np.arange(3, dtype=np.int8)), "a": Tensor(np.ones((2, 2))),
             "c": Tensor(np.full(5, 3, np.int16)), "d": Tensor(np.zeros(3, np.float32))}
    path = tmp_path / "h.safetensors"
    safe_save(state, path)
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    assert (8 + n) % 8 == 0, "data section should start 8-byte aligned"
    assert "__metadata__" not in header
    codes = {k: v["dtype"] for k, v in header.items()}
    assert codes == {"a": "F64", "b": "I8", "c": "I16", "d": "F32"}
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(raw) - 8 - n
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "holes in the data section"
    data = raw[8 + n:]
    for name, info in header.items():
        begin, end = info["data_offsets"]
        itemsize = {"F64": 8, "F32": 4, "I16": 2, "I8": 1}[info["dtype"]]
        assert begin % itemsize == 0, f"{name} is not aligned"
        assert end - begin == itemsize * int(np.prod(info["shape"]))
        expected = state[name].numpy()
        got = np.frombuffer(data[begin:end], dtype=expected.dtype.newbyteorder("<"))
        np.testing.assert_array_equal(got.reshape(info["shape"]), expected)


def test_loads_a_file_written_by_hand_from_the_spec(tmp_path):
    weight = np.array([[1.5, -2.0], [0.25, 8.0]], dtype="<f4")
    ids = np.array([1, -2, 3], dtype="<i8")
    flag = np.array([True, False], dtype="?")
    half = np.array([0.5, -1.0, 65504.0], dtype="<f2")
    data = flag.tobytes() + ids.tobytes() + weight.tobytes() + half.tobytes()
    o1, o2, o3 = len(flag.tobytes()), len(flag.tobytes()) + 24, len(flag.tobytes()) + 40
    header = {  # deliberately unsorted, unaligned, no padding: all still valid
        "model.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [o2, o3]},
        "__metadata__": {"source": "hand"},
        "ids": {"dtype": "I64", "shape": [3], "data_offsets": [o1, o2]},
        "flag": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, o1]},
        "half": {"dtype": "F16", "shape": [3], "data_offsets": [o3, o3 + 6]},
        "nothing": {"dtype": "F32", "shape": [0, 3], "data_offsets": [o3 + 6, o3 + 6]},
    }
    text = json.dumps(header).encode()
    path = tmp_path / "hand.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    loaded = safe_load(path)
    assert list(loaded) == ["model.weight", "ids", "flag", "half", "nothing"]
    np.testing.assert_array_equal(loaded["model.weight"].numpy(), weight)
    np.testing.assert_array_equal(loaded["ids"].numpy(), ids)
    np.testing.assert_array_equal(loaded["flag"].numpy(), flag)
    np.testing.assert_array_equal(loaded["half"].numpy(), half)
    assert loaded["model.weight"].dtype == dtypes.float32 and loaded["ids"].dtype == dtypes.int64
    assert loaded["flag"].dtype == dtypes.bool and loaded["half"].dtype == dtypes.float16
    assert loaded["nothing"].shape == (0, 3)
    assert safe_load_metadata(path) == {"source": "hand"}


@pytest.mark.parametrize("corrupt,match", [
    (lambda raw: raw[:4], "too short"),
    (lambda raw: struct.pack("<Q", 10 ** 9) + raw[8:], "header length"),
    (lambda raw: raw[:8] + b"{not json" + raw[17:], "not valid JSON"),
    (lambda raw: raw[:-4], "data_offsets"),
])
def test_corrupt_files_raise_clear_errors(tmp_path, corrupt, match):
    path = tmp_path / "x.safetensors"
    safe_save({"w": Tensor(np.ones(4, np.float32))}, path)
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.raises(ValueError, match=match):
        safe_load(path)


def test_unknown_dtype_code_is_named(tmp_path):
    text = json.dumps({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}).encode()
    path = tmp_path / "f8.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\0\0")
    with pytest.raises(ValueError, match="F8_E4M3.*known dtypes: BOOL"):
        safe_load(path)


def _torch_bf16_file(path, name: str, values: np.ndarray) -> np.ndarray:
    """A BF16 safetensors file as torch writes one, built from bit patterns: each float32
    value's upper 16 bits (the values are chosen exact in bfloat16), little-endian. The
    bits are returned."""
    bits = (values.astype(np.float32).view(np.uint32) >> 16).astype("<u2")
    assert ((bits.astype(np.uint32) << 16).view(np.float32) == values)[~np.isnan(values)].all()
    text = json.dumps({name: {"dtype": "BF16", "shape": list(values.shape),
                              "data_offsets": [0, bits.nbytes]}}, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the header is compact JSON padded to 8 bytes
    path.write_bytes(struct.pack("<Q", len(text)) + text + bits.tobytes())
    return bits


def test_bf16_file_as_torch_writes_it_loads_and_round_trips(tmp_path):
    # exact bfloat16 values: 1 + k/128 scaled, the extremes, zeros, infinities, NaNs
    # (a quiet one and a signalling payload 0x7F81, which must survive untouched)
    values = np.array([1.0, -1.0078125, 3.140625, 0.0, -0.0, np.inf, -np.inf,
                       3.3895313892515355e38, 1.1754943508222875e-38, 9.183549615799121e-41,
                       2.0 ** -133, -65536.0], np.float32)
    nans = np.array([0x7FC00000, 0x7F810000, 0xFFC10000], np.uint32).view(np.float32)
    values = np.concatenate([values, nans]).reshape(3, 5)
    path = tmp_path / "torch_bf16.safetensors"
    bits = _torch_bf16_file(path, "w", values)
    t = safe_load(path)["w"]
    assert t.dtype == dtypes.bfloat16 and t.shape == (3, 5)
    got = t.numpy()
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, values)  # NaN where NaN, every other value exact
    assert t.bitcast(dtypes.uint16).numpy().tobytes() == bits.tobytes()
    out = tmp_path / "again.safetensors"
    safe_save({"w": t}, out)
    assert out.read_bytes() == path.read_bytes(), "a BF16 file must round-trip bit for bit"


def test_bf16_values_save_as_their_rounded_bits(tmp_path):
    x = Tensor(np.array([0.1, 1 / 3, -2.7, 1e30]), dtype=dtypes.bfloat16)
    safe_save({"x": x}, tmp_path / "x.safetensors")
    data = (tmp_path / "x.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    stored = np.frombuffer(data[8 + length:], "<u2")
    want = (x.numpy().view(np.uint32) >> 16).astype(np.uint16)  # exact float32 of each value
    np.testing.assert_array_equal(stored, want)
    assert json.loads(data[8:8 + length])["x"]["dtype"] == "BF16"


def test_model_round_trip_through_a_file(tmp_path):
    a, b = Model(), Model()
    path = tmp_path / "model.safetensors"
    safe_save(get_state_dict(a), path)
    load_state_dict(b, safe_load(path))
    x = Tensor(np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32))
    out_a, out_b = a.blocks[0].conv(x), b.blocks[0].conv(x)
    assert out_a.numpy().tobytes() == out_b.numpy().tobytes()
    for name, t in get_state_dict(b).items():
        assert t.numpy().tobytes() == get_state_dict(a)[name].numpy().tobytes()


def test_interoperates_with_the_safetensors_package(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    ours = {"w": np.arange(6, dtype=np.float16).reshape(2, 3), "b": np.array([True, False]),
            "s": np.array(1.5), "i": np.arange(4, dtype=np.int64)}
    safe_save({k: Tensor(v) for k, v in ours.items()}, tmp_path / "ours.safetensors")
    theirs = safetensors_numpy.load_file(str(tmp_path / "ours.safetensors"))
    for k, v in ours.items():
        assert theirs[k].dtype == v.dtype and theirs[k].shape == v.shape
        np.testing.assert_array_equal(theirs[k], v)
    safetensors_numpy.save_file(ours, str(tmp_path / "theirs.safetensors"))
    for k, t in safe_load(tmp_path / "theirs.safetensors").items():
        np.testing.assert_array_equal(t.numpy(), ours[k])


# ---- the safetensors format, strictly (crafted files) ----
def _file(tmp_path, header, data: bytes, raw_header: bytes | None = None):
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    path = tmp_path / "crafted.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def _t(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


CRAFTED = {
    "overlap": ({"a": _t(offsets=(0, 8)), "b": _t(offsets=(4, 12))}, 12, "'b'.*overlaps"),
    "out of order": ({"a": _t(shape=(0,), offsets=(8, 0))}, 8, "'a'.*out of order"),
    "hole at start": ({"a": _t(offsets=(4, 12))}, 12, "hole of 4 bytes before tensor 'a'"),
    "hole between": ({"a": _t(), "b": _t(offsets=(12, 20))}, 20, "hole.*'b'"),
    "trailing bytes": ({"a": _t()}, 12, "4 bytes after the last tensor"),
    "float shape": ({"a": _t(shape=(2.0,))}, 8, "'a'.*non-negative integers"),
    "string shape": ({"a": _t(shape=("2",))}, 8, "'a'.*non-negative integers"),
    "bool shape": ({"a": _t(shape=(True, 2))}, 8, "'a'.*non-negative integers"),
    "negative shape": ({"a": _t(shape=(-2,))}, 8, "'a'.*non-negative integers"),
    "shape mismatch": ({"a": _t(shape=(3,))}, 8, "'a'.*12 bytes"),
    "float offsets": ({"a": _t(offsets=(0.0, 8))}, 8, "'a'.*data_offsets"),
    "three offsets": ({"a": _t(offsets=(0, 4, 8))}, 8, "'a'.*data_offsets"),
    "unknown dtype": ({"a": _t(dtype="F8_E4M3")}, 8, "'a'.*unknown dtype 'F8_E4M3'"),
    "extra key": ({"a": dict(_t(), extra=1)}, 8, "'a'.*exactly the keys"),
    "not an object": ({"a": [1, 2]}, 8, "'a'.*exactly the keys"),
    "nested shape": ({"a": _t(shape=([2],))}, 8, "'a'.*non-negative integers"),
    "metadata not strings": ({"__metadata__": {"k": 1}, "a": _t()}, 8, "__metadata__"),
    "past the end": ({"a": _t(shape=(4,), offsets=(0, 16))}, 8, "'a'.*run past"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_safetensors_break_a_named_rule(tmp_path, case):
    header, size, message = CRAFTED[case]
    with pytest.raises(ValueError, match=message):
        safe_load(_file(tmp_path, header, bytes(size)))


def test_duplicate_keys_deep_nesting_and_huge_headers_raise_value_errors(tmp_path):
    dup = b'{"a":' + json.dumps(_t()).encode() + b',"a":' + json.dumps(_t()).encode() + b"}"
    with pytest.raises(ValueError, match="'a' appears twice"):
        safe_load(_file(tmp_path, None, bytes(8), raw_header=dup))
    deep = b'{"a":' + b"[" * 50000 + b"]" * 50000 + b"}"
    with pytest.raises(ValueError, match="nested deeper"):
        safe_load(_file(tmp_path, None, b"", raw_header=deep))
    path = tmp_path / "huge.safetensors"
    path.write_bytes(struct.pack("<Q", 200 * 1024 * 1024) + b"{}")
    with pytest.raises(ValueError, match="over the limit"):
        safe_load(path)


def test_many_small_tensors_load(tmp_path):
    """Many entries load (the loader is linear: 200k entries, an 18 MB header, take about
    7 s on the 2-core machine; 32 s before)."""
    state = {f"layer.{i}.w": Tensor(np.full((2,), i, np.float32)) for i in range(2000)}
    path = tmp_path / "many.safetensors"
    safe_save(state, path)
    loaded = safe_load(path)
    assert set(loaded) == set(state)
    np.testing.assert_array_equal(loaded["layer.1234.w"].numpy(), [1234, 1234])
