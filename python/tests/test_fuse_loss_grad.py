"""graph-fuse-loss-grad end to end: the loss and its gradient as one kernel.

A training step's SoftmaxCrossEntropyLoss reads the logits in the forward and its
SoftmaxCrossEntropyLossGrad reads them again in the backward. Autodiff seeds the gradient with
a constant, so graph-fuse-loss-grad (straitc --fuse-loss-grad, on by default) makes the pair one
SoftmaxCrossEntropyLossWithGrad that runs in the forward: the logits are read once and die
there; dScores waits for the backward. Its kernels share the two kernels' row math
(runtime/test/SoftmaxCrossEntropyWithGradTest.cpp checks that bit for bit), so gpt2-tiny trains
to the same losses and bit-identical parameters with and without it, in f32 and bf16, on one
rank and pipelined over two stages with two micro-batches (1F1B order: each micro-batch's
fused kernel runs in its forward, dScores waits for that micro-batch's backward).
"""

import os
import re
import subprocess

import pytest

from jobutil import (GPT2_TINY, PROTO_DIR, ROOT, STRAITC, STRAIT_RUN, kernel_ops, needs_gpt2_tiny,
                     run, train_saving_params, write_tokens)

MODEL = GPT2_TINY
CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")
FUSED = "SoftmaxCrossEntropyLossWithGrad"

pytestmark = needs_gpt2_tiny()


def decode(path):
    with open(path, "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def fused_kernel_steps(text):
    """(label, micro_batch) of each step that runs a SoftmaxCrossEntropyLossWithGrad kernel."""
    ids = {int(m.group(1)) for m in re.finditer(
        rf'^kernels {{\n  id: (\d+)\n(?:  .*\n)*?  op: "{FUSED}"', text, re.M)}
    found = []
    for step in re.finditer(r"^steps \{\n((?:  .*\n)*?)\}", text, re.M):
        body = step.group(1)
        run_ids = {int(x) for x in re.findall(r"^    kernel_ids: (\d+)", body, re.M)}
        if run_ids & ids:
            label = re.search(r'^  label: "([^"]*)"', body, re.M)
            mb = re.search(r"^  micro_batch: (\d+)", body, re.M)
            found.append((label.group(1) if label else "", int(mb.group(1)) if mb else -1))
    return found


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_fused_loss_grad_trains_like_the_pair(tmp_path, precision):
    data = write_tokens(tmp_path / "tokens.bin", seed=47)
    results, ops, texts = {}, {}, {}
    for fuse in ("true", "false"):
        job = tmp_path / fuse
        run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
             "--optimizer", "sgd", "--precision", precision, f"--fuse-loss-grad={fuse}",
             "-o", str(job)])
        ops[fuse] = kernel_ops(job)
        texts[fuse] = decode(job / "rank0.program.pb")
        results[fuse] = train_saving_params(job, data, tmp_path / (fuse + "-params"), lr=0.05,
                                            threads=2)
    fused, plain = ops["true"], ops["false"]
    assert fused.count(FUSED) == 1 and FUSED not in plain
    assert "SoftmaxCrossEntropyLoss" not in fused and "SoftmaxCrossEntropyLossGrad" not in fused
    assert plain.count("SoftmaxCrossEntropyLoss") == 1
    assert plain.count("SoftmaxCrossEntropyLossGrad") == 1
    assert len(fused) == len(plain) - 1
    # The fused kernel runs in the forward step.
    steps = fused_kernel_steps(texts["true"])
    assert len(steps) == 1 and "forward" in steps[0][0], steps
    # bf16: it reads the bf16 logits and writes bf16 dScores (after graph-cast-motion).
    if precision == "bf16":
        assert re.search(r"graph\.SoftmaxCrossEntropyLossWithGrad .*: \(tensor<f32>, "
                         r"tensor<32x256xbf16>, tensor<32xi64>\) -> \(tensor<f32>, "
                         r"tensor<32x256xbf16>\)",
                         run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss",
                              "cross-entropy", "--optimizer", "sgd", "--precision", "bf16",
                              "--emit=mlir"]).stdout)
    (losses_f, params_f), (losses_p, params_p) = results["true"], results["false"]
    assert len(losses_f) == 5 and float(losses_f[-1]) < float(losses_f[0]), losses_f
    assert losses_f == losses_p, (losses_f, losses_p)
    assert params_f.keys() == params_p.keys() and len(params_f) > 10
    differ = [k for k in params_f if params_f[k].tobytes() != params_p[k].tobytes()]
    assert not differ, f"parameters differ fused vs apart: {differ[:5]}"
    print(f"{precision}: kernels {len(plain)} -> {len(fused)}; losses {losses_f}")


def test_pipelined_micro_batches(tmp_path):
    """Two stages of two replicas (4 ranks), two micro-batches: each micro-batch's fused kernel
    runs in its forward step on the last stage; the losses equal the unfused job's."""
    data = write_tokens(tmp_path / "tokens.bin", seed=53)
    losses = {}
    for fuse in ("true", "false"):
        job = tmp_path / fuse
        out = run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
                   "--optimizer", "sgd", f"--fuse-loss-grad={fuse}", "--cluster", CLUSTER,
                   "--num-stages", "2", "--micro-batches", "2", "-o", str(job)]).stdout
        assert "(4 ranks, 2 stages)" in out, out
        texts = {r: decode(job / f"rank{r}.program.pb") for r in range(4)}
        for r in range(4):
            steps = fused_kernel_steps(texts[r])
            if fuse == "false" or r < 2:
                assert not steps, (r, steps)
            else:  # the last stage: one fused kernel per micro-batch, each in its forward
                assert sorted(mb for _, mb in steps) == [0, 1], (r, steps)
                assert all("forward" in label for label, _ in steps), (r, steps)
        p = run([STRAIT_RUN, str(job), "--steps", "4", "--lr", "0.1", "--data", str(data),
                 "--threads", "1", "--timeout-ms", "60000"])
        logs = {int(f.stem[4:]): f.read_text() for f in sorted((job / "logs").glob("rank*.log"))}
        assert sorted(logs) == [0, 1, 2, 3], p.stdout[-2000:]
        for r, log in logs.items():
            assert f"rank {r} done" in log, log[-2000:]
        # The last stage's replicas report the loss ("rank R iteration i/N ... loss L").
        losses[fuse] = [re.findall(r"iteration \d+/4 .*?loss (\S+)", logs[r]) for r in (2, 3)]
    assert all(len(l) == 4 for l in losses["true"]), losses
    assert float(losses["true"][0][-1]) < float(losses["true"][0][0]), losses
    assert losses["true"] == losses["false"], losses
