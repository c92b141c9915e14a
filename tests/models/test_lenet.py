"""LeNet-5 trains: a short run of the example on the bundled sample learns the task."""
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_lenet_example_learns_on_the_sample():
    env = dict(os.environ, OFFLINE="1", PYTHONPATH=str(ROOT))
    env.pop("MNIST_DIR", None)
    run = subprocess.run([sys.executable, str(ROOT / "examples/lenet_mnist.py"), "--epochs", "1",
                          "--steps", "40", "--batch-size", "64", "--no-download"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "bundled sample" in run.stdout
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", run.stdout).group(1))
    assert accuracy > 70.0, run.stdout  # chance is 10%; 40 Adam steps get well past 80%
    assert "epoch 1/1" in run.stderr and "loss=" in run.stderr
