"""lazyten.nn.Module: a model written the PyTorch way, as a class whose attributes are its
parameters, buffers and sub-modules; plus the state-dict copy
that Module.load_state_dict and nn/state.py's load_state_dict share (containers:
nn/container.py).

Assigning an attribute registers it (names starting with "_" are private and never are):
  - a Tensor with requires_grad=True is a parameter (`Parameter(t)` marks one); any other
    Tensor is a buffer, saved in the state dict but not trained (its requires_grad, if
    unset, becomes False). A name keeps its kind when reassigned, as in PyTorch; None
    keeps an optional slot (a Linear without bias has `bias = None`).
  - a Module is a child; so is each Module inside a list, tuple or dict held by an
    attribute (named `attr.0`, `attr.key`, as nn/state.py's walker names them).
Values stay ordinary attributes in __dict__. Names follow PyTorch: `conv.weight`,
`layers.0.bias`, `bn.running_mean`; state_dict() lists a module's parameters, then its
persistent buffers, then each child's entries, depth first.

Training mode: a Module starts in training mode, as in PyTorch, and train()/eval() switch
it and every descendant; Dropout and BatchNorm read their own `training`. One exception
keeps tinygrad-style code working: a Dropout or BatchNorm created outside any Module (held
by a plain object, or used alone) and never switched with train()/eval() follows the
thread's `Tensor.training` (`with Tensor.train():`) until it joins a Module.
"""
from __future__ import annotations
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from codegen.dtypes import as_dtype, dtypes as _dtypes
from codegen.ops import LoadOps
from lazyten.lazy import LazyBuffer
from lazyten.tensor import Tensor, no_grad, to_args
from runtimes import canonical

__all__ = ["Module", "Parameter", "IncompatibleKeys", "load_tensors", "owns_buffer"]

_PARAMETER, _BUFFER, _TRANSIENT = "parameter", "buffer", "transient"  # transient: not saved


def Parameter(t: Tensor, requires_grad: bool = True) -> Tensor:
    """`t`'s value as a new leaf Tensor that a Module registers as a parameter (PyTorch's
    nn.Parameter spelling; the result is a plain Tensor, so isinstance checks do not apply)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"Parameter needs a Tensor, got {type(t).__name__}")
    out = t.detach()
    out.requires_grad = requires_grad
    return out


class IncompatibleKeys(NamedTuple):
    """What load_state_dict(strict=False) skipped (PyTorch's return value)."""
    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of layers and models: subclass it, assign layers and tensors in __init__
    (after super().__init__()), and write `forward`; calling the module calls forward."""
    _kinds: dict[str, str]  # set in __init__, without __setattr__'s registration

    def __init__(self) -> None:
        object.__setattr__(self, "_kinds", {})  # tensor attribute name -> parameter/buffer
        object.__setattr__(self, "_training", True)  # None: follow Tensor.training

    # ---- registration ----
    def __setattr__(self, name: str, value: Any) -> None:
        kinds = self.__dict__.get("_kinds")
        if kinds is None:
            if isinstance(value, (Tensor, Module)) and not name.startswith("_"):
                raise AttributeError(f"cannot assign {type(value).__name__} {name!r} to "
                                     f"{type(self).__name__} before Module.__init__(): call "
                                     f"super().__init__() first")
        elif name.startswith("_") or name == "training":
            pass
        elif isinstance(value, Tensor):
            kind = kinds.get(name) or (_PARAMETER if value.requires_grad else _BUFFER)
            if value.requires_grad is None:
                value.requires_grad = kind == _PARAMETER
            kinds[name] = kind
        elif value is None and name in kinds:
            pass  # an optional parameter or buffer stays registered, empty
        else:
            kinds.pop(name, None)
            for module in _modules_in(value):
                _adopt(module)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self.__dict__.get("_kinds", {}).pop(name, None)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, t: Tensor | None) -> None:
        """Register `t` as a parameter (requires_grad, if unset, becomes True)."""
        self._check_name(name, t, "parameter")
        self._check_free(name, _PARAMETER)
        if t is not None and t.requires_grad is None:
            t.requires_grad = True
        self._kinds[name] = _PARAMETER
        object.__setattr__(self, name, t)

    def register_buffer(self, name: str, t: Tensor | None, persistent: bool = True) -> None:
        """Register `t` as a buffer; a non-persistent one moves with the model but is not
        in its state dict."""
        self._check_name(name, t, "buffer")
        self._check_free(name, _BUFFER, _TRANSIENT)
        if t is not None and t.requires_grad is None:
            t.requires_grad = False
        self._kinds[name] = _BUFFER if persistent else _TRANSIENT
        object.__setattr__(self, name, t)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register `module` as the child `name` (the same as assigning the attribute)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(self).__name__}.add_module({name!r}): "
                            f"{type(module).__name__} is not a Module")
        self._check_name(name, None, "module")
        setattr(self, name, module)

    register_module = add_module

    def _check_name(self, name: Any, t: Any, what: str) -> None:
        if "_kinds" not in self.__dict__:
            raise AttributeError(f"cannot register {what} {name!r} before Module.__init__()")
        if not isinstance(name, str) or not name or "." in name or name.startswith("_"):
            raise KeyError(f"{what} name must be a non-empty string without '.' and not "
                           f"starting with '_', got {name!r}")
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"{what} {name!r} must be a Tensor or None, got {type(t).__name__}")
        if hasattr(type(self), name):
            raise KeyError(f"{what} name {name!r} is taken by {type(self).__name__}'s class")

    def _check_free(self, name: str, *kinds: str) -> None:
        """PyTorch's rule: registering may replace a member of the same kind, nothing else."""
        if name in self.__dict__ and self._kinds.get(name) not in kinds:
            raise KeyError(f"attribute {name!r} already exists in {type(self).__name__}")

    # ---- walking ----
    def _children(self) -> Iterator[tuple[str, Module]]:
        """(name, child) of direct children in attribute order, a shared child each time."""
        for name, value in self.__dict__.items():
            if not name.startswith("_"):
                yield from _named_modules_in(value, name)

    def _tensors(self, kinds: tuple[str, ...]) -> Iterator[tuple[str, Tensor]]:
        for name, kind in self._kinds.items():
            value = self.__dict__.get(name)
            if kind in kinds and isinstance(value, Tensor):
                yield name, value

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """Direct children, each once."""
        seen: set[int] = set()
        for name, child in self._children():
            if id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator[Module]:
        return (child for _, child in self.named_children())

    def named_modules(self, memo: set[int] | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """This module and every descendant, depth first, as (dotted name, module); a
        shared module once unless remove_duplicate=False (a cycle stops either way)."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._children():
            yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name,
                                           remove_duplicate)
        if not remove_duplicate:  # then memo holds only the path from the root
            memo.discard(id(self))

    def modules(self) -> Iterator[Module]:
        return (module for _, module in self.named_modules())

    def _named_members(self, kinds: tuple[str, ...], prefix: str,
                       recurse: bool) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        owners = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for owner_name, owner in owners:
            for name, t in owner._tensors(kinds):
                if id(t) not in seen:
                    seen.add(id(t))
                    yield (f"{owner_name}.{name}" if owner_name else name), t

    def named_parameters(self, prefix: str = "", recurse: bool = True
                         ) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, parameter), each tensor once."""
        return self._named_members((_PARAMETER,), prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        return (t for _, t in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True
                      ) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, buffer), non-persistent ones included, each tensor once."""
        return self._named_members((_BUFFER, _TRANSIENT), prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        return (t for _, t in self.named_buffers(recurse=recurse))

    # ---- state ----
    def state_dict(self, prefix: str = "") -> dict[str, Tensor]:
        """{dotted name: tensor} of parameters and persistent buffers (the tensors
        themselves; a shared layer under each of its names). `prefix` is prepended as is."""
        out: dict[str, Tensor] = {}
        self._state_into(out, prefix, set())
        return out

    def _state_into(self, out: dict[str, Tensor], prefix: str, ancestors: set[int]) -> None:
        ancestors.add(id(self))
        for kind in (_PARAMETER, _BUFFER):  # PyTorch's order: parameters, then buffers
            for name, t in self._tensors((kind,)):
                out[prefix + name] = t
        for name, child in self._children():
            if id(child) not in ancestors:
                child._state_into(out, f"{prefix}{name}.", ancestors)
        ancestors.discard(id(self))

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True
                        ) -> IncompatibleKeys:
        """Copy `state_dict` into this module's tensors in place (see `load_tensors`)."""
        return load_tensors(self.state_dict(), state_dict, strict, type(self).__name__)

    # ---- modes and devices ----
    @property
    def training(self) -> bool:
        mode = self.__dict__.get("_training", True)
        return bool(Tensor.training) if mode is None else mode

    @training.setter
    def training(self, mode: bool) -> None:
        object.__setattr__(self, "_training", bool(mode))

    def train(self, mode: bool = True) -> Module:
        """Set training mode (True) or evaluation mode (False) here and in every descendant."""
        if not isinstance(mode, bool):
            raise ValueError(f"training mode must be a bool, got {mode!r}")
        self.training = mode
        for child in self.children():
            child.train(mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode: Dropout passes its input through, BatchNorm uses running stats."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set requires_grad of every parameter (freeze with False)."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's gradient (or, set_to_none=False, make it zeros)."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = Tensor.zeros(*p.shape, dtype=p.grad.dtype, device=p.grad.device)

    def to(self, *args: Any, device: str | None = None, dtype: Any = None) -> Module:
        """Move every parameter and buffer (and gradient) to `device` and/or cast the
        floating-point ones to the floating-point `dtype`, in place, in PyTorch's spellings
        (to("CUDA"), to(float64), to(device, dtype), to(tensor)): each Tensor object stays
        the same, only its data changes, so references held elsewhere (an optimiser's
        parameter list) stay valid. Optimiser state made before stays as it was: make the
        optimiser after moving the model, as in PyTorch."""
        device, dtype = to_args(args, device, dtype)
        device = None if device is None else canonical(device)
        dtype = None if dtype is None else as_dtype(dtype)
        if dtype is not None and not dtype.is_float:
            raise TypeError(f"Module.to casts to floating-point dtypes only, got {dtype.name}")
        moved = []
        with no_grad():
            tensors = {id(t): t for t in list(self.parameters()) + list(self.buffers())}
            for t in tensors.values():
                for holder in (t, t.grad):
                    if holder is None:
                        continue
                    lazy = holder.lazydata
                    if dtype is not None and lazy.dtype.is_float:
                        lazy = lazy.cast(dtype)
                    if device is not None and holder.device != device:
                        lazy = lazy.copy_to_device(device)
                    if lazy is not holder.lazydata:
                        holder.lazydata = lazy
                        moved.append(holder)
        if moved:
            Tensor.realize(*moved)
        return self

    def double(self) -> Module:
        """Every floating-point parameter and buffer as float64 (`to(float64)`)."""
        return self.to(dtype=_dtypes.float64)

    def float(self) -> Module:
        """Every floating-point parameter and buffer as float32."""
        return self.to(dtype=_dtypes.float32)

    def half(self) -> Module:
        """Every floating-point parameter and buffer as float16."""
        return self.to(dtype=_dtypes.float16)

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call fn on every child (recursively), then on this module (as in PyTorch)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ---- calling and printing ----
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward method")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        """The layer's settings, shown inside its parentheses in repr."""
        return ""

    def __repr__(self) -> str:
        return self._repr(set())

    def _repr(self, ancestors: set[int]) -> str:
        ancestors.add(id(self))
        lines = [self.extra_repr()] if self.extra_repr() else []
        for name, child in self._children():
            text = "..." if id(child) in ancestors else child._repr(ancestors)
            lines.append(f"({name}): " + text.replace("\n", "\n  "))
        ancestors.discard(id(self))
        if len(lines) == 1 and lines[0] == self.extra_repr():
            return f"{type(self).__name__}({lines[0]})"
        body = "".join("\n  " + line for line in lines)
        return f"{type(self).__name__}({body}\n)" if lines else f"{type(self).__name__}()"


def _named_modules_in(value: Any, name: str) -> Iterator[tuple[str, Module]]:
    """Modules in `value` (itself, or inside lists, tuples and dicts), with dotted names."""
    if isinstance(value, Module):
        yield name, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _named_modules_in(item, f"{name}.{i}")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _named_modules_in(item, f"{name}.{key}")


def _modules_in(value: Any) -> Iterator[Module]:
    """Every module reachable from `value` (descendants of modules included)."""
    for _, top in _named_modules_in(value, ""):
        yield from top.modules()


def _adopt(module: Module) -> None:
    """A Dropout or BatchNorm that was following Tensor.training joins a Module tree: from
    now on its own mode (training, as a new PyTorch module) decides."""
    if module.__dict__.get("_training", True) is None:
        module.training = True


# ---- copying a state dict into tensors ----
def owns_buffer(t: Tensor) -> bool:
    """Is `t` a realized buffer of its own (not a view, not pending), so assign is in place?"""
    return t.lazydata._base is None and t.lazydata.realized is not None


def load_tensors(targets: dict[str, Tensor], state_dict: dict[str, Any], strict: bool = True,
                 owner: str = "model") -> IncompatibleKeys:
    """Copy `state_dict`'s values into the `targets` tensors with the same names.

    strict: every target must be present and no extra key may appear (KeyError naming
    them). Shapes and dtypes must match exactly (ValueError / TypeError). A target that
    owns its buffer is written in place, so views and optimisers stay valid; the copies
    run in one realize at the end."""
    missing = [name for name in targets if name not in state_dict]
    unexpected = [name for name in state_dict if name not in targets]
    if strict and (missing or unexpected):
        raise KeyError(f"load_state_dict into {owner}: missing keys {sorted(missing)}, "
                       f"unexpected keys {sorted(unexpected)}")
    plan = []
    for name, target in targets.items():
        if name not in state_dict:
            continue
        value = state_dict[name]
        if not isinstance(value, Tensor):
            value = Tensor(np.asarray(value), device=target.device)
        if value.shape != target.shape:
            raise ValueError(f"load_state_dict: {name!r} has shape {value.shape} in the state "
                             f"dict but {target.shape} in the {owner}")
        if value.dtype != target.dtype:
            raise TypeError(f"load_state_dict: {name!r} has dtype {value.dtype.name} in the "
                            f"state dict but {target.dtype.name} in the {owner}")
        if value is not target:
            plan.append((target, value))
    updated = []
    for target, value in dict((id(t), (t, v)) for t, v in plan).values():
        value = value.detach().to(target.device)
        if owns_buffer(target):
            target.assign(value)  # same storage, so views and optimisers stay valid
        else:  # a copy of its own, never a view of the state dict's tensor
            target.lazydata = LazyBuffer.loadop(LoadOps.CONTIGUOUS, value.shape, value.dtype,
                                                value.device, src=(value.lazydata,))
        updated.append(target)
    if updated:
        Tensor.realize(*updated)
    return IncompatibleKeys(missing, unexpected)
