"""PyTorch's (and numpy's) spellings of Tensor calls, mapped onto lazyten's.

`@keywords(dim="axis")` lets `x.sum(dim=1)` mean `x.sum(axis=1)`; giving both is a
TypeError. A name mapped to POSITIONAL becomes the positional argument
(`x.reshape(shape=(2, 3))` is `x.reshape((2, 3))`). An unknown keyword raises a TypeError
that names the method's own keywords (and the right one for a known misspelling) instead of
Python's bare "unexpected keyword argument". `joined` reads the spellings of cat/stack.
"""
from __future__ import annotations
import functools
import inspect
from typing import Callable

POSITIONAL = "*"

# spellings from numpy and other libraries that mean one of ours
_MISSPELT = {"keepdims": "keepdim", "dims": "dim", "axes": "axis", "size": "shape",
             "newshape": "shape", "dimension": "dim"}


def keywords(**aliases: str) -> Callable:
    """Decorator: accept each keyword of `aliases` as the parameter it maps to."""
    def wrap(fn: Callable) -> Callable:
        params = inspect.signature(fn).parameters
        accepted = [p for p in params if p != "self" and
                    params[p].kind not in (inspect.Parameter.VAR_POSITIONAL,
                                           inspect.Parameter.VAR_KEYWORD)] + list(aliases)
        own = frozenset(p for p in params if params[p].kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(fn)
        def inner(self, *args, **kwargs):
            if kwargs and not own.issuperset(kwargs):  # the common case skips the mapping
                for alias, name in aliases.items():
                    if alias not in kwargs:
                        continue
                    value = kwargs.pop(alias)
                    if name == POSITIONAL:
                        if args:
                            raise TypeError(f"{fn.__name__}() got {alias}= and positional "
                                            f"arguments {args}: pass one of them")
                        args = (value,)
                    elif name in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {name}= and {alias}= "
                                        f"(two names for one argument): pass one, not both")
                    else:
                        kwargs[name] = value
                unknown = [k for k in kwargs if k not in params or
                           params[k].kind is inspect.Parameter.VAR_POSITIONAL]
                if unknown and not any(p.kind is inspect.Parameter.VAR_KEYWORD
                                       for p in params.values()):
                    raise TypeError(_unknown_message(fn.__name__, unknown[0], accepted))
            return fn(self, *args, **kwargs)
        return inner
    return wrap


def _unknown_message(name: str, keyword: str, accepted: list[str]) -> str:
    hint = _MISSPELT.get(keyword)
    hint = f"; did you mean {hint}=?" if hint in accepted else ""
    return (f"{name}() got an unexpected keyword argument {keyword}={hint} "
            f"(it takes: {', '.join(k + '=' for k in accepted)})")


def joined(name: str, first, others: tuple) -> list:
    """The tensors of a cat/stack call, in any of its spellings (a trailing int kept)."""
    if isinstance(first, (list, tuple)):
        if len(others) > 1 or (others and not isinstance(others[0], int)):
            raise TypeError(f"{name}: pass the tensors as one list, "
                            f"Tensor.{name}([a, b], dim=0), or separately, Tensor.{name}(a, b)")
        items = list(first) + list(others)
        tensors = items[:-1] if others else items
    else:
        items = tensors = [first, *others]
    if not tensors:
        raise ValueError(f"{name} needs at least one tensor")
    tensor_type = next((type(t) for t in tensors if hasattr(t, "lazydata")), None)
    for t in tensors:
        if tensor_type is None or not isinstance(t, tensor_type):
            raise TypeError(f"{name} joins tensors, got {type(t).__name__} "
                            f"(spell it Tensor.{name}([a, b], dim=0) or a.{name}(b, dim=0))")
    return items
