"""Porting is a feature: every runtime module stays small (under 200 lines)."""
import pathlib

import pytest

RUNTIMES = pathlib.Path(__file__).resolve().parents[2] / "runtimes"
MODULES = sorted(p for p in RUNTIMES.glob("*.py")
                 if p.name not in ("__init__.py", "base.py", "disk_cache.py"))


def test_runtimes_are_found():
    assert {"cpu_llvm.py", "opencl.py", "cuda.py", "null.py", "clang.py"} <= {p.name for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_runtime_module_under_200_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines < 200, f"{path.name} has {lines} lines; a runtime module stays under 200"
