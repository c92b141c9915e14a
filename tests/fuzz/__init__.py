"""A differential fuzzer: random lazy programs run by lazyten and by a numpy reference.

model.py     what the generator knows about a value (Var), dtypes, a program's text
gen.py       the hypothesis strategy that draws programs, and the op-class weights
ops_*.py     one draw function per op: its lazyten source and its numpy reference, side by side
run.py       runs a program both ways, compares values (and gradients), renders a reproducer
"""
