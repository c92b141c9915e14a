"""Run a generated program with lazyten and with the numpy reference; compare; report.

`check_forward(prog, device)` and `check_gradients(prog, device)` return None when lazyten
agrees, or a Failure: its category (wrong value, wrong dtype or shape, crash, compile
error, hang, missing IndexError, wrong gradient), what differed, and the program as
Python that reproduces it (paste it into a regression test).
"""
from __future__ import annotations
import re
import signal
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from codegen.dtypes import dtypes
from lazyten import Tensor

from .gen import reference
from .model import TINY, Program, is_float, np_dtype

SLACK = 2.0  # lazyten's and the reference's errors are each within the bound
TIMEOUT = 30  # seconds one program may take (compiling included) before it counts as a hang
GRAD_RTOL = {"float32": 2e-3, "float64": 1e-6}
LITERAL_LIMIT = 200  # expected values printed inline up to this many elements


class FuzzTimeout(Exception):
    pass


@dataclass
class Failure:
    category: str
    detail: str
    source: str
    signature: str = ""  # what kind of failure, for grouping: the op at fault or the error

    @property
    def key(self) -> str:
        return f"{self.category}: {self.signature}"

    def __str__(self) -> str:
        return f"{self.category}: {self.detail}\n--- reproducer ---\n{self.source}"


@contextmanager
def time_limit(seconds: float):
    """Raise FuzzTimeout in the main thread after `seconds` (a hang, or exponential work)."""
    def alarm(signum, frame):
        raise FuzzTimeout(f"program ran longer than {seconds} s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---- rendering ----
HEADER = ["import numpy as np", "from codegen.dtypes import dtypes", "from lazyten import Tensor"]


def _body(prog: Program) -> list[str]:
    """The program's lines: its steps, the loss and backward (gradient programs: before the
    final realizes, which would otherwise decide what fuses), then the final realizes."""
    lines = [step.line() for step in prog.steps] + (_loss_lines(prog) if prog.grad else [])
    return lines + [f"Tensor.realize({', '.join(group)})" for group in prog.final]


def _loss_lines(prog: Program) -> list[str]:
    """loss = sum over float outputs of (output * fixed random weights), then backward."""
    terms = []
    for i, (name, var) in enumerate(_grad_outputs(prog)):
        terms.append(f"({name} * Tensor(np.random.default_rng({i}).uniform(-1, 1, {var.shape})"
                     f".astype(np.{var.dtype}), device=DEV)).sum()")
    return ["loss = " + " + ".join(terms), "loss.backward()"] if terms else []


def _grad_leaves(prog: Program) -> list[str]:
    return [n for n, inp in prog.inputs.items() if inp.requires_grad] if prog.grad else []


def _grad_outputs(prog: Program):
    return [(n, prog.outputs[n]) for n in prog.loss if n in prog.outputs]


def _expected(name: str, ref, tol: float | None) -> list[str]:
    if ref.val.size > LITERAL_LIMIT:
        return [f"# {name}: {ref.val.size} expected values (too many to print)"]
    expected = f"np.array({ref.val.tolist()!r}, dtype=np.{ref.val.dtype.name})"
    if tol is None:
        return [f"np.testing.assert_array_equal({name}.numpy(), {expected})"]
    return [f"np.testing.assert_allclose({name}.numpy(), {expected}, rtol=0, atol={tol:.3g})"]


def render(prog: Program, device: str = "CPU", checks: list[str] | None = None) -> str:
    """The program as Python: its lines, then (gradient programs) each leaf's gradient read,
    then `checks`, or every value read in the order the run read them."""
    lines = HEADER + [f'DEV = "{device}"'] + _body(prog)
    lines += [f"if {n}.grad is not None: {n}.grad.numpy()" for n in _grad_leaves(prog)]
    lines += [f"{name}.numpy()" for name in prog.read_order] if checks is None else checks
    return "\n".join(lines)


def signature(text: str) -> str:
    """A line with names, numbers and array literals blanked: `x3 = x1 / 5` -> `_ = _ / #`."""
    text = re.sub(r"Tensor\(\(?np\..*?, device=DEV(, requires_grad=True)?(, dtype=dtypes\.\w+)?\)",
                  "input", text)
    text = re.sub(r"\b[xb]\d+\b", "_", text)
    return re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", text)


def op_name(line: str) -> str:
    """The op a program line applies: `x3 = x1.mean(axis=0)` -> `mean`, `x2 = 2 ** x0` -> `**`."""
    text = signature(line).split(" = ", 1)[-1]
    if text.startswith("input"):
        return "input" + text[len("input"):].split("(")[0]
    for pattern in (r"^_\.(\w+)\(", r"^Tensor\.(\w+)\(", r"^_ ([-+*/%&|^<>=!@]+=?) ",
                    r"^# ([-+*/%&|^]+) _", r"^_\.(T)\b", r"^([-~])_", r"^_(\[)"):
        found = re.match(pattern, text)
        if found:
            return found.group(1)
    return text[:40]


def _error_key(exc: BaseException) -> str:
    """An exception's type and the line of its message that says what went wrong."""
    lines = str(exc).splitlines() or [""]
    line = next((ln for ln in lines if "error:" in ln), lines[0])
    return f"{type(exc).__name__}: {signature(line.split('error:', 1)[-1].strip())[:80]}"


def _first_step(prog: Program, current, name: str):
    """Of the current culprit and the step that last defined `name`, the earlier one."""
    steps = [s for s in prog.steps if s.out is not None]
    last = max((i for i, s in enumerate(steps) if s.out.name == name), default=None)
    if last is None:
        return current
    if current is None or steps.index(current) > last:
        return steps[last]
    return current


# ---- execution ----
def _classify(exc: BaseException) -> str:
    """hang, compile error (raised while a compiler ran) or crash."""
    if isinstance(exc, FuzzTimeout):
        return "hang"
    frames = traceback.extract_tb(exc.__traceback__)
    if any("llvmlite" in f.filename or "pyopencl" in f.filename or "compile" in f.name
           for f in frames) or "BUILD_PROGRAM_FAILURE" in str(exc):
        return "compile error"
    return "crash"


def _execute(prog: Program, device: str, extra: list[str] = ()) -> tuple[dict, dict | None]:
    """Run the program's lines one by one; (namespace, None) or (namespace, error info)."""
    ns = {"np": np, "dtypes": dtypes, "Tensor": Tensor, "DEV": device}
    lines = _body(prog) + list(extra)
    reads = [f"__values__[{name!r}] = {name}.numpy()" for name in prog.read_order]
    ns["__values__"], ns["__grads__"] = {}, {}
    current = ""
    try:
        with time_limit(TIMEOUT):
            for current in lines + reads:
                exec(compile(current, "<fuzz program>", "exec"), ns)
    except Exception as e:  # noqa: BLE001 - any exception is a finding
        line = re.sub(r"__(values|grads)__\[(.*?)\] = (.*?)( if .*)?$", r"\3", current)
        return ns, {"exc": e, "line": line,
                    "trace": traceback.format_exc(limit=-6)}
    return ns, None


def check_forward(prog: Program, device: str) -> Failure | None:
    interp = reference(prog)
    ns, error = _execute(prog, device)
    if prog.expect_error:
        if error is not None and isinstance(error["exc"], IndexError):
            return None
        if error is None:
            return Failure("missing IndexError", "an out-of-range index read without raising "
                           "IndexError", render(prog, device))
    if error is not None:
        exc = error["exc"]
        return Failure(_classify(exc), f"{type(exc).__name__}: {exc} (at `{error['line']}`)\n"
                       f"{error['trace']}", render(prog, device),
                       _error_key(exc))
    problems, checks, culprit = [], [], None
    for name in prog.read_order:
        got, var, ref = ns["__values__"][name], prog.outputs[name], interp.env[name]
        dtype = getattr(ns.get(name), "dtype", None)
        problem, tol = _compare(name, got, var, ref, getattr(dtype, "name", None))
        if problem:
            problems.append(problem)
            checks += _expected(name, ref, tol)
            culprit = _first_step(prog, culprit, name)
    if not problems:
        return None
    category = "wrong value" if all("value" in p for p in problems) else "wrong dtype or shape"
    key = op_name(culprit.line()) if culprit else ""
    aliased = _aliases(prog, ns)
    if aliased:  # two names are one Tensor object: a later assign changes both
        problems.append("these names are one Tensor object: " +
                        "; ".join(" is ".join(group) for group in aliased))
        key += " (aliased Tensor objects)"
    return Failure(category, "\n".join(problems), render(prog, device, checks), key)


def _aliases(prog: Program, ns: dict) -> list[list[str]]:
    """Groups of program names bound to the same Python object where a later assign
    rebinds one of them (so the others change too)."""
    rebound = {s.rebinds for s in prog.steps if s.rebinds}
    groups: dict[int, list[str]] = {}
    for name in prog.outputs:
        groups.setdefault(id(ns[name]), []).append(name)
    return [g for g in groups.values() if len(g) > 1 and rebound & set(g)]


def _compare(name: str, got: np.ndarray, var, ref, dtype: str | None = None
             ) -> tuple[str | None, float | None]:
    """(a description of the difference or None, the absolute tolerance used). `dtype` is
    the tensor's (numpy shows bfloat16 as float32)."""
    assert ref.val.shape == var.shape, f"fuzzer bug: reference {name} has shape {ref.val.shape}, " \
        f"the generator expected {var.shape}"
    if got.shape != var.shape or got.dtype != np_dtype(var.dtype) or dtype not in (None, var.dtype):
        return (f"{name}: expected shape {var.shape} dtype {var.dtype}, got shape {got.shape} "
                f"dtype {dtype or got.dtype}"), None
    if not is_float(var.dtype):
        bad = got != ref.val
        if bad.any():
            return _describe(name, got, ref.val, bad, "exact"), None
        return None, None
    g, r = got.astype(np.float64), ref.val.astype(np.float64)
    same_special = (np.isnan(g) & np.isnan(r)) | ((g == r) & ~np.isfinite(r))
    if var.exact or ref.err is None:
        bad = (g != r) & ~same_special
        return (_describe(name, got, ref.val, bad, "exact") if bad.any() else None), None
    allowed = SLACK * ref.err + TINY[var.dtype]
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(g - r) <= allowed) & ~same_special
    if bad.any():
        return _describe(name, got, ref.val, bad, "within the error bound", allowed), \
            float(np.max(allowed))
    return None, float(np.max(allowed)) if allowed.size else 0.0


def _describe(name, got, expected, bad, how, allowed=None) -> str:
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    tol = "" if allowed is None else \
        f" (allowed error {np.broadcast_to(allowed, bad.shape)[where]:.3g})"
    return (f"{name}: wrong value at {where}: expected {expected[where]!r} ({how}), got "
            f"{got[where]!r}{tol}; {int(bad.sum())} of {bad.size} elements differ")


# ---- under jit ----
JIT_CALLS = 4  # call 1 runs plainly, call 2 is captured, calls 3 and 4 are replays


def _arguments(prog: Program) -> list[str]:
    """The leaves passed to the jitted function: every other one; the rest are made inside
    it from their host data (constants of the capture, which it may update in place)."""
    return list(prog.inputs)[::2]


def _jitted(prog: Program, device: str):
    """The program as a jitted function of some leaf tensors, returning what it reads."""
    from lazyten import jit
    return jit(_function(prog, device))


def _function(prog: Program, device: str):
    """The program as a plain function of some leaf tensors, returning what it reads."""
    leaves = _arguments(prog)
    body = [s.line() for s in prog.steps
            if not (s.kind == "input" and s.out is not None and s.out.name in leaves)]
    body += [f"Tensor.realize({', '.join(group)})" for group in prog.final]
    code = compile("\n".join(body), "<fuzz program>", "exec")
    names = list(prog.read_order)

    def program(*tensors):
        ns = {"np": np, "dtypes": dtypes, "Tensor": Tensor, "DEV": device}
        ns.update(zip(leaves, tensors))
        exec(code, ns)
        return tuple(ns[name] for name in names)
    return program


def _leaf_tensors(prog: Program, arrays: dict, device: str) -> list:
    out, leaves = [], _arguments(prog)
    for step in prog.steps:
        if step.kind == "input" and step.out is not None and step.out.name in leaves:
            bf16 = "dtype=dtypes.bfloat16" in step.src
            out.append(Tensor(arrays[step.out.name], device=device,
                              dtype=dtypes.bfloat16 if bf16 else None))
    return out


def check_jit(prog: Program, device: str) -> Failure | None:
    """The program as a @jit function of half its inputs (the others made inside it), called
    JIT_CALLS times with those inputs' elements shuffled (the same values, so the same
    ranges), against the reference of each
    call: replays must compute what eager code computes (issue 15 review: host data updated
    in place and random numbers were frozen by the capture)."""
    if prog.expect_error or prog.grad or not prog.read_order:
        return None
    return _check_calls(prog, device, _jitted(prog, device), "jit", "under lazyten.jit")


def check_repeat(prog: Program, device: str) -> Failure | None:
    """The program as a plain function of half its inputs, called eagerly JIT_CALLS times
    with those inputs shuffled: from call 2 the schedule cache rebinds the first call's
    schedule to the new graph, from call 3 the engine launches its plan (D27, D78)."""
    if prog.expect_error or prog.grad or not prog.read_order:
        return None
    return _check_calls(prog, device, _function(prog, device), "repeat", "eagerly")


def _check_calls(prog: Program, device: str, fn, kind: str, how: str) -> Failure | None:
    for call in range(JIT_CALLS):
        rng = np.random.default_rng(call)
        passed = _arguments(prog)
        arrays = {n: inp.array if call == 0 or n not in passed else
                  rng.permutation(inp.array.reshape(-1)).reshape(inp.array.shape)
                  for n, inp in prog.inputs.items()}
        interp = reference(prog, leaves=arrays)
        note = (f"\n# {how}: call {call + 1} of a function of the inputs "
                f"{', '.join(passed)}, their elements shuffled by np.random.default_rng({call})")
        try:
            with time_limit(TIMEOUT):
                got = [t.numpy() for t in fn(*_leaf_tensors(prog, arrays, device))]
        except Exception as e:  # noqa: BLE001 - any exception is a finding
            return Failure(f"{kind} " + _classify(e), f"{type(e).__name__}: {e} (call {call + 1})\n"
                           f"{traceback.format_exc(limit=-6)}", render(prog, device) + note,
                           _error_key(e))
        problems = []
        for name, value in zip(prog.read_order, got):
            problem, _ = _compare(name, value, prog.outputs[name], interp.env[name])
            if problem:
                problems.append(problem)
        if problems:
            return Failure(f"{kind} wrong value", f"call {call + 1}: " + "\n".join(problems),
                           render(prog, device) + note, "call 1" if call == 0 else "replay")
    return None


# ---- gradients ----
def _fd_loss(prog: Program, leaves: dict, absolute: bool = False) -> float:
    """The loss in float64 (or the sum of its terms' magnitudes, for its rounding error)."""
    interp = reference(prog, "fd", leaves)
    total = 0.0
    for i, (name, var) in enumerate(_grad_outputs(prog)):
        weights = np.random.default_rng(i).uniform(-1, 1, var.shape).astype(var.dtype)
        terms = interp.env[name].val.astype(np.float64) * weights
        total += float(np.sum(np.abs(terms) if absolute else terms))
    return total


def check_gradients(prog: Program, device: str) -> Failure | None:
    """lazyten's backward against central differences of the float64 reference."""
    if not _grad_outputs(prog):
        return None
    grads = _grad_leaves(prog)
    read = [f"__grads__[{n!r}] = {n}.grad.numpy() if {n}.grad is not None else None"
            for n in grads]
    ns, error = _execute(prog, device, read)
    if error is not None:
        exc = error["exc"]
        return Failure(_classify(exc), f"{type(exc).__name__}: {exc} (at `{error['line']}`)\n"
                       f"{error['trace']}", render(prog, device),
                       _error_key(exc))
    base = {n: inp.array.astype(np.float64) for n, inp in prog.inputs.items()}
    expected, noise = {}, {}
    for n in grads:
        expected[n], noise[n] = _finite_differences(prog, base, n)
    scale = max([1e-3] + [float(np.nanmax(np.abs(e), initial=0)) for e in expected.values()])
    problems = []
    for n in grads:
        got, fd = ns["__grads__"][n], expected[n]
        got = np.zeros(fd.shape) if got is None else got.astype(np.float64)
        rtol = GRAD_RTOL[prog.inputs[n].array.dtype.name]
        bad = ~np.isnan(fd) & ~(np.abs(got - fd) <= rtol * (np.abs(fd) + scale) + noise[n])
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            problems.append(f"d loss / d {n}{list(where)}: expected {fd[where]:.6g} (finite "
                            f"differences), got {got[where]:.6g}; {int(bad.sum())} of {bad.size} "
                            f"elements differ")
    if not problems:
        return None
    checks = [f"# finite differences: {n}.grad = {expected[n].tolist()!r}" for n in grads
              if expected[n].size <= LITERAL_LIMIT]
    kinds = sorted({op_name(step.line()) for step in prog.steps
                    if step.kind not in ("input", "realize")})
    return Failure("wrong gradient", "\n".join(problems), render(prog, device, checks),
                   " ".join(kinds)[:120])


def _finite_differences(prog: Program, base: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(d loss / d leaf by central differences, their rounding noise); NaN where the loss
    has a kink (one-sided differences disagree), as at relu(0) or a max with a tie."""
    x = base[name]
    out, noise_at = np.full(x.shape, np.nan), np.zeros(x.shape)
    f0, size = _fd_loss(prog, base), _fd_loss(prog, base, absolute=True)
    for j in np.ndindex(*x.shape):
        h = 1e-6 * max(1.0, abs(float(x[j])))
        values = []
        for sign in (1, -1):
            moved = dict(base)
            moved[name] = x.copy()
            moved[name][j] += sign * h
            values.append(_fd_loss(prog, moved))
        forward, backward = (values[0] - f0) / h, (f0 - values[1]) / h
        central = (values[0] - values[1]) / (2 * h)
        noise = 64 * np.finfo(np.float64).eps * size / h  # the loss's own rounding, over h
        if abs(forward - backward) <= 1e-3 * (1 + abs(central)) + noise:
            out[j] = central
            noise_at[j] = noise
    return out, noise_at
