"""Imports flow lazyten -> runtimes -> codegen: parse every module, fail on an upward import."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = {"codegen": {"lazyten", "runtimes"}, "runtimes": {"lazyten"}}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):  # function-local and TYPE_CHECKING imports count too
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_upward_imports(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no modules found in {package}"
    bad = {str(f.relative_to(ROOT)): sorted(_imports(f) & FORBIDDEN[package]) for f in files}
    assert not {k: v for k, v in bad.items() if v}


def test_checker_catches_an_upward_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from lazyten.tensor import Tensor\n")
    assert "lazyten" in _imports(f)


def test_codegen_shape_uses_stdlib_only():
    for f in (ROOT / "codegen").rglob("*.py"):
        assert "numpy" not in _imports(f), f"{f} imports numpy"
