"""PyTorch definitions of reckon's model zoo (src/reckon/nn/models/), one function per name.

Each function takes (num_classes, in_channels) and returns a torch.nn.Module whose parameter
and buffer names, shapes and order equal the reckon model of the same name. Golden-file
scripts (scripts/make_param_counts.py and later ones) import this module; it is not a model
library of its own. The torchvision models come from torchvision itself
(`pip install --no-deps torchvision pillow` is enough: only the python model code is used; for
Debian's torch 1.13 under /usr/bin/python3, `apt-get install python3-torchvision`);
the ones torchvision lacks are written here.

    import torch_models
    net = torch_models.build("resnet18")            # the zoo default config
    net = torch_models.build("resnet18", num_classes=10, in_channels=1)

Defaults (DEFAULTS below): the 28x28 models (tinycnn, lenet5) take 1 channel and 10 classes,
resnet18_cifar 3 channels and 10 classes, the ImageNet models 3 channels and 1000 classes.
"""
import torch
from torch import nn

try:
    import torchvision.models as tvm
except ImportError:  # pragma: no cover - the scripts say what to install
    tvm = None

# name -> (num_classes, in_channels, (H, W)): the zoo's defaults (nn/models/registry.cpp).
DEFAULTS = {
    "tinycnn": (10, 1, (28, 28)),
    "lenet5": (10, 1, (28, 28)),
    "alexnet": (1000, 3, (224, 224)),
    "alexnet_tv": (1000, 3, (224, 224)),
    "vgg11": (1000, 3, (224, 224)),
    "vgg16": (1000, 3, (224, 224)),
    "resnet18": (1000, 3, (224, 224)),
    "resnet34": (1000, 3, (224, 224)),
    "resnet50": (1000, 3, (224, 224)),
    "resnet18_cifar": (10, 3, (32, 32)),
    "mobilenet_v2": (1000, 3, (224, 224)),
}


def _tv():
    if tvm is None:
        raise SystemExit("torchvision is needed: pip install --no-deps torchvision pillow "
                         "(Debian's python3: apt-get install python3-torchvision)")
    return tvm


def _with_in_channels(conv, in_channels):
    """conv itself, or a fresh conv like it reading in_channels channels."""
    if conv.in_channels == in_channels:
        return conv
    return nn.Conv2d(in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                     conv.dilation, conv.groups, conv.bias is not None)


# ---- models torchvision does not have ----

def tinycnn(num_classes=10, in_channels=1):
    """reckon's small CNN for 28x28 inputs (24,058 parameters with 1 channel, 10 classes):
    three conv3x3(pad 1, no bias)-BN-ReLU stages of 16, 32, 64 channels, the first two followed
    by maxpool 2 (28 -> 14 -> 7), then global average pooling, flatten and one Linear."""
    features = nn.Sequential(
        nn.Conv2d(in_channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1))
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
    return _Seq2(features, classifier)


class _Seq2(nn.Module):
    """features then classifier (the layout of tinycnn and lenet5)."""

    def __init__(self, features, classifier):
        super().__init__()
        self.features = features
        self.classifier = classifier

    def forward(self, x):
        return self.classifier(self.features(x))


def lenet5(num_classes=10, in_channels=1):
    """LeNet-5 as commonly used on 28x28 (Fashion-)MNIST: conv 6@5x5 pad 2 (28x28), ReLU,
    maxpool 2 (14x14), conv 16@5x5 (10x10), ReLU, maxpool 2 (5x5), flatten 400, fc 120, ReLU,
    fc 84, ReLU, fc num_classes. ReLU and max pooling replace the 1998 paper's scaled tanh and
    trainable subsampling; C3 is fully connected (no sparse connection table); no RBF output.
    61,706 parameters with 1 channel and 10 classes."""
    features = nn.Sequential(
        nn.Conv2d(in_channels, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
    classifier = nn.Sequential(
        nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, num_classes))
    return _Seq2(features, classifier)


class AlexNet(nn.Module):
    """The original single-tower AlexNet (Krizhevsky et al. 2012, without the two-GPU
    grouping): 3x224x224, conv1 96@11x11 s4 p2 (55x55), ReLU, LRN(5, 1e-4, 0.75, 2), maxpool
    3 s2 (27x27); conv2 256@5x5 p2, ReLU, LRN, maxpool 3 s2 (13x13); conv3 384@3x3 p1, ReLU;
    conv4 384@3x3 p1, ReLU; conv5 256@3x3 p1, ReLU; maxpool 3 s2 (6x6); dropout 0.5, fc 4096,
    ReLU, dropout 0.5, fc 4096, ReLU, fc num_classes. 62,378,344 parameters with 1000 classes."""

    def __init__(self, num_classes=1000, in_channels=3):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 96, 11, stride=4, padding=2), nn.ReLU(),
            nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2.0), nn.MaxPool2d(3, 2),
            nn.Conv2d(96, 256, 5, padding=2), nn.ReLU(),
            nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2.0), nn.MaxPool2d(3, 2),
            nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(3, 2))
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(),
            nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def alexnet(num_classes=1000, in_channels=3):
    return AlexNet(num_classes, in_channels)


# ---- torchvision's, with the first conv swapped when in_channels != 3 ----

def alexnet_tv(num_classes=1000, in_channels=3):
    m = _tv().alexnet(num_classes=num_classes)
    m.features[0] = _with_in_channels(m.features[0], in_channels)
    return m


def vgg11(num_classes=1000, in_channels=3):
    m = _tv().vgg11(num_classes=num_classes)
    m.features[0] = _with_in_channels(m.features[0], in_channels)
    return m


def vgg16(num_classes=1000, in_channels=3):
    m = _tv().vgg16(num_classes=num_classes)
    m.features[0] = _with_in_channels(m.features[0], in_channels)
    return m


def resnet18(num_classes=1000, in_channels=3):
    m = _tv().resnet18(num_classes=num_classes)
    m.conv1 = _with_in_channels(m.conv1, in_channels)
    return m


def resnet34(num_classes=1000, in_channels=3):
    m = _tv().resnet34(num_classes=num_classes)
    m.conv1 = _with_in_channels(m.conv1, in_channels)
    return m


def resnet50(num_classes=1000, in_channels=3):
    m = _tv().resnet50(num_classes=num_classes)
    m.conv1 = _with_in_channels(m.conv1, in_channels)
    return m


def resnet18_cifar(num_classes=10, in_channels=3):
    """torchvision's resnet18 with the usual CIFAR stem: conv1 3x3 stride 1 pad 1 (no bias),
    no max pooling (nn.Identity keeps the module list; it holds no parameters)."""
    m = _tv().resnet18(num_classes=num_classes)
    m.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    m.maxpool = nn.Identity()
    return m


def mobilenet_v2(num_classes=1000, in_channels=3):
    m = _tv().mobilenet_v2(num_classes=num_classes)
    m.features[0][0] = _with_in_channels(m.features[0][0], in_channels)
    return m


MODELS = {name: globals()[name] for name in DEFAULTS}


def build(name, num_classes=None, in_channels=None):
    """The torch model `name`; None takes the zoo default for that argument."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    k, c, _ = DEFAULTS[name]
    return MODELS[name](num_classes if num_classes is not None else k,
                        in_channels if in_channels is not None else c)


def input_shape(name, in_channels=None):
    """(C, H, W) of the zoo's default input for `name`."""
    _, c, hw = DEFAULTS[name]
    return (in_channels if in_channels is not None else c, *hw)
