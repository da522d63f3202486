"""PyTorch CPU peer of train_bench: the same model, batch, layout (NCHW), thread
count, loss and plain SGD step; at bf16 the forward and the loss run under
torch.autocast (as a user turns on bf16 training in PyTorch). Works with PyTorch 2.x
and Debian's 1.13.
Usage: torch_bench.py MODEL BATCH THREADS STEPS [WARMUP [PRECISION]]"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from peer_steps import time_steps


class ShortcutA(nn.Module):
    """ResNet option-A shortcut: subsample, then zero channels on both sides."""

    def __init__(self, planes, stride):
        super().__init__()
        self.planes, self.stride = planes, stride

    def forward(self, x):
        pad = (self.planes - x.shape[1]) // 2
        return F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, pad, pad))


class BasicBlock(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = ShortcutA(planes, stride) if stride != 1 or cin != planes else nn.Identity()

    def forward(self, x):
        r = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(r)) + self.shortcut(x))


def cifar_resnet(n, classes=10):
    layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for stage in range(3):
        planes = 16 << stage
        for b in range(n):
            layers.append(BasicBlock(cin, planes, 2 if b == 0 and stage > 0 else 1))
            cin = planes
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes)]
    return nn.Sequential(*layers)


def model(name):
    if name == "resnet50":
        return torchvision.models.resnet50(), (3, 224, 224), 1000
    if name == "resnet20":
        return cifar_resnet(3), (3, 32, 32), 10
    if name == "mnist_cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(128, 10)), (1, 28, 28), 10
    raise SystemExit(f"torch_bench: no peer for model {name}")


def main():
    name, batch, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    warmup = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    precision = sys.argv[6] if len(sys.argv) > 6 else "f32"
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    net, shape, classes = model(name)
    x = torch.sin(torch.arange(batch * shape[0] * shape[1] * shape[2], dtype=torch.float32) * 0.37).view(batch, *shape)
    y = torch.arange(batch) % classes
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    time_steps(step, batch, steps, warmup, f"torch {torch.__version__}")


main()
