"""Exception classes that are both what lazyten documents and what PyTorch raises.

PyTorch raises RuntimeError for most shape and dtype mistakes (a matmul of mismatched
shapes, a repeated dim, a float tensor given to `&`); lazyten's callers have caught the
ValueError / TypeError it raised before. These classes are both, so `except ValueError`
and `except RuntimeError` each catch them. Raise them where PyTorch raises RuntimeError.
"""


class ShapeError(ValueError, RuntimeError):
    """Shapes, dims or sizes that do not fit together (PyTorch: RuntimeError)."""


class DTypeError(TypeError, RuntimeError):
    """A dtype the op does not take, such as a float tensor for a bitwise op (PyTorch:
    RuntimeError)."""


class ArgumentError(ValueError, RuntimeError):
    """An argument value the op does not accept, such as meshgrid(indexing='bad') or an
    integer tensor to a negative integer power (PyTorch: RuntimeError)."""


class UnknownModeError(ValueError, NotImplementedError):
    """A padding mode that does not exist (PyTorch: NotImplementedError, a RuntimeError)."""
