"""Runtime conformance suite: every test taking `device` runs once per device.

CPU always; every other runtime in the registry (runtimes.RUNTIMES) when it loads, otherwise
it shows as skipped, with the reason. `DEVICE=NAME pytest tests/backend` checks just that
device and fails if it cannot load. The NULL devices (NULL: OpenCL C, NULL_CUDA: CUDA C)
compute nothing: they run only when chosen, and then only tests marked `null_ok`.
"""
import pytest

from codegen.helpers import getenv
from runtimes import RUNTIMES, canonical, get_runtime

# the NULL devices compute nothing: only when chosen by DEVICE=
OPTIONAL = [name for name in RUNTIMES if name != "CPU" and not name.startswith("NULL")]


def _device_params() -> list:
    chosen = getenv("DEVICE", "")
    if chosen:
        return [canonical(chosen)]
    params = ["CPU"]
    for name in OPTIONAL:
        try:
            get_runtime(name)
            params.append(name)
        except Exception as e:  # a missing package, library or driver: report, don't fail
            reason = f"{name} unavailable: {str(e).split(';')[0]}"
            params.append(pytest.param(name, marks=pytest.mark.skip(reason=reason)))
    return params


DEVICE_PARAMS = _device_params()


def pytest_configure(config):
    config.addinivalue_line("markers", "null_ok: also runs on the NULL device (no values)")


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICE_PARAMS)


@pytest.fixture(autouse=True)
def _skip_values_on_null(request):
    params = getattr(request.node, "callspec", None)
    device = params.params.get("device") if params else None
    if device and device.startswith("NULL") and request.node.get_closest_marker("null_ok") is None:
        pytest.skip("NULL computes no values")
