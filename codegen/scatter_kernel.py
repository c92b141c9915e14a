"""Emitting a scatter kernel (D153): a STORE of (value, offset) -> linear IR (CPU loops).

codegen/scatter.py rewrote a one-hot sum into the output's rows as a scatter: the value
at every point of the sum's iteration space (the rows an index picks shrunk to one
position) and the offset of the row it adds to. The kernel, per group of columns (the
output's axes other than the rows; the threads split the groups, so no two threads
write one element):

    for every row:                 out[row, columns] = 0 (or the value it starts from)
    for every summed step t:       out[offset(t), columns] += value(t, columns)

A group is up to `_COPIES` vectors (or scalars) along the last column axis; the others
take one position each. The summed steps run in order in one thread, so a row that
several steps pick accumulates them one after the other (no race, no atomics).
"""
from __future__ import annotations

from codegen.helpers import prod
from codegen.gather import depends
from codegen.kernel import _pad_axis, leaves
from codegen.lanes import along_lanes
from codegen.linearizer import LinearKernel, Linearizer, LoopShape
from codegen.ops import BinaryOps, LazyOp, MemBuffer, ReduceOps, TernaryOps, UnaryOps
from codegen.scatter import scatter_axes
from codegen.shape.symbolic import Node, NumNode, Variable
from codegen.target import Target
from codegen.uops import UOp, UOps, dtype_of

_COPIES = 8  # most vectors (or scalars) of one group of columns: a summed step's work


class ScatterLinearizer(Linearizer):
    """Emits a scatter: per group of columns, zero the rows, then add every summed step."""

    def __init__(self, ast: LazyOp, target: Target):
        assert not target.gpu, "a scatter needs one writer per element: a loop target"
        self.value, self.offset_node = ast.src[:2]
        self.start = ast.src[2] if len(ast.src) > 2 else None
        self.row_axes, self.col_axes, self.sum_axes = scatter_axes(ast)
        out: MemBuffer = ast.arg
        self.out_shape: tuple[int, ...] = out.st.shape
        full = tuple(self.out_shape[a] if a in self.row_axes else s for a, s in
                     enumerate(leaves(self.value)[0].arg.st.shape))
        padded = self._group(target, out)
        sts = {id(leaf): leaf.arg.st for leaf in leaves(ast)}
        if self.last is not None and padded != self.out_shape[self.last]:
            sts = {key: _pad_axis(st, self.last, padded) for key, st in sts.items()}
            self.out_shape = sts[id(ast)].shape
            full = full[:self.last] + (padded,) + full[self.last + 1:]
        super().__init__(LoopShape(ast, full, sts, lanes=self.unit if self.unit > 1 else 0),  # type: ignore[arg-type]
                         target)
        self.point: list[Node] = []

    def _group(self, target: Target, out: MemBuffer) -> int:
        """A group's columns along the last column axis wider than 1 (`last`): `copies`
        of `unit` columns, a vector's lanes where the output is contiguous there, else 1.
        Vectors past the axis's end are masked where the offset is one for every lane
        (the axis padded); else the lanes must divide it, as the copies of scalars do.
        Returns the axis's size, padded."""
        wide = [a for a in self.col_axes if self.out_shape[a] > 1]
        self.last = last = wide[-1] if wide else None
        n: int = self.out_shape[last] if last is not None else 1
        w = target.vector_bits // (8 * int(out.dtype.itemsize))
        if last is not None and w > 1 and n >= w and out.st.real_strides()[last] == 1 and \
                (n % w == 0 or not depends(self.offset_node, last)):
            self.unit, vectors = w, -(-n // w)
            # the fewest steps of (the copies' adds + an index's load, compare and offset)
            self.copies = min(range(1, _COPIES + 1), key=lambda c: (-(-vectors // c) * (c + 2), -c))
            return -(-vectors // self.copies) * self.copies * w
        self.unit = 1
        self.copies = max(c for c in range(1, _COPIES + 1) if n % c == 0)
        return n

    def _idxs(self, pre: bool) -> list[Node]:
        return self.point

    def _name(self) -> str:
        shape = [s for s in self.ast.arg.st.shape if s > 1] or [1]
        summed = [self.k.full_shape[a] for a in self.sum_axes]
        return "S_" + "_".join(map(str, shape + summed))

    def linearize(self) -> LinearKernel:
        launch = self._begin(open_loops=False)  # (the lane variable, if any, too)
        columns = self._column_loop()
        self._fill(columns)
        self._add(columns)
        return self._finish(launch)

    def _fill(self, columns: dict[int, _Column]) -> None:
        """Every row of the group's columns: 0, or the value the output starts from."""
        out: MemBuffer = self.ast.arg
        zero = self.const(0.0 if out.dtype.is_float else 0, out.dtype)
        rows = [self.out_shape[a] for a in self.row_axes]
        loop = self.g.add(UOps.LOOP, self.idx_dtype, (self.const(0), self.const(prod(rows))), "row")
        names = [f"row{i}" for i in range(len(rows))]
        self._split(loop, rows, names)
        at_rows: dict[int, Node] = {a: Variable(nm, 0, s - 1)
                                    for a, nm, s in zip(self.row_axes, names, rows)}
        for copy in range(self.copies):
            start = zero
            if self.start is not None:
                self.point, self.cache = self._out_point(columns, copy, at_rows), {}
                start = self.cast(self.emit(self.start), out.dtype)
            self._put(self._out_index(columns, copy, at_rows), None,
                      self.widen(start, self.lanes or 1))
        self.g.end_loop(loop)

    def _add(self, columns: dict[int, _Column]) -> None:
        """For every summed step in order: out[offset, columns] += value."""
        out: MemBuffer = self.ast.arg
        steps: dict[int, Node] = {}
        loops = []
        for j, a in enumerate(self.sum_axes):
            s = self.k.full_shape[a]
            if s > 1:
                loops.append(self.g.add(UOps.LOOP, self.idx_dtype, (self.const(0), self.const(s)),
                                        f"ridx{j}"))
                self.vars[f"ridx{j}"] = loops[-1]
                steps[a] = Variable(f"ridx{j}", 0, s - 1)
        for copy in range(self.copies):
            self.point = [steps.get(a, NumNode(0)) if a in self.sum_axes else
                          NumNode(0) if a in self.row_axes else columns[a](copy)
                          for a in range(len(self.k.full_shape))]
            self.cache = {}
            value = self.cast(self.emit(self.value), out.dtype)
            offset = self.cast(self.emit(self.offset_node), self.idx_dtype)
            idx = self._out_index(columns, copy, {})
            old = self._get(idx, offset)
            lanes = max(dtype_of(old).count, dtype_of(value).count)
            total = self.alu(BinaryOps.ADD, out.dtype.vec(lanes) if lanes > 1 else out.dtype,
                             self.widen(old, lanes), self.widen(value, lanes))
            self._put(idx, offset, total)
        for loop in reversed(loops):
            self.g.end_loop(loop)

    def _column_loop(self) -> dict[int, _Column]:
        """The threads' loop over groups of columns; each column axis's index per copy."""
        groups = self._groups()
        self._loops([prod(groups)])
        names = [f"col{i}" for i in range(len(groups))]
        self._split(self.global_loops[0], groups, names)
        lane = self.lane if self.lane is not None else NumNode(0)
        columns: dict[int, _Column] = {}
        for a, nm, s in zip(self.col_axes, names, groups):
            var = Variable(nm, 0, max(s - 1, 0))
            if a == self.last:
                columns[a] = _Column(var * (self.unit * self.copies), self.unit, lane)
            else:
                columns[a] = _Column(var, 0, NumNode(0))
        return columns

    def _groups(self) -> list[int]:
        """Positions of each column axis a group takes one of."""
        return [self.out_shape[a] if a != self.last else
                self.out_shape[a] // (self.unit * self.copies) for a in self.col_axes]

    def _begin(self, open_loops: bool = True) -> tuple[list[int], list[int]]:
        super()._begin(open_loops=False)
        return [prod(self._groups())], [1]

    def _out_index(self, columns: dict[int, _Column], copy: int,
                   rows: dict[int, Node]) -> tuple[Node, Node]:
        """The output's index and validity (false past a padded axis's end) at a copy's
        columns, the rows at `rows` (else 0)."""
        idx, valid = self.sts[id(self.ast)].expr_idxs(self._out_point(columns, copy, rows))
        return idx, valid

    def _out_point(self, columns: dict[int, _Column], copy: int,
                   rows: dict[int, Node]) -> list[Node]:
        """The output's index variables at a copy's columns, the rows at `rows` (else 0)."""
        return [rows.get(a, NumNode(0)) if a in self.row_axes else
                columns[a](copy) if a in columns else NumNode(0)
                for a in range(len(self.out_shape))]

    def _get(self, at: tuple[Node, Node], offset: UOp) -> UOp:
        """The output at idx + offset: one vector where the lanes are contiguous and the
        offset one scalar (masked past a padded axis's end), else lane by lane."""
        out: MemBuffer = self.ast.arg
        idx, valid = at
        if self.lane is None:
            return self._load(out, idx, NumNode(1), offset=offset)
        at0 = along_lanes(idx, self.lane, self.lanes)
        if at0 is not None and dtype_of(offset).count == 1:
            if valid.min == 1:
                return self._load(out, at0, NumNode(1), self.lanes, offset=offset)
            return self.g.add(UOps.LOAD, out.dtype.vec(self.lanes), (
                self.bufs[out.idx], self._address(at0, offset),
                self.widen(self._gate(valid), self.lanes)))
        assert valid.min == 1, "lane by lane, the axis is not padded"
        return self.vectorize([self._load(out, idx.substitute({self.lane: k}), NumNode(1),
                                          offset=self._lane(offset, k))
                               for k in range(self.lanes)])

    def _put(self, at: tuple[Node, Node], offset: UOp | None, value: UOp) -> None:
        """Store value at idx + offset: as `_get` reads (gated past a padded axis's end)."""
        buf = self.bufs[self.ast.arg.idx]
        idx, valid = at
        if self.lane is None:
            self.g.add(UOps.STORE, None, (buf, self._address(idx, offset), value))
            return
        at0 = along_lanes(idx, self.lane, self.lanes)
        if at0 is not None and (offset is None or dtype_of(offset).count == 1):
            gate = () if valid.min == 1 else (self.widen(self._gate(valid), self.lanes),)
            self.g.add(UOps.STORE, None, (buf, self._address(at0, offset),
                                          self.widen(value, self.lanes)) + gate)
            return
        for k in range(self.lanes):
            lane_offset = None if offset is None else self._lane(offset, k)
            self.g.add(UOps.STORE, None, (buf, self._address(idx.substitute({self.lane: k}),
                                                             lane_offset),
                                          self.extract(value, k)))

    def _lane(self, x: UOp, k: int) -> UOp:
        return self.extract(x, k) if dtype_of(x).count > 1 else x

    def _estimate(self) -> tuple[int, int]:
        """ALU ops of the value at every summed step; bytes of every buffer and the output
        written twice (zeroed, then added to)."""
        full = prod(self.k.full_shape) // prod(self.out_shape[a] for a in self.row_axes)
        flops = full * (1 + sum(1 for n in self.value.walk() if isinstance(
            n.op, (UnaryOps, BinaryOps, TernaryOps, ReduceOps)) and n.op is not UnaryOps.CAST))
        seen: dict[int, int] = {}
        for n in leaves(self.ast):
            if isinstance(n.arg, MemBuffer):
                seen[n.arg.idx] = max(seen.get(n.arg.idx, 0), n.arg.st.size * n.arg.dtype.itemsize)
        out: MemBuffer = self.ast.arg
        return flops, sum(seen.values()) + out.st.size * out.dtype.itemsize


class _Column:
    """One column axis's index in copy c: base + c * unit + lane."""

    def __init__(self, base: Node, unit: int, lane: Node):
        self.base, self.unit, self.lane = base, unit, lane

    def __call__(self, copy: int) -> Node:
        if not self.unit:
            return self.base
        at: Node = self.base + copy * self.unit + self.lane
        return at
