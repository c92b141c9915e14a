"""TensorMixin: the base of Tensor's mixins (movement.py, reduce.py, ...), for the type checker.

Tensor is one class assembled from about twenty mixins, one file of related methods each.
A mixin's methods use the tensor's state (`self.shape`, `self.lazydata`) and each other's
methods (`self.cast`, `self.reshape`, `type(self).arange`), which the mixin does not
define, so a type checker reading one mixin finds none of them. A mixin cannot annotate
its `self` as a Tensor (mypy rejects it: Tensor is a subclass of the mixin, not one of its
supertypes), and a Protocol of every method the mixins share would repeat Tensor's API.

So every mixin inherits TensorMixin, which tells the type checker, and only it (at run
time this is an empty class and an empty metaclass):
- the tensor's state, with its real types: lazydata, shape, dtype, device, ndim,
  requires_grad, grad and the autograd bookkeeping;
- that `type(self)(...)` and `cls(...)` make a Tensor;
- that any other name, on an instance (`__getattr__` here) or on the class (`__getattr__`
  on the metaclass), is a sibling mixin's method, of type Any; and so are the operators
  the mixins apply to `self` (`-self`, `self[i]`), which Python and mypy look up on the
  class, never through `__getattr__`.
What a mixin defines itself is checked as usual. The cost: on a Tensor too, a name no
mixin defines is Any for mypy rather than an error; the tests catch a misspelt method.
"""
from __future__ import annotations
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # same package; only for the annotations
    from codegen.dtypes import DType
    from lazyten.autograd.function import Function
    from lazyten.lazy import LazyBuffer
    from lazyten.tensor import Tensor


class MixinType(type):
    """The metaclass of the mixins and of Tensor (whose metaclass extends it)."""
    if TYPE_CHECKING:
        def __getattr__(cls, name: str) -> Any:
            """A class-level name of a sibling mixin (`type(self).arange`, `cls.full`)."""


class TensorMixin(metaclass=MixinType):
    """What every Tensor mixin may use of Tensor; declarations for the type checker only."""
    if TYPE_CHECKING:
        lazydata: LazyBuffer
        requires_grad: bool | None  # None: never set, which reads as False
        grad: Tensor | None
        _ctx: Function | None
        _parents: tuple[Tensor, ...]
        _version: int
        _previous: Tensor | None

        @property
        def shape(self) -> tuple[int, ...]: ...
        @property
        def dtype(self) -> DType: ...
        @property
        def device(self) -> str: ...
        @property
        def ndim(self) -> int: ...

        # `type(self)(...)`, `cls(...)`: Tensor.__init__'s arguments, and a Tensor comes back
        def __new__(cls, data: Any, device: str | None = None, dtype: Any = None,
                    requires_grad: bool | None = None) -> Tensor: ...

        def __getattr__(self, name: str) -> Any:
            """An instance-level name of a sibling mixin (`self.cast`, `self.reshape`)."""

        # operators are looked up on the class, never through __getattr__: those the mixins
        # apply to `self` (ElementwiseMixin, LogicMixin and MovementMixin define them)
        def __eq__(self, other: object) -> Any: ...
        def __ne__(self, other: object) -> Any: ...
        def __lt__(self, other: Any) -> Any: ...
        def __gt__(self, other: Any) -> Any: ...
        def __le__(self, other: Any) -> Any: ...
        def __ge__(self, other: Any) -> Any: ...
        def __and__(self, other: Any) -> Any: ...
        def __or__(self, other: Any) -> Any: ...
        def __xor__(self, other: Any) -> Any: ...
        def __neg__(self) -> Any: ...
        def __invert__(self) -> Any: ...
        def __mul__(self, other: Any) -> Any: ...
        def __rsub__(self, other: Any) -> Any: ...
        def __getitem__(self, index: Any) -> Any: ...
