"""Writes optimized.onnx and for-training.onnx (torch-export-parameters.test): one small model
exported by torch.onnx.export(dynamo=True) with the exporter's default optimizer and without it.

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


torch.manual_seed(0)
here = os.path.dirname(os.path.abspath(__file__))
for optimize, name in ((True, "optimized.onnx"), (False, "for-training.onnx")):
    torch.onnx.export(Net().eval(), (torch.randn(2, 5, 4),), os.path.join(here, name),
                      dynamo=True, optimize=optimize, input_names=["x"], output_names=["logits"],
                      dynamic_shapes={"x": {0: "batch"}}, external_data=False)
