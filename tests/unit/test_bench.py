"""The benchmark suite's registry and oracles (bench/): every workload is selectable and has
inputs; the numpy gradients the layer workloads are checked against agree with finite
differences; a few cheap lazyten cases pass their own checks. Runs without torch; the
torch-side test is skipped when torch is missing."""
import numpy as np
import pytest

from bench import layers, reference
from bench.spec import Target
from bench.worker import per_op
from bench.workloads import BY_NAME, WORKLOADS, inputs, select

LAYER_GROUPS = {"softmax_widths", "attention", "conv3x3", "activations", "embedding", "mlp_train",
                "dispatch"}


def test_names_unique_and_groups_selectable():
    assert len(BY_NAME) == len(WORKLOADS), "duplicate workload names"
    for group in {w.group for w in WORKLOADS}:
        chosen = select(group)
        assert chosen and all(w.group == group for w in chosen), f"--only {group}: {chosen}"
    with pytest.raises(ValueError, match="unknown workload"):
        select("no_such_workload")


def test_layer_groups_only_when_asked():
    default = {w.group for w in select(None)}
    assert not default & LAYER_GROUPS, f"layer groups in the default run: {default & LAYER_GROUPS}"
    assert LAYER_GROUPS <= {w.group for w in select(None, everything=True)}


def test_layer_workloads_have_targets_and_float32_inputs():
    for w in layers.WORKLOADS:
        assert w.targets and all(t.against in w.baselines for t in w.targets), w.name
        assert "torch" in w.baselines, f"{w.name}: no torch eager baseline"
        if w.group == "mlp_train":
            continue
        d = inputs(w.name)
        ids = {"idx"} if w.group == "embedding" else set()  # token ids: int64
        assert all(v.dtype == np.float32 for k, v in d.items() if k not in ids), \
            f"{w.name}: {d.keys()}"
        assert all(d[k].dtype == np.int64 for k in ids), w.name
        if w.group == "softmax_widths":
            assert d["x"].shape == (w.params["rows"], w.params["width"])
        if w.group == "activations":
            assert d["x"].shape == d["grad"].shape == w.params["shape"], w.name
        if w.group in ("attention", "conv3x3") and w.params["backward"]:
            out = d["q"] if w.group == "attention" else d["x"]
            assert d["grad"].shape == out.shape, f"{w.name}: grad {d['grad'].shape}"


def _numeric_grads(f, args, grad, eps=1e-6):
    """Central differences of (f(*args) * grad).sum() with respect to every arg."""
    out = []
    for i, a in enumerate(args):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus, minus = [x.copy() for x in args], [x.copy() for x in args]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            g[idx] = ((f(*plus) - f(*minus)) * grad).sum() / (2 * eps)
        out.append(g)
    return out


def test_embedding_grad_matches_finite_differences():
    rng = np.random.default_rng(2)
    weight, idx, grad = rng.standard_normal((5, 3)), np.array([4, 0, 4, 2]), \
        rng.standard_normal((4, 3))
    expected = _numeric_grads(lambda w: w[idx], [weight], grad)[0]
    np.testing.assert_allclose(reference.embedding_grad(weight.shape, idx, grad), expected,
                               rtol=1e-6, atol=1e-8)


def test_attention_grads_match_finite_differences():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 4)) for _ in range(3))
    grad = rng.standard_normal((2, 3, 4))
    expected = _numeric_grads(lambda *a: reference.attention(*a)[0], [q, k, v], grad)
    for name, got, want in zip("qkv", reference.attention_grads(q, k, v, grad), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=f"d{name}")


def test_conv3x3_grads_match_finite_differences():
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 3, 3)), \
        rng.standard_normal(2)
    grad = rng.standard_normal((2, 2, 4, 5))
    assert reference.conv3x3(x, w, b).shape == grad.shape
    expected = _numeric_grads(reference.conv3x3, [x, w, b], grad)
    for name, got, want in zip(("x", "weight", "bias"), reference.conv3x3_grads(x, w, b, grad),
                               expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=f"d{name}")


@pytest.mark.parametrize("name", ["softmax_64x1000", "log_softmax_64x1000", "layernorm_64x1000",
                                  "attn_fwdbwd_4x4x128x32", "dispatch_numpy", "dispatch_scalar",
                                  "mlp_b64_jit"])
def test_lazyten_case_passes_its_check(name):
    from bench import lazy_layers
    c = lazy_layers.case(name)
    result = c.check(c.run())  # the suite checks the first call
    assert result["ok"], f"{name}: lazyten result differs from the numpy reference: {result}"
    for _ in range(c.warmup):  # later calls (a jit's capture and replay) run too
        c.run()


def test_per_op_divides_by_the_calls():
    result = {"median_s": 2.0, "min_s": 1.0, "max_s": 4.0, "times_s": [1.0, 2.0, 4.0],
              "kernels_per_call": 200}
    per_op(result, 200)
    assert result["median_s"] == 0.01 and result["times_s"] == [0.005, 0.01, 0.02]
    assert result["kernels_per_call"] == 1 and result["ops_per_call"] == 200
    dispatch = Target("within 3x", "speed", 1 / 3, "torch")
    assert dispatch.evaluate(9e-6, 3e-6) == (pytest.approx(1 / 3), True)
    assert dispatch.evaluate(1e-5, 3e-6)[1] is False


def test_torch_side_agrees_with_lazyten():
    pytest.importorskip("torch")
    from bench import base_layers, lazy_layers
    for name in ("softmax_64x1000", "attn_fwd_4x4x128x32", "conv3x3_fwd_8x256x8"):
        want = base_layers.torch_case(name)().numpy()
        got = lazy_layers.case(name).run().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_paired_measurement_alternates_the_sides_in_rounds():
    """`measure_paired` (python -m bench --paired) warms each side up, checks the first
    result, then times blocks of each side in turn: every round holds calls of both, so a
    busy spell of the machine lands on both sides instead of on whichever ran then."""
    import time
    from bench.measure import Side, measure_paired
    order: list[str] = []

    def side(name: str, seconds: float):
        def run():
            order.append(name)
            time.sleep(seconds)
            return name
        return run
    found = measure_paired({"a": Side(side("a", 0.001), warmup=2,
                                      check=lambda out: {"ok": out == "a"}),
                            "b": Side(side("b", 0.003))},
                           repeat=6, budget=0.1, rounds=4)
    assert order[:3] == ["a", "a", "b"]  # the warm-ups, in order
    timed = order[3:]
    blocks = [timed[0]] + [n for prev, n in zip(timed, timed[1:]) if n != prev]
    assert blocks == ["a", "b"] * 4  # four rounds, a block of each side in turn
    assert found["a"]["check"] == {"ok": True} and "check" not in found["b"]
    for name, least in (("a", 0.001), ("b", 0.003)):
        result = found[name]
        assert result["paired"] == 4 and result["runs"] == timed.count(name) >= 6
        assert least <= result["min_s"] <= result["median_s"] <= result["max_s"]
    # a side's block fills its share of the budget (about 0.1 / 4 s) up to max_runs / rounds
    assert timed.count("a") > timed.count("b")


def test_gpu_bench_says_what_it_needs_without_torch(monkeypatch, capsys):
    """`python -m bench --device CUDA` needs torch with CUDA on the same card: without it,
    a message and status 2, not a traceback."""
    import os
    import sys
    from bench.cli import main
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    before = os.environ.get("DEVICE")
    assert main(["--device", "CUDA"]) == 2
    assert "needs PyTorch with CUDA" in capsys.readouterr().err
    assert os.environ.get("DEVICE") == before  # the tests after it keep their device


def test_gpu_bench_target_fields_replace_the_devices(monkeypatch):
    """--target item_tile=16,elementwise_items=0 changes the device's Target for the run."""
    from bench import gpu
    from runtimes import get_runtime
    renderer = get_runtime("NULL_CUDA").renderer
    monkeypatch.setattr(renderer, "target", renderer.target)
    assert gpu._apply_target("NULL_CUDA", "item_tile=16,elementwise_items=0") == \
        {"item_tile": 16, "elementwise_items": 0}
    assert (renderer.target.item_tile, renderer.target.elementwise_items) == (16, 0)
    assert [w.name for w in gpu.WORKLOADS][:2] == ["add", "relu_chain"]


def test_gpu_only_names_gpu_workloads():
    from bench.gpu import WORKLOADS as GPU, chosen_workloads
    assert [w.name for w in chosen_workloads(None)[0]] == [w.name for w in GPU]
    assert [w.name for w in chosen_workloads("add, sum_rows")[0]] == ["add", "sum_rows"]
    assert chosen_workloads("launch")[0] == []
    with pytest.raises(ValueError, match="unknown GPU workload.*activations"):
        chosen_workloads("add,activations")
