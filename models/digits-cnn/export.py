#!/usr/bin/env python3
"""Exports models/digits-cnn/digits-cnn.onnx: a small CNN for scikit-learn's
8x8 handwritten digits (1 x 8 x 8 images, 10 classes), PyTorch's default
initialisation with torch.manual_seed(0), weights included (~7 K parameters).

  Conv 1->16 3x3 pad 1, ReLU, MaxPool 2 -> 16 x 4 x 4
  Conv 16->32 3x3 pad 1, ReLU, MaxPool 2 -> 32 x 2 x 2
  Flatten 128, Gemm 128->10 (logits)

usage: export.py [OUT.onnx]   (input 'images' [N, 1, 8, 8] f32, output 'logits' [N, 10])
"""
import os
import sys

import torch
from torch import nn


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(128, 10)

    def forward(self, images):
        x = nn.functional.max_pool2d(torch.relu(self.conv1(images)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "digits-cnn.onnx")
    torch.manual_seed(0)
    model = DigitsCNN().eval()
    torch.onnx.export(model, (torch.zeros(1, 1, 8, 8),), out, input_names=["images"],
                      output_names=["logits"], dynamic_axes={"images": {0: "N"}, "logits": {0: "N"}},
                      opset_version=17, dynamo=False)
    print(f"wrote {out} ({sum(p.numel() for p in model.parameters())} parameters)")


if __name__ == "__main__":
    main()
