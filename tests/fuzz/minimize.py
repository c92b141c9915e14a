"""Shrink a failing program to the fewest lines that still fail the same way.

Greedy, from the last line to the first: drop a line together with every later line that
reads a name it defines; keep the smaller program if it still fails with the same key
(category and culprit op). Realize lines and the final realize groups shrink the same way.
Each try reruns the program, so minimizing is bounded by a time budget.
"""
from __future__ import annotations
import re
import time
from dataclasses import replace

from .model import Program

NAME = re.compile(r"\b[xb]\d+\b")


def _names(text: str) -> set[str]:
    return set(NAME.findall(text))


def _without(prog: Program, index: int) -> Program | None:
    """The program without step `index` and the steps that read what it defined."""
    removed = prog.steps[index]
    dead = {removed.out.name} if removed.out is not None and not removed.rebinds else set()
    kept = list(prog.steps[:index])
    for step in prog.steps[index + 1:]:
        if not dead & _names(step.src):
            kept.append(step)
        elif step.out is not None and not step.rebinds:
            dead.add(step.out.name)
        # a realize line or an assign that reads a dead name goes with it
    live = {s.out.name for s in kept if s.out is not None}
    if not any(s.kind != "input" for s in kept):
        return None
    final = [[n for n in group if n in live] for group in prog.final]
    return replace(prog, steps=kept, inputs={k: v for k, v in prog.inputs.items() if k in live},
                   outputs={k: v for k, v in prog.outputs.items() if k in live},
                   final=[g for g in final if g],
                   read_order=[n for n in prog.read_order if n in live],
                   loss=[n for n in prog.loss if n in live],
                   bad_index=prog.bad_index & live)


def minimize(prog: Program, check, key: str, seconds: float = 20.0) -> Program:
    """The smallest program found (within `seconds`) for which check() fails with `key`."""
    deadline = time.perf_counter() + seconds
    changed = True
    while changed and time.perf_counter() < deadline:
        changed = False
        for index in range(len(prog.steps) - 1, -1, -1):
            if index >= len(prog.steps) or time.perf_counter() > deadline:
                break
            smaller = _without(prog, index)
            if smaller is None:
                continue
            try:
                failure = check(smaller)
            except AssertionError:  # the reference disagrees with a shrunk program's facts
                continue
            if failure is not None and failure.key == key:
                prog, changed = smaller, True
        for i in range(len(prog.final)):
            if i < len(prog.final):
                smaller = replace(prog, final=prog.final[:i] + prog.final[i + 1:])
                failure = check(smaller)
                if failure is not None and failure.key == key:
                    prog, changed = smaller, True
    return prog
