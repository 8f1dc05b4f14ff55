"""Dynamic loss scaling (straitc --loss-scale, the default with --precision f16): GradScaler's
semantics, checked against torch.amp.GradScaler on the same model and data.

The model: logits = x W (one MatMul, W [3, 3]), cross-entropy, AdamW, --precision f16 (x and W
cast to f16, the product and its backward products in f16, as torch.autocast("cpu", float16)
does for the matmul). Every sample of the data set is the same row, so the batch strait-run
samples is the one torch sees.
  - GradScaler: init 2^16, growth interval 3; x is sized so that the f16 gradient of W
    overflows (inf) at scales >= 2^15 and not at 2^14 (the test checks that each step's
    largest scaled value stays 10% away from f16's 65504 either way). Strait's scale after
    every step and its skipped steps equal GradScaler's (two backoffs, growth after three
    finite steps, overflow and backoff again: 4 skips in 12 steps); on every step the
    parameters equal torch's within 1e-7 (measured 7.5e-9; an AdamW whose step count
    advanced on skipped steps is off by 6e-5 to 2e-4);
  - resuming from the checkpoint of step 5 ends bit-identical to the uninterrupted run, the
    scale state included;
  - underflow: a gradient of ~1e-8 per element (below f16's smallest subnormal) is zero
    without loss scaling (SGD leaves W bit-identical) and recovered with it (W moves by lr
    times the f32 gradient, within 1%);
  - two data-parallel replicas, one sample of one replica overflowing f16 in the forward
    (x = 1e5): every step where either replica drew it is skipped by both ranks, with equal
    scales, including steps where the other replica's batch was finite; the same with an
    int8 error-feedback all-reduce (only those steps: the residual keeps no inf/nan), whose
    residual after a skipped step is the one before it times the backoff, exactly.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from jobutil import (GPT2_TINY, STRAIT_RUN, STRAITC, checkpoint_values, cpu_cluster, run,
                     saved_params, write_tokens)

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not (os.path.exists(STRAITC) and os.path.exists(STRAIT_RUN)),
                                reason="needs build/bin/straitc and strait-run")

B, D, C = 4, 3, 3
LR, STEPS, INTERVAL = 1e-3, 12, 3
F16_MAX = 65504.0


def linear_model(path, w, batch=B):
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, w.shape[1]])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def compile_job(d, out, *flags, batch=B):
    run([STRAITC, str(d / "m.onnx"), "--loss", "cross-entropy", "--precision", "f16",
         *map(str, flags), "-o", str(d / out)])
    return d / out


def train(job, d, steps, *extra):
    return run([STRAIT_RUN, str(job), "--steps", str(steps), "--lr", str(LR), "--threads", "1",
                "--data", str(d / "x.npy"), "--labels", str(d / "labels.npy"),
                "--timeout-ms", "60000", *map(str, extra)])


def step_lines(job, rank=0):
    """[(loss, scale, skipped)] of one rank's iterations."""
    text = (job / "logs" / f"rank{rank}.log").read_text()
    return [(float(m.group(1)), float(m.group(2)), m.group(3) is not None)
            for m in re.finditer(r"iteration \d+/\d+ .*? loss (\S+) .*?scale (\S+)( skipped)?",
                                 text)]


checkpoint = checkpoint_values  # {name: array} of one rank of a step folder


def torch_reference(x_row, label, w0, steps):
    """GradScaler + AdamW under CPU autocast(float16): per step (scale after update, skipped,
    W after the step, largest scaled f32 value of the step's f16 tensors)."""
    w = torch.tensor(w0, requires_grad=True)
    opt = torch.optim.AdamW([w], lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_factor=2.0,
                                  backoff_factor=0.5, growth_interval=INTERVAL)
    x = torch.tensor(np.repeat(x_row[None], B, 0))
    y_true = torch.tensor(np.full(B, label, np.int64))
    out = []
    for _ in range(steps):
        opt.zero_grad()
        scale = scaler.get_scale()
        with torch.autocast("cpu", dtype=torch.float16):
            logits = x @ w
        loss = torch.nn.functional.cross_entropy(logits.float(), y_true)
        scaler.scale(loss).backward()
        # The margin: the f16 tensors of the backward (dlogits, dW) in f32, times the scale.
        w32 = w.detach().clone().requires_grad_()
        z = (x @ w32).detach().requires_grad_()
        dz, = torch.autograd.grad(torch.nn.functional.cross_entropy(z, y_true), [z])
        peak = float(max(dz.abs().max(), (x.t() @ dz).abs().max())) * scale
        scaler.step(opt)
        scaler.update()
        out.append((scaler.get_scale(), scaler.get_scale() < scale, w.detach().numpy().copy(),
                     peak))
    return out


@pytest.fixture(scope="module")
def overflow(tmp_path_factory):
    d = tmp_path_factory.mktemp("loss-scale")
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((D, C)) * 0.1).astype(np.float32)
    x_row = rng.standard_normal(D).astype(np.float32)
    label = 1
    # Size x so that the largest f32 gradient of W is 3: 3 * 2^14 = 49152 fits f16, 3 * 2^15
    # does not.
    wt = torch.tensor(w, requires_grad=True)
    xt = torch.tensor(np.repeat(x_row[None], B, 0))
    torch.nn.functional.cross_entropy(xt @ wt, torch.full((B,), label)).backward()
    x_row *= 3.0 / float(wt.grad.abs().max())
    np.save(d / "x.npy", np.repeat(x_row[None], 16, 0))
    np.save(d / "labels.npy", np.full(16, label, np.int64))
    linear_model(d / "m.onnx", w)
    job = compile_job(d, "job", "--optimizer", "adamw", "--loss-scale-interval", INTERVAL)
    train(job, d, STEPS, "--checkpoint", d / "ckpt", "--checkpoint-every", 1)
    return d, job, x_row, label, w, step_lines(job)


def test_scales_and_skips_match_grad_scaler(overflow):
    d, job, x_row, label, w, lines = overflow
    ref = torch_reference(x_row, label, w, STEPS)
    for scale, skipped, _, peak in ref:
        assert abs(peak / F16_MAX - 1) > 0.1, f"a scaled gradient of {peak} is too close to 65504"
    assert len(lines) == STEPS
    assert [s for _, s, _ in lines] == [r[0] for r in ref]
    assert [k for _, _, k in lines] == [r[1] for r in ref]
    # The sequence exercises backoff, growth and overflow after growth.
    skips = [r[1] for r in ref]
    assert skips[:3] == [True, True, False] and sum(skips) >= 4, skips
    for step, (_, skipped, w_ref, _) in enumerate(ref, 1):
        got = checkpoint(d / "ckpt" / f"step-{step}")
        np.testing.assert_allclose(got["w"], w_ref, rtol=0, atol=1e-7,
                                   err_msg=f"W after step {step}")
        state = got["loss_scale.state"]
        assert state[0] == ref[step - 1][0]
        assert state[2] == step - sum(skips[:step])  # updates made: AdamW's step count
    # A skipped step leaves W, m and v bit-identical.
    for step in range(2, STEPS + 1):
        if skips[step - 1]:
            a, b = checkpoint(d / "ckpt" / f"step-{step - 1}"), checkpoint(d / "ckpt" / f"step-{step}")
            for name in ("w", "w.adam_m", "w.adam_v"):
                assert np.array_equal(a[name], b[name]), (name, step)


def test_resume_is_bit_identical(overflow):
    d, job, *_, lines = overflow
    train(job, d, STEPS, "--resume", d / "ckpt" / "step-5", "--checkpoint", d / "resumed",
          "--checkpoint-every", 1)
    assert step_lines(job) == lines[5:]  # losses, scales and skips of steps 6..12
    a, b = checkpoint(d / "ckpt" / f"step-{STEPS}"), checkpoint(d / "resumed" / f"step-{STEPS}")
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name


def test_resume_from_a_checkpoint_without_scale_state(overflow):
    """A checkpoint of the same model trained without loss scaling: the scale starts afresh
    (2^16, which overflows: backed off at once), AdamW's update count from the checkpoint's
    step."""
    d, job, *_ = overflow
    plain = compile_job(d, "plain", "--optimizer", "adamw", "--loss-scale", "none")
    train(plain, d, 2, "--checkpoint", d / "plain-ckpt")
    train(job, d, 4, "--resume", d / "plain-ckpt" / "step-2", "--checkpoint", d / "mixed")
    log = (job / "logs" / "rank0.log").read_text()
    assert "the checkpoint has no loss-scale state: the scale starts at 65536" in log
    assert [x[1:] for x in step_lines(job)] == [(32768.0, True), (16384.0, True)]
    state = checkpoint(d / "mixed" / "step-4")["loss_scale.state"]
    assert list(state) == [16384.0, 0.0, 2.0]  # two updates (the plain job's), two skipped


def test_underflow_recovered_by_scaling(tmp_path):
    d = tmp_path
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((D, C)) * 0.1).astype(np.float32)
    # logits nearly one-hot on the label: dlogits ~ 1e-8 / B, below f16's 6e-8.
    w[:, 0] = 0
    x_row = np.array([1.0, 0.0, 0.0], np.float32)
    w[0] = [19.0, 0.0, 0.0]
    np.save(d / "x.npy", np.repeat(x_row[None], 8, 0))
    np.save(d / "labels.npy", np.zeros(8, np.int64))
    linear_model(d / "m.onnx", w)
    wt = torch.tensor(w, requires_grad=True)
    xt = torch.tensor(np.repeat(x_row[None], B, 0))
    torch.nn.functional.cross_entropy(xt @ wt, torch.zeros(B, dtype=torch.int64)).backward()
    grad = wt.grad.numpy()
    assert 0 < np.abs(grad).max() < 6e-8 * 0.5  # every element flushes to zero in f16
    lr = 1.0
    for scale, moved in (("none", False), ("dynamic", True)):
        job = compile_job(d, f"job-{scale}", "--optimizer", "sgd", "--momentum", 0,
                          "--loss-scale", scale)
        run([STRAIT_RUN, str(job), "--steps", "1", "--lr", str(lr), "--threads", "1",
             "--data", str(d / "x.npy"), "--labels", str(d / "labels.npy"),
             "--save-params", str(d / f"params-{scale}")])
        got = saved_params(str(d / f"params-{scale}"))["w"]
        if not moved:
            assert np.array_equal(got, w), "f16 without scaling should lose the gradient"
        else:
            step = (w - got) / lr
            np.testing.assert_allclose(step, grad, rtol=1e-2, atol=1e-12)
            assert np.abs(step).max() > 0


TWO_RANKS = cpu_cluster("two", [("r0", "h0", "s"), ("r1", "h1", "s")],
                        "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"
                        "  hosts:\n    - {between: [h0, h1], bandwidth_mbps: 1000, "
                        "latency_ms: 0.1}\n")


@pytest.mark.parametrize("codec", ["exact", "int8"])
def test_data_parallel_ranks_skip_together(tmp_path, codec):
    """With --compress int8 the gradient all-reduce is int8 with error feedback, which runs
    before the overflow check: the skipped steps must still be only those where a replica drew
    the overflowing row (a residual that kept the inf/nan would skip every later step)."""
    d = tmp_path
    (d / "two.yaml").write_text(TWO_RANKS)
    rng = np.random.default_rng(2)
    classes = 32  # w [3, 32]: 96 values, enough for a codec (straitc compresses 64 or more)
    w = (rng.standard_normal((D, classes)) * 0.1).astype(np.float32)
    linear_model(d / "m.onnx", w, batch=1)
    rows = rng.standard_normal((8, D)).astype(np.float32)
    rows[5] = 1e5  # overflows f16 in the forward: inf logits, NaN gradients at any scale
    np.save(d / "x.npy", rows)
    np.save(d / "labels.npy", rng.integers(0, classes, 8).astype(np.int64))
    # A scale of 1024: dlogits (at most 1 with one sample) never overflows on a finite row.
    flags = ("--optimizer", "adamw", "--cluster", d / "two.yaml", "--global-batch", 2,
             "--num-stages", 1, "--loss-scale-init", 1024)
    if codec != "exact":
        flags += ("--compress", codec)
    p = run([STRAITC, str(d / "m.onnx"), "--loss", "cross-entropy", "--precision", "f16",
             *map(str, flags), "-o", str(d / "job")])
    job = d / "job"
    if codec != "exact":
        assert "compressed all-reduce of stage 0: int8+ef" in p.stdout, p.stdout
    train(job, d, 16, "--checkpoint", d / "ckpt", "--checkpoint-every", 1)
    r0, r1 = step_lines(job, 0), step_lines(job, 1)
    assert len(r0) == len(r1) == 16
    assert [x[1:] for x in r0] == [x[1:] for x in r1]  # same scale, same skips
    huge = [(not np.isfinite(a[0]) or a[0] > 1e3, not np.isfinite(b[0]) or b[0] > 1e3)
            for a, b in zip(r0, r1)]
    assert [a or b for a, b in huge] == [x[2] for x in r0]
    assert any(a != b for a, b in huge), "no step where only one replica drew the row"
    if codec == "exact":
        return
    # The residual holds S-scaled gradients not yet sent. A skipped step is as if it never ran
    # (its encode is rolled back) and the scale's backoff halves what is owed: the residual after
    # it is the one before it times 0.5, exactly, on both ranks (the finite replica's too). A
    # step taken changes it.
    for rank in (0, 1):
        res = [feedback_residuals(d / "ckpt" / f"step-{s}", rank) for s in range(1, 17)]
        assert all(r.size == 96 and np.isfinite(r).all() for r in res)
        for s in range(2, 17):
            if r0[s - 1][2]:
                assert np.array_equal(res[s - 1], res[s - 2] * np.float32(0.5)), (rank, s)
            else:
                assert not np.array_equal(res[s - 1], res[s - 2]), (rank, s)


def feedback_residuals(step_dir, rank, numel=96):
    """The one error-feedback residual a rank's checkpoint holds (feedback/index.tsv); none
    written (a stream whose only steps were skipped) is zero."""
    folder = step_dir / f"rank{rank}" / "feedback"
    if not (folder / "index.tsv").exists():
        return np.zeros(numel, np.float32)
    lines = (folder / "index.tsv").read_text().splitlines()[1:]
    assert len(lines) == 1, lines
    file, numel, _ = lines[0].split("\t")
    r = np.load(folder / file)
    assert r.size == int(numel)
    return r



@pytest.mark.skipif(not os.path.exists(GPT2_TINY), reason="needs models/gpt2-tiny")
def test_pipeline_stages_agree(tmp_path):
    """gpt2-tiny on 2 pipeline stages (2 micro-batches, 1F1B), f16, an initial scale of 2^40:
    each stage checks its own gradients and the two exchange their flags before the update,
    so both ranks skip the same steps and keep the same scale; once it has backed off below
    the overflow, the job trains (the loss falls; an occasional later overflow is skipped by
    both). The tied embedding keeps a copy per stage, and the copies end bit-identical."""
    d = tmp_path
    (d / "two.yaml").write_text(TWO_RANKS)
    write_tokens(d / "tokens.bin", 1)
    job = d / "job"
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--precision", "f16", "--cluster", str(d / "two.yaml"),
         "--global-batch", "8", "--num-stages", "2", "--micro-batches", "2",
         "--loss-scale-init", str(2.0**40), "-o", str(job)])
    run([STRAIT_RUN, str(job), "--steps", "36", "--lr", "0.003", "--threads", "1",
         "--data", str(d / "tokens.bin"), "--data-format", "tokens-u16",
         "--timeout-ms", "60000", "--save-params", str(d / "params")])
    tied = [np.load(d / "params" / f"lm_head.weight.rank{r}.npy") for r in (0, 1)]
    assert tied[0].tobytes() == tied[1].tobytes()
    scales = []
    for rank in (0, 1):
        text = (job / "logs" / f"rank{rank}.log").read_text()
        scales.append([(float(m.group(1)), m.group(2) is not None) for m in re.finditer(
            r"iteration \d+/\d+ .*?scale (\S+)( skipped)?", text)])
    assert len(scales[0]) == 36 and scales[0] == scales[1]
    skipped = [k for _, k in scales[0]]
    first_update = skipped.index(False)
    assert first_update >= 10  # 2^40 backs off to below f16's overflow first
    losses = [x[0] for x in step_lines(job, 1)]
    assert max(losses[-3:]) < min(losses[:first_update]) - 0.3


def test_growth_stops_below_f32_overflow(tmp_path):
    """GradScaler grows S only to a finite f32: from 2^126 with a growth interval of 1 and
    gradients that stay finite (logits 100 apart), S reaches 2^127 and stays there."""
    d = tmp_path
    w = np.zeros((D, C), np.float32)
    w[0] = [100.0, 0.0, 0.0]
    linear_model(d / "m.onnx", w)
    np.save(d / "x.npy", np.repeat(np.array([[1.0, 0.0, 0.0]], np.float32), 8, 0))
    np.save(d / "labels.npy", np.zeros(8, np.int64))
    job = compile_job(d, "job", "--optimizer", "sgd", "--loss-scale-init", 2.0**126,
                      "--loss-scale-interval", 1)
    train(job, d, 4)
    assert [(np.float32(s), k) for _, s, k in step_lines(job)] == [(np.float32(2.0**127),
                                                                       False)] * 4
