"""--pad-classes end to end: the cross-entropy over padded classes trains like the unpadded one.

graph-build-training-step computes an LM head's logits with the classes padded to a multiple
(zero weight columns and a -inf bias on the padding; GPT-2's 50257 classes become 50304, so
that GPU GEMM rows are 16-byte aligned). The padded classes have probability exp(-inf) = 0,
so the loss and all gradients are those of the real classes; the only differences are the
summation order of the products over the longer rows (losses are printed to 6 digits). gpt2-tiny's 256 classes are padded to
288 here (--pad-classes=96, --pad-classes-min-work=0: a product this small is never padded by
default), in f32 and bf16, and 5 SGD steps are compared with --pad-classes=0 (SGD: a
parameter moves by lr times its gradient, so the comparison sees the gradients; AdamW divides
near-zero gradients by their own size and would magnify rounding).
"""

import os
import re

import numpy as np
import pytest

from jobutil import GPT2_TINY, STRAITC, STRAIT_RUN, needs_gpt2_tiny, run, write_tokens

MODEL = GPT2_TINY

pytestmark = needs_gpt2_tiny()


@pytest.mark.parametrize("precision,loss_rtol,param_atol", [("f32", 1e-5, 1e-6),
                                                            ("bf16", 1e-4, 1e-3)])
def test_padded_classes_train_like_unpadded(tmp_path, precision, loss_rtol, param_atol):
    data = write_tokens(tmp_path / "tokens.bin", seed=99)
    results = {}
    for pad in ("96", "0"):
        args = [STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
                "--optimizer", "sgd", "--precision", precision, f"--pad-classes={pad}",
                "--pad-classes-min-work=0"]
        mlir = run(args + ["--emit=mlir"]).stdout
        job, out = tmp_path / pad, tmp_path / (pad + "-params")
        run(args + ["-o", str(job)])
        p = run([STRAIT_RUN, str(job), "--steps", "5", "--lr", "0.1", "--data", str(data),
                 "--threads", "1", "--timeout-ms", "60000", "--save-params", str(out)])
        losses = [float(x) for x in re.findall(r"^step \d+/5 loss (\S+)", p.stdout, re.M)]
        params = {f: np.load(os.path.join(out, f)).astype(np.float64)
                  for f in sorted(os.listdir(out)) if f.endswith(".npy")}
        results[pad] = (mlir, losses, params)
    (mlir_p, losses_p, params_p), (mlir_u, losses_u, params_u) = results["96"], results["0"]
    # The padded step: the loss (and its gradient, one SoftmaxCrossEntropyLossWithGrad:
    # graph-fuse-loss-grad) reads [32, 288] scores from one Gemm; no [.., 256] logits.
    sce = r"graph\.SoftmaxCrossEntropyLossWithGrad .*: \(tensor<f32>, tensor<32x{}x"
    assert re.search(sce.format(288) + "(f32|bf16)>", mlir_p), mlir_p[-3000:]
    assert re.search(sce.format(256), mlir_u)
    assert "x288x" not in mlir_u
    assert len(losses_p) == 5 and len(losses_u) == 5
    for a, b in zip(losses_p, losses_u):
        assert abs(a - b) <= loss_rtol * abs(b), (losses_p, losses_u)
    assert params_p.keys() == params_u.keys() and len(params_p) > 10
    worst = max(float(np.max(np.abs(params_p[k] - params_u[k]))) for k in params_p)
    assert worst <= param_atol, worst
    print(f"{precision}: losses padded {losses_p} unpadded {losses_u}; "
          f"largest parameter difference {worst:.3g}")
