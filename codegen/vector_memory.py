"""Vector lanes for a C dialect: memory as vectors, arithmetic lane by lane (D98).

The linearizer gives a kernel with vector lanes one value per vector (a vector load, an
ALU op on vectors, a vector store), which LLVM takes as it is. CUDA C has vector types
(float4) for memory but no arithmetic on them, and a GPU computes one lane at a time
anyway; so for the C dialects `split_lanes` rewrites the linear IR before rendering:
- a vector load or store of a type the dialect writes as a vector (`native`), ungated or
  a load with one gate for all lanes, stays one instruction (the linearizer makes such a
  load or store on a GPU only at an aligned index); its lanes are read with EXTRACT, a
  stored vector is made by VECTORIZE;
- any other vector load or store becomes one scalar load or store per lane, at index +
  lane, each lane with its own gate where the vector had one;
- ALU, CAST and BITCAST on vectors become one op per lane; VECTORIZE and EXTRACT vanish
  (a lane is the scalar that was put there).
The rewritten list keeps the order of the original, so every value is still defined
before its use and inside the same loops.
"""
from __future__ import annotations
from typing import Callable

from codegen.dtypes import DType
from codegen.ops import BinaryOps
from codegen.uops import UOp, UOps, dtype_of

_PER_LANE = (UOps.ALU, UOps.CAST, UOps.BITCAST)


def split_lanes(uops: list[UOp], native: Callable[[DType], bool]) -> list[UOp]:
    """`uops` with vector values kept only in loads and stores that `native` accepts."""
    if not any(u.dtype is not None and u.dtype.count > 1 for u in uops):
        return uops
    return _Splitter(native).run(uops)


class _Splitter:
    def __init__(self, native: Callable[[DType], bool]) -> None:
        self.native = native
        self.out: list[UOp] = []
        self.lanes: dict[UOp, list[UOp]] = {}   # a vector value -> its lanes, as scalars
        self.moved: dict[UOp, UOp] = {}         # a uop rewritten (its operands changed)

    def run(self, uops: list[UOp]) -> list[UOp]:
        for u in uops:
            src = tuple(self.moved.get(s, s) for s in u.src)
            if u.op is UOps.VECTORIZE:
                self.lanes[u] = [self.lane(s, 0) for s in src]
            elif u.op is UOps.EXTRACT:
                self.moved[u] = self.lane(src[0], u.arg)
            elif (u.dtype is not None and u.dtype.count > 1) or \
                    (u.op is UOps.STORE and dtype_of(src[2]).count > 1):
                self._vector(u, src)
            elif src != u.src:
                self.moved[u] = self.add(u, u.op, u.dtype, src, u.arg)
            else:
                self.out.append(u)
        return self.out

    def _vector(self, u: UOp, src: tuple[UOp, ...]) -> None:
        """A uop with a vector value (or a store of one), its operands rewritten."""
        if u.op is UOps.LOAD:
            self._load(u, src)
        elif u.op is UOps.STORE:
            self._store(u, src)
        elif u.op in _PER_LANE:
            self.lanes[u] = [self.add(u, u.op, dtype_of(u).scalar,
                                      tuple(self.lane(s, k) for s in src), u.arg)
                             for k in range(dtype_of(u).count)]
        else:
            raise NotImplementedError(f"a C dialect has no vector {u.op} ({u.dtype})")

    def add(self, like: UOp, op: UOps, dtype: DType | None, src: tuple[UOp, ...],
            arg: object = None) -> UOp:
        """A new uop where `like` stood (inside its loops)."""
        node = UOp(op, dtype, src, arg, like.loops)
        self.out.append(node)
        return node

    def lane(self, u: UOp, k: int) -> UOp:
        """Lane k of a value (a scalar is every lane's)."""
        return self.lanes[u][k] if u in self.lanes else u

    def _index(self, like: UOp, idx: UOp, k: int) -> UOp:
        if k == 0:
            return idx
        step = self.add(like, UOps.CONST, dtype_of(idx), (), k)
        return self.add(like, UOps.ALU, dtype_of(idx), (idx, step), BinaryOps.ADD)

    def _load(self, u: UOp, src: tuple[UOp, ...]) -> None:
        dtype = dtype_of(u)
        if self.native(dtype) and all(dtype_of(g).count == 1 for g in src[2:]):
            whole = self.add(u, UOps.LOAD, dtype, src, u.arg)
            lanes = [self.add(u, UOps.EXTRACT, dtype.scalar, (whole,), k)
                     for k in range(dtype.count)]
            self.lanes[u] = self.lanes[whole] = lanes
            return
        buf, idx, gate = src[0], src[1], src[2:]
        self.lanes[u] = [self.add(u, UOps.LOAD, dtype.scalar, (buf, self._index(u, idx, k)) +
                                  tuple(self.lane(g, k) for g in gate), u.arg)
                         for k in range(dtype.count)]

    def _store(self, u: UOp, src: tuple[UOp, ...]) -> None:
        buf, idx, value, gate = src[0], src[1], src[2], src[3:]
        dtype = dtype_of(value)
        if not gate and self.native(dtype):
            lanes = [self.lane(value, k) for k in range(dtype.count)]
            whole = lanes[0].src[0] if lanes[0].op is UOps.EXTRACT else None
            if whole is None or lanes != self.lanes.get(whole):  # not a vector loaded as is
                whole = self.add(u, UOps.VECTORIZE, dtype, tuple(lanes))
            self.add(u, UOps.STORE, None, (buf, idx, whole), u.arg)
            return
        for k in range(dtype.count):
            self.add(u, UOps.STORE, None, (buf, self._index(u, idx, k), self.lane(value, k)) +
                     tuple(self.lane(g, k) for g in gate), u.arg)
