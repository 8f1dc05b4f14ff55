"""AQ-SGD on a pipeline cut (straitc --compress aqsgd:B[:GRAD], docs/runtime.md "AQ-SGD").

Compiles models/gpt2-tiny into 2 stages on two sites and checks:
  - the programs: forward activation sends/recvs carry CODEC_AQSGD_INT<B>, the
    activation gradients the plain GRAD codec (default int8), and so does the
    tied weight's per-step exchange of partial gradients, with error feedback
    and keep_decoded (the sender sums the decoded value it sent);
  - the tied copies (lm_head.weight on rank 0 and rank 1) stay bit-identical
    over training with the compressed exchange, and a resumed job restores its
    error-feedback residuals;
  - bad syntax and placements are errors naming the flag or the link;
  - training on a small npy dataset (samples repeat): step 1 sees every
    sample for the first time, so AQ-SGD sends its activations at int8 (m = 0)
    and the job equals a `--compress int8` job bit for bit (losses and
    parameters); later steps differ; the sender's m(x) (rank 0) and the
    receiver's (rank 1), saved with the checkpoint, are bit-identical, zero
    exactly for the samples never drawn;
  - a job resumed from a checkpoint ends bit-identical to the uninterrupted one;
  - ranks without sample identity (no --data, a token file too large for the
    state limit) are refused with errors naming the cut.
The codec against a reference of the update, and both ends' states over
epochs: runtime/test/AqSgdTest.cpp.
"""
from __future__ import annotations

import os
import re
import subprocess

import numpy as np
import pytest

import jobutil
from jobutil import GPT2_TINY as MODEL, PROTO_DIR, STRAITC, STRAIT_RUN, cpu_cluster

pytestmark = jobutil.needs_gpt2_tiny()

CLUSTER = cpu_cluster("two-sites", [("a", "ha", "east"), ("b", "hb", "west")],
                      "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"
                      "  hosts:\n    - {between: [ha, hb], bandwidth_mbps: 100, latency_ms: 0.1}\n")
SAMPLES, T = 12, 16


def sh(cmd, ok=True, timeout=120):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    if ok:
        assert p.returncode == 0, f"{cmd}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def compile_job(tmp, name, compress, stages=2, extra=()):
    cluster = tmp / "cluster.yaml"
    cluster.write_text(CLUSTER)
    job = tmp / name
    p = sh([STRAITC, MODEL, "--input-shape", f"input_ids=2x{T}", "--loss", "cross-entropy",
            "--optimizer", "sgd", "--cluster", cluster, "--num-stages", stages,
            "--micro-batches", 2, "--compress", compress, *extra, "-o", job], ok=False)
    return job, p


def program_text(job, rank):
    with open(job / f"rank{rank}.program.pb", "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def transfer_codecs(text, kind):
    """Codec of each `kind` (send/recv) step: CODEC_NONE where it has none."""
    out = []
    for body in re.findall(rf"^  {kind} {{\n((?:    .*\n)*?)  }}", text, re.M):
        m = re.search(r"codec: (CODEC_\w+)", body)
        out.append(m.group(1) if m else "CODEC_NONE")
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """SAMPLES sequences of T + 1 real text tokens as npy inputs and next-token labels."""
    d = tmp_path_factory.mktemp("aqsgd-data")
    tokens = np.fromfile(os.path.join(jobutil.ROOT, "out", "text", "train.bin"), dtype=np.uint16,
                         count=SAMPLES * (T + 1)) if os.path.exists(
        os.path.join(jobutil.ROOT, "out", "text", "train.bin")) else \
        (np.arange(SAMPLES * (T + 1)) * 7919 % 251).astype(np.uint16)
    seqs = tokens.reshape(SAMPLES, T + 1).astype(np.int64)
    np.save(d / "inputs.npy", seqs[:, :T])
    np.save(d / "labels.npy", seqs[:, 1:])
    return d


def train(job, data, steps, extra=()):
    """Losses printed per step and the saved parameters after `steps` steps."""
    params = job / f"params-{steps}-{len(extra)}"
    p = sh([STRAIT_RUN, job, "--steps", steps, "--lr", "0.05", "--data", data / "inputs.npy",
            "--labels", data / "labels.npy", "--input-name", "input_ids", "--seed", 3,
            "--threads", 1, "--timeout-ms", 60000, "--save-params", params, *extra])
    losses = re.findall(rf"^step \d+/{steps} loss (\S+)", p.stdout, re.M)
    saved = {f: np.load(params / f) for f in sorted(os.listdir(params)) if f.endswith(".npy")}
    return losses, saved, p


def test_programs_carry_aqsgd_forward_and_the_plain_codec_backward(tmp_path):
    job, p = compile_job(tmp_path, "job", "aqsgd:3:int4")
    assert p.returncode == 0, p.stderr
    r0, r1 = program_text(job, 0), program_text(job, 1)
    # Rank 0 (stage 0) sends activations per micro-batch, receives their gradients.
    assert transfer_codecs(r0, "send").count("CODEC_AQSGD_INT3") == 2, transfer_codecs(r0, "send")
    assert "CODEC_AQSGD_INT3" in transfer_codecs(r1, "recv")
    # Two activation gradients and the tied weight's partial gradient (per step).
    assert set(transfer_codecs(r0, "recv")) <= {"CODEC_INT4", "CODEC_NONE"}
    assert transfer_codecs(r0, "recv").count("CODEC_INT4") == 3
    assert transfer_codecs(r1, "send").count("CODEC_INT4") == 3
    for text in (r0, r1):  # the exchange: int4 with error feedback, the sender keeps Q(g + r)
        kept = re.findall(r"^  send {\n((?:    .*\n)*?)  }", text, re.M)
        kept = [b for b in kept if "keep_decoded: true" in b]
        assert len(kept) == 1 and "CODEC_INT4" in kept[0] and "error_feedback: true" in kept[0], \
            kept
    job, p = compile_job(tmp_path, "job2", "aqsgd:2")
    assert p.returncode == 0, p.stderr
    assert transfer_codecs(program_text(job, 0), "recv").count("CODEC_INT8") == 3


@pytest.mark.parametrize("compress,extra,message", [
    ("aqsgd:5", (), "--compress=aqsgd:5: aqsgd:BITS[:GRAD] needs BITS 2, 3 or 4"),
    ("aqsgd", (), "needs BITS 2, 3 or 4"),
    ("aqsgd:2:topk", (), "aqsgd:BITS:GRAD quantizes the activation gradients"),
    ("none", ("--compress-link", "east:west=aqsgd:9"), "east:west=aqsgd:9"),
])
def test_bad_syntax_is_an_error_naming_the_flag(tmp_path, compress, extra, message):
    _, p = compile_job(tmp_path, "bad", compress, extra=extra)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr


def test_aqsgd_on_an_all_reduce_link_is_an_error(tmp_path):
    # One stage, a replica per site: the east-west link carries the gradient all-reduce.
    _, p = compile_job(tmp_path, "dp", "none", stages=1,
                       extra=("--compress-link", "east:west=aqsgd:2"))
    assert p.returncode != 0
    assert "--compress-link=east:west=aqsgd:2: AQ-SGD compresses the forward activations" \
        in p.stderr, p.stderr


def test_step_one_equals_int8_and_both_ends_keep_the_same_state(tmp_path, dataset):
    aq, _ = compile_job(tmp_path, "aq", "aqsgd:2")
    i8, _ = compile_job(tmp_path, "i8", "int8")
    # Step 1: every sample is new: int8 of a - 0 forward, int8 backward.
    l_aq, p_aq, _ = train(aq, dataset, 1)
    l_i8, p_i8, _ = train(i8, dataset, 1)
    assert l_aq == l_i8, (l_aq, l_i8)
    for f in p_i8:
        np.testing.assert_array_equal(p_aq[f], p_i8[f], err_msg=f)
    # Over 8 steps samples repeat: 2-bit deltas, and the jobs part.
    steps = 8
    l_aq, _, _ = train(aq, dataset, steps, ("--checkpoint", tmp_path / "ck"))
    l_i8, _, _ = train(i8, dataset, steps)
    assert len(l_aq) == steps and l_aq != l_i8
    # Per-batch losses are noisy (4 sequences a step); on average they agree.
    mean_aq, mean_i8 = np.mean([float(x) for x in l_aq]), np.mean([float(x) for x in l_i8])
    assert abs(mean_aq - mean_i8) < 0.1 * mean_i8, (l_aq, l_i8)
    ck = tmp_path / "ck" / f"step-{steps}"
    send = np.load(ck / "rank0" / "aqsgd" / "send-p1-c0.m.npy")
    recv = np.load(ck / "rank1" / "aqsgd" / "recv-p0-c0.m.npy")
    seen0 = np.load(ck / "rank0" / "aqsgd" / "send-p1-c0.seen.npy")
    seen1 = np.load(ck / "rank1" / "aqsgd" / "recv-p0-c0.seen.npy")
    assert send.dtype == np.uint16 and send.shape == (SAMPLES, T * 64), send.shape
    np.testing.assert_array_equal(send, recv)
    np.testing.assert_array_equal(seen0, seen1)
    m = send.view(np.float16).astype(np.float32)
    assert 0 < seen0.sum() <= SAMPLES
    assert np.all(np.abs(m[seen0 == 1]).max(axis=1) > 0.1)
    assert np.all(m[seen0 == 0] == 0)


def test_resume_is_bit_identical(tmp_path, dataset):
    job, _ = compile_job(tmp_path, "aq", "aqsgd:2")
    full, p_full, _ = train(job, dataset, 6)
    ck = tmp_path / "ck"
    train(job, dataset, 3, ("--checkpoint", ck))
    resumed, p_res, p = train(job, dataset, 6, ("--resume", ck / "step-3"))
    for r in (0, 1):
        log = (job / "logs" / f"rank{r}.log").read_text()
        assert "restored the AQ-SGD state of 1 cut stream" in log, log[-2000:]
        # The tied exchange's residual (without it the resumed sums differ).
        assert "restored 1 error-feedback residual" in log, log[-2000:]
    assert resumed == full[3:], (resumed, full)
    for f in p_full:
        np.testing.assert_array_equal(p_res[f], p_full[f], err_msg=f)


def test_tied_copies_stay_bit_identical(tmp_path, dataset):
    # The wte / lm_head weight has a copy on each stage; each adds both stages'
    # partial gradients, exchanged at int8 with error feedback. The sender adds
    # the decoded value it sent, so the copies' updates, and the copies, are
    # the same bits after every step (adding its exact partial instead, they
    # part within a step: 6e-5 apart after 20 steps of this job).
    job, _ = compile_job(tmp_path, "aq", "aqsgd:2")
    steps = 12
    params = job / "params"
    p = sh([STRAIT_RUN, job, "--steps", steps, "--lr", "0.05", "--data", dataset / "inputs.npy",
            "--labels", dataset / "labels.npy", "--input-name", "input_ids", "--seed", 3,
            "--threads", 1, "--timeout-ms", 60000, "--save-params", params])
    copies = [np.load(params / f"lm_head.weight.rank{r}.npy") for r in (0, 1)]
    np.testing.assert_array_equal(copies[0], copies[1])
    # The exchange was compressed: rank 0 sends two activations (2-bit deltas,
    # or int8 for new samples: at most 2 x 4.2 KB here) and a 16.7 KB int8
    # partial per step, not the 64 KiB f32 one.
    last = re.findall(r"rank0 sent 1:([\d.]+)KiB", p.stdout)[-1]
    assert float(last) < 30, p.stdout[-1500:]
    # And it trains as the uncompressed job does (per-batch losses are noisy).
    plain, _ = compile_job(tmp_path, "plain", "none")
    l_aq = [float(x) for x in re.findall(rf"^step \d+/{steps} loss (\S+)", p.stdout, re.M)]
    l_plain = [float(x) for x in train(plain, dataset, steps)[0]]
    assert len(l_aq) == steps and abs(np.mean(l_aq) - np.mean(l_plain)) < 0.1 * np.mean(l_plain)


def test_ranks_without_sample_identity_are_refused(tmp_path):
    job, _ = compile_job(tmp_path, "aq", "aqsgd:2")
    p = sh([STRAIT_RUN, job, "--steps", 1, "--timeout-ms", 30000], ok=False)
    assert p.returncode != 0
    assert "AQ-SGD codec, which keeps state per dataset sample: give --data" in \
        p.stdout + p.stderr, p.stderr[-2000:]
    # A token file: every start offset is a sample; m(x) would take ~GiBs.
    tokens = jobutil.write_tokens(tmp_path / "big.bin", 1, n=2_000_000)
    p = sh([STRAIT_RUN, job, "--steps", 1, "--data", tokens, "--timeout-ms", 30000], ok=False)
    assert p.returncode != 0
    out = p.stdout + p.stderr
    assert re.search(r"AQ-SGD on the (send to|recv from) rank \d on channel 0 keeps m\(x\) for "
                     r"\d+ samples x 1024 elements in f16 = \d+ bytes", out), out[-2000:]
