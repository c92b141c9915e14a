"""Cyclomatic complexity of every function, counted the way radon 6 counts it (stdlib only).

    python tools/complexity.py codegen --max 15   # functions above 15; exit status 1 if any
    python tools/complexity.py codegen --all      # every function, most complex first

A function's complexity is 1 plus the decision points in its body:
    if, elif, ternary `a if c else b`       +1 each
    for, async for, while                   +1, and +1 more for a loop's `else:` block
    try                                     +1 per `except` clause, +1 for an `else:` block
    and / or                                +1 per operand after the first (`a and b or c`: +2)
    comprehension                           +1 per `for` clause, +1 per `if` clause in it
    match                                   +1 per case, less one for a catch-all `case _:` or
                                            `case name:`
    assert                                  +1; the condition and message are not looked into
    with, finally, else of an if, lambda    +0
A lambda's decisions count toward the function it is written in. A def or class nested in a
function is not part of that function's count: each nested def is listed on its own (radon
reports those as closures, and does not report the methods of a class defined inside a
function; this tool does). Decorators, default values and annotations are not counted.

Where radon's documentation and its code disagree, this follows the code (radon documents
`with` as +1 but does not count it). One deliberate difference: `except*` (Python 3.11) counts
like `except`; radon 6 skips it.
"""
from __future__ import annotations
import argparse
import ast
import pathlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class FunctionComplexity:
    """One function: where it is, its dotted name inside the module, and its complexity."""
    path: str
    line: int
    name: str
    complexity: int


def _loop(node: Any) -> int:
    return 1 + bool(node.orelse)


def _try(node: Any) -> int:
    return len(node.handlers) + bool(node.orelse)


def _match(node: ast.Match) -> int:
    """One per case, less one when a case matches anything (`case _:` or `case name:`)."""
    catch_all = any(isinstance(c.pattern, ast.MatchAs) and c.pattern.pattern is None
                    for c in node.cases)
    return max(0, len(node.cases) - catch_all)


# decision points a node adds by itself, by node type (its children are counted separately)
POINTS: dict[type[ast.AST], Callable[[Any], int]] = {
    ast.If: lambda node: 1,
    ast.IfExp: lambda node: 1,
    ast.For: _loop,
    ast.AsyncFor: _loop,
    ast.While: _loop,
    ast.Try: _try,
    ast.BoolOp: lambda node: len(node.values) - 1,
    ast.comprehension: lambda node: 1 + len(node.ifs),
    ast.Assert: lambda node: 1,
    ast.Match: _match,
}
if sys.version_info >= (3, 11):
    POINTS[ast.TryStar] = _try


def function_complexity(func: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """1 + the decision points of the function's body, nested defs and classes excluded."""
    total = 1
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, SCOPES):
            continue
        points = POINTS.get(type(node))
        if points is not None:
            total += points(node)
        if not isinstance(node, ast.Assert):  # as radon: nothing inside an assert counts
            stack.extend(ast.iter_child_nodes(node))
    return total


def module_functions(source: str, path: str = "<string>") -> list[FunctionComplexity]:
    """Every function and method in a module's source, nested ones included, in file order."""
    tree = ast.parse(source, path)
    out: list[FunctionComplexity] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out.append(FunctionComplexity(path, child.lineno, name,
                                              function_complexity(child)))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return sorted(out, key=lambda f: f.line)


def python_files(paths: Iterable[str]) -> Iterator[pathlib.Path]:
    """The .py files named, and those under the directories named, in sorted order."""
    for p in map(pathlib.Path, paths):
        if p.is_dir():
            yield from sorted(p.rglob("*.py"))
        elif p.suffix == ".py":
            yield p
        else:
            raise FileNotFoundError(f"{p} is neither a directory nor a .py file")


def main(argv: list[str] | None = None) -> int:
    """Print the functions above --max (or every function with --all); 1 if any is above."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", help="files or directories to scan")
    parser.add_argument("--max", type=int, default=15, help="highest allowed complexity")
    parser.add_argument("--all", action="store_true", help="list every function")
    args = parser.parse_args(argv)
    found = [f for p in python_files(args.paths) for f in module_functions(p.read_text(), str(p))]
    over = [f for f in found if f.complexity > args.max]
    for f in sorted(found if args.all else over, key=lambda f: (-f.complexity, f.path, f.line)):
        print(f"{f.path}:{f.line} {f.name} {f.complexity}")
    print(f"{len(found)} functions, {len(over)} above {args.max}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
