"""Autograd: every Function and the reverse traversal that runs their backwards.

- function.py: `Function`, the base: `forward` on LazyBuffers beside its `backward`.
- primitives.py: one Function per Tensor primitive (unary, binary, ternary, reduce,
  movement, copies), written in LazyBuffer ops.
- special.py: Functions whose forward is a composite (mathfn.py's special functions,
  atan2, copysign, pow in Tensor ops; softmax in LazyBuffer ops) and whose backward is
  PyTorch's closed-form formula.
- norm.py: layer normalisation with its weight and bias as one Function, in LazyBuffer
  ops (the chain's forward graph; a closed-form backward).
- matmul.py: matmul as one Function, in LazyBuffer ops (the graph its Tensor ops built).
- views.py: a chain of movement ops as one Function (`Moves` on a `ViewChain`).
- conv.py: convolution, whose gradients are convolutions.
- stable.py: values several kernels must read bit for bit alike (`stable_values`, `Stable`).
- tanh.py: the tanh primitive, its float32 and float64 forms (D131).
- engine.py: the reverse traversal behind `Tensor.backward` and `Tensor.gradient`.

Tensor methods (the mixins) only apply these, through `Tensor.apply`. This file imports
nothing, so a module may import one of these without loading the others.
"""
