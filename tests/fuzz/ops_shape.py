"""Movement ops (and roll, tile), slicing, cat/stack, integer-tensor indexing and gather.

Movement never changes a value, only where it is read from: the reference applies the
same numpy movement to the value and to its error bound. Index expressions are rendered
once as text and evaluated on both sides: numpy's basic and advanced indexing, except
that with index tensors present the ints are applied first (PyTorch's rule, lazyten's).
"""
from __future__ import annotations

import numpy as np

from .model import Interp, Ref, Step, promote
from .inputs import literal
from .oplib import mv, np_pad, small

IDX_DTYPES = ("int64", "int32", "int64", "int8", "int16", "uint8")
OUT_OF_RANGE = 4  # percent of index ops given one out-of-range index: IndexError expected


def _movement(g, x, src, fn, shape, kind="movement", lo=None, hi=None) -> Step | None:
    """A Step applying numpy `fn` to x's value and error bound."""
    shape = tuple(int(s) for s in shape)
    if not small(shape):
        return None
    var = g.new(shape, x.dtype, x.lo if lo is None else lo, x.hi if hi is None else hi, [x],
                grid=x.grid)

    def ref(interp: Interp, name=x.name) -> Ref:
        return mv(interp.env[name], fn)
    return g.add(Step(kind, src, ref, var))


def _factor_shape(g, numel: int) -> tuple[int, ...]:
    """A random shape of 0-4 dims with `numel` elements."""
    if numel == 0:
        dims = [g.int(0, 3) for _ in range(g.int(1, 3))]
        dims[g.int(0, len(dims) - 1)] = 0
        return tuple(dims)
    factors, n, p = [], numel, 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    ndim = g.int(0 if numel == 1 else 1, 4)
    dims = [1] * max(ndim, 1)
    for f in factors:
        dims[g.int(0, len(dims) - 1)] *= f
    return tuple(dims) if ndim else ()


def draw_movement(g):
    x = g.var()
    if x is None:
        return None
    op = g.pick(["reshape", "permute", "expand", "pad", "shrink", "flip", "transpose", "squeeze",
                 "unsqueeze", "flatten", "repeat", "contiguous"])
    nd, shape = x.ndim, x.shape
    if op == "reshape":
        new = _factor_shape(g, x.numel)
        shown = list(new)
        if x.numel and new and g.chance(30):
            shown[g.int(0, len(new) - 1)] = -1
        return _movement(g, x, f"{x.name}.reshape({tuple(shown)})", lambda a: a.reshape(new), new)
    if op == "permute" and nd >= 2:
        order = g.permutation(range(nd))
        return _movement(g, x, f"{x.name}.permute({', '.join(map(str, order))})",
                         lambda a: a.transpose(order), [shape[o] for o in order])
    if op == "expand":  # grow some size-1 dims and/or add leading dims (never the identity)
        new = [g.int(2, 4) if s == 1 and g.chance(60) else s for s in shape]
        lead = [g.int(2, 3) for _ in range(g.int(0, 4 - nd) if nd < 4 else 0)]
        if not lead and list(new) == list(shape):
            if nd == 4:
                return None
            lead = [g.int(2, 3)]
        new = tuple(lead + new)
        shown = tuple(-1 if i >= len(lead) and s == shape[i - len(lead)] and g.chance(30) else s
                      for i, s in enumerate(new))
        return _movement(g, x, f"{x.name}.expand({shown})", lambda a: np.broadcast_to(a, new), new)
    if op == "pad" and nd >= 1:
        pairs = []
        for s in shape:
            b = g.int(-min(s, 2), 3) if g.chance(70) else 0
            a = g.int(-min(s + min(b, 0), 2), 3) if g.chance(70) else 0
            pairs.append((b, a))
        value = 0
        if x.dtype != "bool" and g.chance(30):
            value = g.pick([1.5, -2.0, 0.5]) if x.dtype.startswith("float") else g.pick([1, -3, 7])
            if not x.dtype.startswith("float") and (x.dtype.startswith("u") and value < 0):
                value = 1
        new = tuple(s + b + a for s, (b, a) in zip(shape, pairs))
        flat = g.chance(30)
        if flat:
            k = g.int(1, nd)
            items = [p for i in range(k) for p in pairs[nd - 1 - i]]
            pairs = [(0, 0)] * (nd - k) + pairs[nd - k:]
            arg = f"({', '.join(map(str, items))},)"
        else:
            arg = repr(tuple(pairs))
        new = tuple(s + b + a for s, (b, a) in zip(shape, pairs))
        kw = f", value={value!r}" if value else ""

        def pad(a, pairs=pairs, value=value, err=False):
            return np_pad(a, pairs, 0 if err else value)

        step = _movement(g, x, f"{x.name}.pad({arg}{kw})", pad, new,
                         lo=min(x.lo, value), hi=max(x.hi, value))
        if step is not None:
            step.ref = lambda interp, name=x.name: Ref(
                pad(interp.env[name].val), None if interp.env[name].err is None
                else pad(interp.env[name].err, err=True))
        return step
    if op == "shrink" and nd >= 1:
        arg = []
        for s in shape:
            b = g.int(0, s)
            arg.append(None if g.chance(25) else (b, g.int(b, s)))
        new = tuple(s if a is None else a[1] - a[0] for s, a in zip(shape, arg))
        index = tuple(slice(None) if a is None else slice(*a) for a in arg)
        return _movement(g, x, f"{x.name}.shrink({tuple(arg)!r})", lambda a: a[index], new)
    if op == "flip" and nd >= 1:
        axes = g.subset(range(nd), min_size=1)
        shown = [a - nd if g.chance(25) else a for a in axes]
        return _movement(g, x, f"{x.name}.flip({', '.join(map(str, shown))})",
                         lambda a: np.flip(a, tuple(axes)), shape)
    if op == "transpose" and nd >= 2:
        if g.chance(30):
            return _movement(g, x, f"{x.name}.T", lambda a: a.T, shape[::-1])
        d0, d1 = g.int(0, nd - 1), g.int(0, nd - 1)
        order = list(range(nd))
        order[d0], order[d1] = order[d1], order[d0]
        return _movement(g, x, f"{x.name}.transpose({d0}, {d1})", lambda a: a.transpose(order),
                         [shape[o] for o in order])
    if op == "squeeze":
        if nd and g.chance(60):
            d = g.int(0, nd - 1)
            new = tuple(s for i, s in enumerate(shape) if not (i == d and s == 1))
            return _movement(g, x, f"{x.name}.squeeze({d})", lambda a: a.reshape(new), new)
        new = tuple(s for s in shape if s != 1)
        return _movement(g, x, f"{x.name}.squeeze()", lambda a: a.reshape(new), new)
    if op == "unsqueeze" and nd < 4:
        d = g.int(-nd - 1, nd)
        new = np.expand_dims(np.empty(shape), d).shape
        return _movement(g, x, f"{x.name}.unsqueeze({d})", lambda a: np.expand_dims(a, d), new)
    if op == "flatten":
        if nd == 0:
            return _movement(g, x, f"{x.name}.flatten()", lambda a: a.reshape(1), (1,))
        s, e = sorted([g.int(0, nd - 1), g.int(0, nd - 1)])
        new = shape[:s] + (int(np.prod(shape[s:e + 1])),) + shape[e + 1:]
        return _movement(g, x, f"{x.name}.flatten({s}, {e})", lambda a: a.reshape(new), new)
    if op == "repeat":
        reps = tuple(g.int(1, 3) if g.chance(40) else 1 for _ in range(nd + g.int(0, 1)))
        if not reps:
            return None
        new = np.tile(np.empty(shape), reps).shape
        return _movement(g, x, f"{x.name}.repeat({reps})", lambda a: np.tile(a, reps), new)
    if op == "contiguous":
        return _movement(g, x, f"{x.name}.contiguous()", lambda a: a, shape)
    return None


def _slice_item(g, size: int):
    """One basic-index item for a dim of `size`: a slice (steps of either sign) or an int."""
    if size > 0 and g.chance(20):
        return str(g.int(-size, size - 1)), 0
    bounds = lambda: "" if g.chance(40) else str(g.int(-size - 2, size + 2))  # noqa: E731
    step = g.pick(["", "", "2", "3", "-1", "-2"])
    start, stop = bounds(), bounds()
    text = f"{start}:{stop}" + (f":{step}" if step else "")
    return text, 1


def draw_slice(g):
    """x[...] with slices (any step, negative or out-of-range bounds), ints, None, Ellipsis."""
    x = g.var(lambda v: v.ndim >= 1)
    if x is None:
        return None
    k = g.int(1, x.ndim)
    ellipsis = k < x.ndim and g.chance(25)  # then the items index the last k dims
    dims = x.shape[x.ndim - k:] if ellipsis else x.shape[:k]
    items = [_slice_item(g, s)[0] for s in dims]
    if g.chance(25):
        items.insert(g.int(0, len(items)), "None")
    if ellipsis:
        items.insert(0, "...")
    index = ", ".join(items)
    new = eval(f"a[{index}]", {"a": np.empty(x.shape)}).shape

    def fn(a):
        return eval(f"a[{index}]", {"a": a})
    return _movement(g, x, f"{x.name}[{index}]", fn, new, kind="slice")


def draw_cat(g):
    """x.cat(y, ..., dim=d) and Tensor.stack(...)."""
    stack = g.chance(30)
    x = g.var(lambda v: v.ndim >= (0 if stack else 1) and v.ndim < 4)
    if x is None:
        return None
    others = []
    dim = g.int(0, x.ndim - (0 if stack else 1))
    for _ in range(g.int(1, 2)):
        shape = list(x.shape)
        if not stack:
            shape[dim] = g.int(0, 3)
        shape = tuple(shape)
        dtype = x.dtype if g.chance(80) else None
        others.append(g.operand(lambda v, s=shape: v.shape == s, shape, dtype))
    tensors = [x] + others
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = promote(dtype, t.dtype)
    shown = dim - (x.ndim + stack) if g.chance(25) else dim
    names = [t.name for t in tensors]
    fn = "stack" if stack else "cat"
    src = f"{names[0]}.{fn}({', '.join(names[1:])}, dim={shown})" if g.chance(50) else \
        f"Tensor.{fn}({', '.join(names)}, dim={shown})"
    parts = [np.empty(t.shape) for t in tensors]
    shape = (np.stack(parts, dim) if stack else np.concatenate(parts, dim)).shape
    if not small(shape):
        return None
    grids = [t.grid if t.dtype.startswith("float") else 0 for t in tensors]
    var = g.new(shape, dtype, min(t.lo for t in tensors), max(t.hi for t in tensors), tensors,
                grid=None if None in grids else min(grids))
    join = np.stack if stack else np.concatenate

    def ref(interp: Interp) -> Ref:
        refs = [interp.cast(interp.env[n], dtype) for n in names]
        val = join([r.val for r in refs], dim)
        if all(r.err is None for r in refs):
            return Ref(val)
        return Ref(val, join([r.e() for r in refs], dim))
    return g.add(Step("cat", src, ref, var))


def _index_tensor(g, shape, n: int, allow_negative: bool, bad: bool = False):
    """An integer index input with values in range for a dim of size n (or, if `bad`, with
    its first value just past the end)."""
    lo = -n if allow_negative else 0
    dtype = g.pick(IDX_DTYPES if allow_negative else ("int64", "int32", "uint8"))
    if dtype == "uint8":
        lo = 0
    if dtype == "int8" and n > 127:
        dtype = "int64"
    var = g.input(shape, dtype, lo, n - 1, layout=False if bad else None)
    if bad:  # rewrite the input's first element to an index just past the end
        inp = g.prog.inputs[var.name]
        inp.array.reshape(-1)[0] = n
        inp.src = literal(inp.array) if inp.array.size <= 64 else (
            f"np.concatenate([[{n}], {inp.src}.reshape(-1)[1:]])"
            f".astype(np.{dtype}).reshape({shape})")
        g.prog.steps[-1].src = f"Tensor({inp.src}, device=DEV)"
        g.pool[var.name] = var.but(hi=n)
    return var


def draw_index(g):
    """x[i] / x[i, :, j] / x[1:, i] with integer tensors (or lists) broadcast together."""
    x = g.var(lambda v: v.ndim >= 1 and all(s > 0 for s in v.shape))
    if x is None:
        return None
    k = g.int(1, min(2, x.ndim))
    dims = sorted(g.subset(range(x.ndim), min_size=0))[:k] or [g.int(0, x.ndim - 1)]
    idx_shape = tuple(g.int(1, 3) for _ in range(g.int(0, 2)))
    bad = not g.grad and g.chance(OUT_OF_RANGE)  # then nothing else may make the result empty
    items, used, ints = [], [], []
    last = max(dims)
    for d in range(last + 1):
        if d in dims:
            n = x.shape[d]
            shape = idx_shape if g.chance(70) else tuple(1 for _ in idx_shape)
            found = g.var(lambda v: v.exact and v.dtype.startswith(("int", "uint")) and
                          v.shape == shape and v.lo >= -n and v.hi <= n - 1)
            t = found if found is not None and g.chance(50) and not bad else \
                _index_tensor(g, shape, n, True, bad and d == dims[0])
            items.append(t.name)
            used.append(t)
        else:
            item, keeps = _slice_item(g, x.shape[d]) if g.chance(50) and not bad else (":", 1)
            items.append(item)
            if not keeps:
                ints.append(len(items) - 1)
    index = ", ".join(items)
    # PyTorch's rule in numpy: the ints index first (basic), then the rest on what is left
    first = ", ".join(it if i in ints else ":" for i, it in enumerate(items))
    rest = ", ".join(it for i, it in enumerate(items) if i not in ints)
    torch_rule = f"a[{first}][{rest}]" if ints else f"a[{index}]"
    env = {"a": np.empty(x.shape)}
    env.update({t.name: np.zeros(t.shape, np.int64) for t in used})
    try:
        shape = eval(torch_rule, env).shape
    except IndexError:
        return None
    if not small(shape):
        return None
    var = g.new(shape, x.dtype, x.lo, x.hi, [x] + used, grid=x.grid)
    var = var.but(exact=x.exact, leaves=x.leaves)
    if bad:
        g.prog.bad_index.add(var.name)

    def ref(interp: Interp, name=x.name) -> Ref:
        scope = {t.name: interp.env[t.name].val.astype(np.int64) for t in used}
        n_of = {t.name: x.shape[d] for t, d in zip(used, dims)}
        for t in used:  # an out-of-range program raises in lazyten; any value does here
            scope[t.name] = np.clip(scope[t.name], -n_of[t.name], n_of[t.name] - 1)
        src_ref = interp.env[name]
        scope["a"] = src_ref.val
        val = eval(torch_rule, scope)
        err = None
        if src_ref.err is not None:
            scope["a"] = src_ref.err
            err = eval(torch_rule, scope)
        return Ref(np.array(val), err)
    return g.add(Step("index", f"{x.name}[{index}]", ref, var))


def draw_gather(g):
    """x.gather(dim, idx): idx has x's ndim, no larger than x off `dim`."""
    x = g.var(lambda v: 1 <= v.ndim and v.numel > 0)
    if x is None:
        return None
    dim = g.int(0, x.ndim - 1)
    shape = tuple(g.int(1, 4) if d == dim else g.int(1, s) for d, s in enumerate(x.shape))
    n = x.shape[dim]
    found = g.var(lambda v: v.exact and v.dtype.startswith(("int", "uint")) and v.shape == shape
                  and v.lo >= 0 and v.hi <= n - 1)
    bad = not g.grad and g.chance(OUT_OF_RANGE)
    idx = found if found is not None and g.chance(50) and not bad else \
        _index_tensor(g, shape, n, False, bad)
    var = g.new(shape, x.dtype, x.lo, x.hi, [x, idx], grid=x.grid)
    var = var.but(exact=x.exact, leaves=x.leaves)
    if bad:
        g.prog.bad_index.add(var.name)

    def take(a, i):
        a = a[tuple(slice(0, s) if d != dim else slice(None) for d, s in enumerate(shape))]
        return np.take_along_axis(a, np.clip(i, 0, n - 1), axis=dim)

    def ref(interp: Interp, name=x.name, iname=idx.name) -> Ref:
        i = interp.env[iname].val.astype(np.int64)
        src_ref = interp.env[name]
        return Ref(take(src_ref.val, i), None if src_ref.err is None else take(src_ref.err, i))
    shown = dim - x.ndim if g.chance(25) else dim
    return g.add(Step("index", f"{x.name}.gather({shown}, {idx.name})", ref, var))


def draw_pad_mode(g):
    """pad(mode=reflect|replicate|circular): every value a copy of an input value."""
    x = g.var(lambda v: v.ndim >= 1 and 0 not in v.shape)
    if x is None:
        return None
    mode = g.pick(["reflect", "replicate", "circular"])
    limit = {"reflect": lambda s: s - 1, "circular": lambda s: s}.get(mode, lambda s: 3)
    pairs = [(g.int(0, min(limit(s), 3)), g.int(0, min(limit(s), 3))) if g.chance(60)
             else (0, 0) for s in x.shape]
    new = tuple(s + b + a for s, (b, a) in zip(x.shape, pairs))
    np_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    return _movement(g, x, f"{x.name}.pad({tuple(pairs)!r}, mode={mode!r})",
                     lambda a: np.pad(a, pairs, mode=np_mode), new)


def draw_einsum_view(g):
    """A one-operand einsum that sums nothing: a permutation and/or diagonals (views)."""
    x = g.var(lambda v: 1 <= v.ndim)
    if x is None:
        return None
    labels = list("abcd"[:x.ndim])
    for i in range(x.ndim):  # a later dim of the same size may repeat an earlier label
        for j in range(i):
            if x.shape[i] == x.shape[j] and g.chance(40):
                labels[i] = labels[j]
                break
    out = g.permutation(sorted(set(labels)))
    spec = "".join(labels) + "->" + "".join(out)
    new = tuple(x.shape[labels.index(c)] for c in out)
    return _movement(g, x, f"Tensor.einsum({spec!r}, {x.name})",
                     lambda a: np.einsum(spec, a).copy(), new)


def draw_roll_tile(g):
    """x.roll(shifts, dims) (or flattened) and x.tile(reps): views, checked with numpy."""
    x = g.var()
    if x is None:
        return None
    if g.chance(50):
        reps = tuple(g.int(0 if g.chance(10) else 1, 3) for _ in range(g.int(0, 4)))
        shape = np.tile(np.zeros(x.shape, np.int8), reps).shape
        return _movement(g, x, f"{x.name}.tile({reps})", lambda a: np.tile(a, reps), shape)
    if x.ndim == 0 or g.chance(25):
        shift = g.int(-9, 9)
        return _movement(g, x, f"{x.name}.roll({shift})", lambda a: np.roll(a, shift), x.shape)
    dims = tuple(g.int(-x.ndim, x.ndim - 1) for _ in range(g.int(1, 3)))
    shifts = tuple(g.int(-9, 9) for _ in dims)
    return _movement(g, x, f"{x.name}.roll({shifts}, {dims})",
                     lambda a: np.roll(a, shifts, dims), x.shape)


OPS = [
    ("movement", "movement", draw_movement, True),
    ("roll_tile", "movement", draw_roll_tile, True),
    ("slice", "slice", draw_slice, True),
    ("cat", "cat", draw_cat, True),
    ("index", "index", draw_index, True),
    ("gather", "index", draw_gather, True),
    ("pad_mode", "movement", draw_pad_mode, True),
    ("einsum_view", "movement", draw_einsum_view, True),
]
