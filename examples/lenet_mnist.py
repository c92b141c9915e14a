"""Train LeNet-5 on MNIST with lazyten and report test accuracy.

    python examples/lenet_mnist.py                 # real MNIST if found, else the bundled sample
    python examples/lenet_mnist.py --data DIR      # a directory holding the four IDX .gz files
    DEBUG=2 python examples/lenet_mnist.py --steps 3   # the kernels of a training step

Data comes from --data, $MNIST_DIR, the download cache, a download, or (offline) the
small sample in examples/data/mnist_sample; the first line printed says which. The
example's helpers sit beside it: mnist.py (the data) and progress.py (the progress bar).
"""
from __future__ import annotations
import argparse
import time

import numpy as np

import lazyten
from lazyten import Tensor, nn, optim

from mnist import mnist  # examples/mnist.py: this script's directory is on sys.path
from progress import Progress


class LeNet5(nn.Module):
    """conv(1->6,5)-relu-pool-conv(6->16,5)-relu-pool-fc(256->120)-relu-fc(120->84)-relu-fc(84->10).

    State dict keys are PyTorch's for the same module: conv1.weight, conv1.bias, ... fc3.bias."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(256, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(x).relu().max_pool2d(2)
        x = self.conv2(x).relu().max_pool2d(2)
        x = x.flatten(1)
        return self.fc3(self.fc2(self.fc1(x).relu()).relu())


def normalise(images: np.ndarray) -> np.ndarray:
    return ((images.astype(np.float32) / 255.0 - 0.1307) / 0.3081).reshape(-1, 1, 28, 28)


def evaluate(model: LeNet5, images: np.ndarray, labels: np.ndarray, device: str,
             batch: int = 1000) -> float:
    correct = 0
    model.eval()
    with lazyten.no_grad():
        for i in range(0, len(images), batch):
            logits = model(Tensor(normalise(images[i:i + batch]), device=device))
            correct += int((logits.argmax(axis=1).numpy() == labels[i:i + batch]).sum())
    return correct / len(images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--data", default=None, help="directory with the MNIST IDX files")
    parser.add_argument("--device", default=None, help="CPU (default), OPENCL, CUDA ...")
    parser.add_argument("--steps", type=int, default=0, help="stop each epoch after N steps")
    parser.add_argument("--no-download", action="store_true", help="never use the network")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-accuracy", type=float, default=0.0,
                        help="exit with status 1 if the final test accuracy (%%) is lower")
    args = parser.parse_args()

    x_train, y_train, x_test, y_test, source = mnist(args.data, download=not args.no_download)
    device = args.device or lazyten.tensor.default_device()
    print(f"data: {source}; {len(x_train)} train / {len(x_test)} test images; device {device}")
    Tensor.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = LeNet5().to(device)  # move first, then make the optimiser (as in PyTorch)
    opt = optim.Adam(list(model.parameters()), lr=args.lr)

    @lazyten.jit
    def train_step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y)
        loss.backward()
        opt.step()
        return loss.realize()

    steps_per_epoch = len(x_train) // args.batch_size
    if args.steps:
        steps_per_epoch = min(steps_per_epoch, args.steps)
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        model.train()
        bar = Progress(steps_per_epoch, desc=f"epoch {epoch}/{args.epochs}")
        start = time.perf_counter()
        for step in bar:
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            x = Tensor(normalise(x_train[idx]), device=device)
            y = Tensor(y_train[idx].astype(np.int32), device=device)
            loss = train_step(x, y)
            if step % 10 == 0 or step == steps_per_epoch - 1:
                seen = (step + 1) * args.batch_size
                bar.set(loss=f"{loss.item():.4f}",
                        img_s=f"{seen / (time.perf_counter() - start):.0f}")
        accuracy = evaluate(model, x_test, y_test, device)
        print(f"epoch {epoch}: test accuracy {accuracy * 100:.2f}%")
    if accuracy * 100 < args.min_accuracy:
        raise SystemExit(f"test accuracy {accuracy * 100:.2f}% is below {args.min_accuracy}%")


if __name__ == "__main__":
    main()
