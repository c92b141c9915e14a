"""Containers: Sequential (modules called in order), ModuleList (a list of modules),
ModuleDict (modules by name) and ParameterList (a list of parameters). Items are registered
as children or parameters named "0", "1", ... (or by their keys), as PyTorch names them.
"""
from __future__ import annotations
from collections import OrderedDict
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from lazyten.nn.module import Module, Parameter
from lazyten.tensor import Tensor

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList"]


class Sequential(Module):
    """Modules called in order, each on the previous one's output; children are named
    "0", "1", ... or by the keys of an OrderedDict passed alone."""

    def __init__(self, *modules: Module | OrderedDict):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], dict):
            items: Iterable[tuple[str, Any]] = modules[0].items()
        else:
            items = ((str(i), m) for i, m in enumerate(modules))
        for name, module in items:
            if not isinstance(module, Module):
                raise TypeError(f"Sequential item {name!r} is {type(module).__name__}, "
                                f"not a Module")
            self.add_module(name, module)

    def _items(self) -> list[tuple[str, Module]]:
        return list(self._children())

    def __len__(self) -> int:
        return len(self._items())

    def __iter__(self) -> Iterator[Module]:
        return iter([module for _, module in self._items()])

    def __getitem__(self, idx: int | slice) -> Module:
        items = self._items()
        if isinstance(idx, slice):
            return Sequential(OrderedDict(items[idx]))
        return items[_index(idx, len(items), "Sequential")][1]

    def append(self, module: Module) -> Sequential:
        """Add `module` at the end, named by its position."""
        self.add_module(str(len(self)), module)
        return self

    def forward(self, x: Any) -> Any:
        for module in self:
            x = module(x)
        return x


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ... (it has no forward)."""

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        self._set(list(modules or []))

    def _list(self) -> list[Module]:
        return [module for _, module in self._children()]

    def _set(self, modules: list[Module]) -> None:
        for i, module in enumerate(modules):
            if not isinstance(module, Module):
                raise TypeError(f"ModuleList item {i} is {type(module).__name__}, not a Module")
        for name in [n for n in self.__dict__ if n.isdigit()]:
            object.__delattr__(self, name)
        for i, module in enumerate(modules):
            setattr(self, str(i), module)

    def __len__(self) -> int:
        return len(self._list())

    def __iter__(self) -> Iterator[Module]:
        return iter(self._list())

    def __getitem__(self, idx: int | slice) -> Module | ModuleList:
        modules = self._list()
        if isinstance(idx, slice):
            return ModuleList(modules[idx])
        return modules[_index(idx, len(modules), "ModuleList")]

    def __setitem__(self, idx: int, module: Module) -> None:
        modules = self._list()
        modules[_index(idx, len(modules), "ModuleList")] = module
        self._set(modules)

    def __delitem__(self, idx: int | slice) -> None:
        modules = self._list()
        del modules[idx if isinstance(idx, slice) else _index(idx, len(modules), "ModuleList")]
        self._set(modules)

    def append(self, module: Module) -> ModuleList:
        """Add `module` at the end."""
        self._set(self._list() + [module])
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Add each of `modules` at the end."""
        self._set(self._list() + list(modules))
        return self

    def insert(self, index: int, module: Module) -> None:
        """Put `module` before position `index` (later items are renumbered)."""
        modules = self._list()
        modules.insert(index, module)
        self._set(modules)

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)


class ModuleDict(Module):
    """Modules by name, registered as children under their keys (insertion order); no
    forward. A key must be a valid attribute name not taken by the class (not "items")."""

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def keys(self) -> list[str]:
        return [name for name, _ in self._children()]

    def values(self) -> list[Module]:
        return [module for _, module in self._children()]

    def items(self) -> list[tuple[str, Module]]:
        return list(self._children())

    def __len__(self) -> int:
        return len(self.keys())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __getitem__(self, key: str) -> Module:
        if key not in self:
            raise KeyError(f"ModuleDict has no module {key!r} (keys: {self.keys()})")
        return self.__dict__[key]

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict item {key!r} is {type(module).__name__}, not a Module")
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        self[key]  # KeyError naming the keys
        delattr(self, key)

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def clear(self) -> None:
        for key in self.keys():
            delattr(self, key)

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add or replace modules from a mapping or (key, module) pairs."""
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for key, module in pairs:
            self[key] = module


class ParameterList(Module):
    """A list of parameters named "0", "1", ...; a tensor without requires_grad becomes a
    parameter (a new leaf of its value, nn.Parameter), as PyTorch wraps it."""

    def __init__(self, values: Iterable[Tensor] | None = None):
        super().__init__()
        for value in values or []:
            self.append(value)

    def _list(self) -> list[Tensor]:
        return [self.__dict__[str(i)] for i in range(len(self))]

    def __len__(self) -> int:
        return sum(1 for name in self._kinds if name.isdigit())

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self._list())

    def __getitem__(self, idx: int) -> Tensor:
        return self._list()[_index(idx, len(self), "ParameterList")]

    def __setitem__(self, idx: int, value: Tensor) -> None:
        self.register_parameter(str(_index(idx, len(self), "ParameterList")), _parameter(value))

    def append(self, value: Tensor) -> ParameterList:
        self.register_parameter(str(len(self)), _parameter(value))
        return self

    def extend(self, values: Iterable[Tensor]) -> ParameterList:
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"({i}): Parameter containing: [{t.dtype.name} of size {t.shape}]"
                         for i, t in enumerate(self._list()))


def _parameter(value: Any) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"ParameterList items must be Tensors, got {type(value).__name__}")
    return value if value.requires_grad else Parameter(value)


def _index(idx: Any, n: int, what: str) -> int:
    if not isinstance(idx, (int, np.integer)) or isinstance(idx, bool):
        raise TypeError(f"{what} indices must be integers or slices, got {type(idx).__name__}")
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range for a {what} of {n} modules")
    return int(idx) % n
