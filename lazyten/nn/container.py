"""Containers: Sequential (modules called in order) and ModuleList (a list of modules).
Both register their items as children named "0", "1", ..., as PyTorch names them.
"""
from __future__ import annotations
from collections import OrderedDict
from typing import Any, Iterable, Iterator

import numpy as np

from lazyten.nn.module import Module

__all__ = ["Sequential", "ModuleList"]


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


def _index(idx: Any, n: int, what: str) -> int:
    if not isinstance(idx, (int, np.integer)) or isinstance(idx, bool):
        raise TypeError(f"{what} indices must be integers or slices, got {type(idx).__name__}")
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range for a {what} of {n} modules")
    return int(idx) % n
