"""Writes the PyTorch exports of torch-export-parameters.test and torch-export-trainable.test.

optimized.onnx and for-training.onnx: one small model exported by torch.onnx.export(dynamo=True)
with the exporter's default optimizer and without it.

conv-constants.onnx: a small conv net exported with the default optimizer (optimize=True), whose
float initializers are of every kind the exporter knows: parameters (conv.weight, bn.weight,
bn.bias, fc.weight, fc.bias), BatchNorm running statistics (buffers the training step updates), a
float buffer the forward reads (scale) and a constant the optimizer folded from the forward's
arithmetic (val_N, no mark). Parameters and buffers get distinct values: the optimizer merges
initializers of equal value, e.g. a fresh BatchNorm's running_var with its weight (both ones).

bn-merged.onnx: the same conv net freshly initialized, exported with the default optimizer: its
BatchNormalization reads bn.weight as its running variance and bn.bias as its running mean.

    .venv/bin/python test/Target/ONNX/Inputs/torch-export/export.py   (torch 2.15, onnxscript 0.7.2)
"""
import os

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 8)  # a 3-D input: MatMul by the weight's transpose
        self.norm1 = nn.LayerNorm(8)  # norm1 and norm2 start with equal weights and biases
        self.norm2 = nn.LayerNorm(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.norm2(torch.relu(self.norm1(self.embed(x)))).mean(1))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)
        self.register_buffer("scale", torch.tensor([1.5, 0.5, 1.0]))

    def forward(self, x):
        # a Relu between Conv and BatchNorm (the optimizer fuses Conv+BN), one after it (the
        # spatial mean of a BatchNorm's output with batch statistics does not depend on the
        # scale or the input on a batch of equal rows)
        y = torch.relu(self.bn(torch.relu(self.conv(x))))
        gain = torch.linspace(0.5, 1.0, 4).reshape(1, 4, 1, 1)  # folded to an initializer
        return self.fc((y * gain).mean((2, 3))) * self.scale


def conv_net():
    torch.manual_seed(0)
    net = ConvNet()
    with torch.no_grad():  # distinct values: the optimizer merges equal initializers
        net.bn.weight.uniform_(0.5, 1.5)
        net.bn.bias.uniform_(-0.5, 0.5)
        net.bn.running_mean.uniform_(-0.3, 0.3)
        net.bn.running_var.uniform_(0.5, 2.0)
    return net


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(0)
    for optimize, name in ((True, "optimized.onnx"), (False, "for-training.onnx")):
        torch.onnx.export(Net().eval(), (torch.randn(2, 5, 4),), os.path.join(here, name),
                          dynamo=True, optimize=optimize, input_names=["x"],
                          output_names=["logits"], dynamic_shapes={"x": {0: "batch"}},
                          external_data=False)
    torch.onnx.export(conv_net().eval(), (torch.randn(2, 3, 6, 6),),
                      os.path.join(here, "conv-constants.onnx"), dynamo=True,
                      input_names=["x"], output_names=["logits"],
                      dynamic_shapes={"x": {0: "batch"}}, external_data=False)
    torch.manual_seed(0)
    torch.onnx.export(ConvNet().eval(), (torch.randn(2, 3, 6, 6),),
                      os.path.join(here, "bn-merged.onnx"), dynamo=True,
                      input_names=["x"], output_names=["logits"],
                      dynamic_shapes={"x": {0: "batch"}}, external_data=False)
