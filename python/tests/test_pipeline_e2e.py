"""End to end: gpt2-tiny split into pipeline stages runs on local ranks.

Compiles models/gpt2-tiny for examples/clusters/local-4cpu.yaml with two
forced stages (two data-parallel replicas each: 4 ranks), runs the job with
strait-run and checks
  - every rank finishes,
  - every send has a matching recv (peer, channel) of the same byte size, and
    the cut carries at least the hidden state,
  - training (cross-entropy, SGD): the loss of every step equals the
    single-rank job's (through stage cuts both ways, the gradient all-reduce
    and in-place updates),
  - forward: the logits equal the single-rank job's (--dump-outputs), or, on
    a runtime without output dumping, a scalar mean(logits^2) output.
Inputs are zeros (no --data): every replica sees the same batch, so the
mean all-reduce must reproduce the single-rank gradients exactly.
"""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

import jobutil  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
STRAIT_RUN = jobutil.STRAIT_RUN  # the build's launcher, else build-rt's
PROTO_DIR = os.path.join(ROOT, "runtime", "proto")
MODEL = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")
CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(STRAITC) and os.path.isfile(STRAIT_RUN) and os.path.exists(MODEL)),
    reason="needs build/bin/straitc, strait-run and models/gpt2-tiny")

DTYPE_BYTES = {"DTYPE_F32": 4, "DTYPE_I64": 8, "DTYPE_F16": 2, "DTYPE_BF16": 2,
               "DTYPE_I32": 4, "DTYPE_I8": 1, "DTYPE_BOOL": 1}


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def decode(path, message="Program"):
    with open(path, "rb") as f:
        p = subprocess.run(["protoc", f"--decode=strait.program.{message}", "-I", PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def blocks(text, key):
    """Top-level `key { ... }` blocks of a protobuf text dump."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        if lines[i] == key + " {":
            j, depth = i + 1, 1
            while depth:
                depth += lines[j].count("{") - lines[j].count("}")
                j += 1
            out.append("\n".join(lines[i + 1:j - 1]))
            i = j
        else:
            i += 1
    return out


def field(block, name, default=0):
    m = re.search(rf"^\s*{name}: (\S+)", block, re.M)
    return (m.group(1).strip('"') if m else default)


def transfers(program_text):
    """(kind, peer, channel, bytes) of every send/recv step of a program."""
    sizes = {}
    for v in blocks(program_text, "values"):
        shape = [int(d) for d in re.findall(r"^\s*shape: (\d+)", v, re.M)]
        n = 1
        for d in shape:
            n *= d
        sizes[int(field(v, "id"))] = n * DTYPE_BYTES[field(v, "dtype")]
    out = []
    for s in blocks(program_text, "steps"):
        for kind in ("send", "recv"):
            m = re.search(kind + r" \{([^}]*)\}", s)
            if m:
                b = m.group(1)
                out.append((kind, int(field(b, "peer")), int(field(b, "channel")),
                            sizes[int(field(b, "value_id"))]))
    return out


def losses(log_text):
    """Loss per iteration from a rank log ("rank R iteration i/N ... loss L")."""
    return [float(x) for x in re.findall(r"iteration \d+/\d+ .*?loss (\S+)", log_text)]


def check_transfers(multi):
    """Every send matches a recv of the same size; returns bytes sent per iteration."""
    programs = {r: decode(multi / f"rank{r}.program.pb") for r in range(4)}
    steps = {r: transfers(t) for r, t in programs.items()}
    sent = 0
    for r, ts in steps.items():
        for kind, peer, channel, size in ts:
            other = "recv" if kind == "send" else "send"
            assert (other, r, channel, size) in steps[peer], (r, kind, peer, channel, size)
            sent += size if kind == "send" else 0
    # Replica r of stage 0 (ranks 0, 1) talks to replica r of stage 1 (ranks 2, 3).
    assert all(t[1] == r + 2 for r in (0, 1) for t in steps[r])
    assert all(t[1] == r - 2 for r in (2, 3) for t in steps[r])
    # The cut carries at least the hidden state of the batch: 2x16x64 f32.
    assert sent >= 2 * (2 * 16 * 64 * 4), steps
    # Each stage holds its own weights.
    params = [set(re.findall(r'parameter_name: "([^"]+)"', programs[r])) for r in (0, 2)]
    assert params[0] and params[1] and params[0] != params[1]
    return programs, sent


def run_job(job, *args):
    run([STRAIT_RUN, str(job), "--timeout-ms", "60000", *args])
    logs = {}
    for f in sorted((job / "logs").glob("rank*.log")):
        r = int(f.stem[4:])
        logs[r] = f.read_text()
        assert f"rank {r} done" in logs[r], logs[r][-2000:]
    return logs


def compile_pair(tmp_path, *args, multi_args=()):
    single, multi = tmp_path / "single", tmp_path / "multi"
    base = [STRAITC, MODEL, "--input-shape", "input_ids=2x16", *args]
    run(base + ["--emit=program", "-o", str(single)])
    out = run(base + ["--cluster", CLUSTER, "--num-stages", "2", *multi_args,
                      "-o", str(multi)]).stdout
    assert "(4 ranks, 2 stages)" in out, out
    plan = json.loads((multi / "plan.json").read_text())
    assert [len(s["devices"]) for s in plan["stages"]] == [2, 2]
    return single, multi


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_training_two_stages_match_single_rank(tmp_path, micro_batches):
    # With zero inputs every micro-batch is the same, so two micro-batches of
    # the IR's batch average to the single-rank step's gradients.
    single, multi = compile_pair(tmp_path, "--loss", "cross-entropy", "--optimizer", "sgd",
                                 multi_args=("--micro-batches", str(micro_batches)))
    programs, sent = check_transfers(multi)
    # Replicated stages average their gradients.
    for r in range(4):
        assert "all_reduce {" in programs[r]
        assert "REDUCE_MEAN" in programs[r]
    steps = ["--steps", "4", "--lr", "0.1"]
    ref = losses(run_job(single, *steps)[0])
    logs = run_job(multi, *steps)
    assert len(ref) == 4 and ref[-1] < ref[0], ref
    for r in (2, 3):  # the last stage computes the loss
        got = losses(logs[r])
        assert len(got) == 4, logs[r][-2000:]
        for g, e in zip(got, ref):
            assert abs(g - e) <= 1e-4 * max(1e-3, abs(e)), (r, got, ref)
    if micro_batches > 1:
        assert f"micro_batch: {micro_batches - 1}" in programs[0]
    print(f"training ({micro_batches} micro-batches): bytes sent per iteration {sent}; "
          f"losses {ref} on 1 and 4 ranks")


def test_forward_two_stages_match_single_rank(tmp_path):
    h = subprocess.run([STRAIT_RUN, "--help"], capture_output=True, text=True)
    help_text = h.stdout + h.stderr
    if "--dump-outputs" not in help_text:
        pytest.skip("strait-run has no --dump-outputs")
    np = pytest.importorskip("numpy")
    single, multi = compile_pair(tmp_path)
    _, sent = check_transfers(multi)
    run_job(single, "--steps", "1", "--dump-outputs", str(tmp_path / "out1"))
    run_job(multi, "--steps", "1", "--dump-outputs", str(tmp_path / "out4"))
    ref = np.load(tmp_path / "out1" / "logits.rank0.npy")
    assert ref.shape == (2, 16, 256)
    for r in (2, 3):
        got = np.load(tmp_path / "out4" / f"logits.rank{r}.npy")
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert not (tmp_path / "out4" / "logits.rank0.npy").exists()
    print(f"forward: bytes sent per iteration {sent}; logits equal on 1 and 4 ranks")


def test_quick_start_trains_on_four_ranks(tmp_path):
    """scripts/example.sh (the README's main command), 30 steps, with the existing build:
    4 ranks (2 stages x 2 replicas) and a visibly falling loss."""
    env = dict(os.environ, STRAIT_SKIP_SETUP="1", STRAIT_EXAMPLE_OUT=str(tmp_path),
               STRAIT_BUILD_DIR=BUILD)
    p = subprocess.run([os.path.join(ROOT, "scripts", "example.sh"), "30"], capture_output=True,
                       text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "(4 ranks, 2 stages)" in p.stdout, p.stdout[-3000:]
    assert "all 4 ranks finished" in p.stdout + p.stderr
    steps = [(int(s), float(l)) for s, l in re.findall(r"^step (\d+)/30 loss (\S+)", p.stdout, re.M)]
    assert [s for s, _ in steps] == list(range(1, 31)), p.stdout[-3000:]
    first, last = steps[0][1], sum(l for _, l in steps[-5:]) / 5
    assert last < first - 1.0, (first, last)  # ln(256) = 5.5 -> about 3.2 on byte-level text
    print(f"quick start on 4 ranks: loss {first:.3f} -> {last:.3f} (mean of the last 5 of 30 steps)")


def _check_against_single(logs, ref, tmp_path, tied):
    """The 4-rank job (2 stages x 2 replicas, params saved under p4) against the single-rank
    one (p1): the last stage's ranks print the single-rank losses (1e-4 relative), and the
    tied weight's copies on all ranks are bit-identical and equal the single-rank weight."""
    np = pytest.importorskip("numpy")
    for r in (2, 3):
        got = losses(logs[r])
        assert len(got) == len(ref), logs[r][-2000:]
        for g, e in zip(got, ref):
            assert abs(g - e) <= 1e-4 * max(1e-3, abs(e)), (r, got, ref)
    copies = {r: np.load(tmp_path / "p4" / f"{tied}.rank{r}.npy") for r in range(4)}
    for r in (1, 2, 3):
        assert np.array_equal(copies[r], copies[0]), f"copy of rank {r} differs from rank 0's"
    np.testing.assert_allclose(copies[0], np.load(tmp_path / "p1" / f"{tied}.rank0.npy"),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_tied_embedding_copy_per_stage(tmp_path, micro_batches):
    """gpt2-tiny's tied wte / LM-head weight (lm_head.weight, 256x64 f32) is
    read in both stages: each stage holds its own copy (its params file), the
    weight never crosses the cut per micro-batch, each rank exchanges its
    accumulated partial gradient once per step (one send and one recv of
    256x64 f32, after the last micro-batch), and after the steps both
    stages' copies are bit-identical, equal to the single-rank job's weight,
    with the single-rank job's losses."""
    pytest.importorskip("numpy")
    h = subprocess.run([STRAIT_RUN, "--help"], capture_output=True, text=True)
    if "--save-params" not in h.stdout + h.stderr:
        pytest.skip("strait-run has no --save-params")
    single, multi = compile_pair(tmp_path, "--loss", "cross-entropy", "--optimizer", "sgd",
                                 multi_args=("--micro-batches", str(micro_batches)))
    tied = "lm_head.weight"
    tied_bytes = 256 * 64 * 4
    programs, _ = check_transfers(multi)
    for r in range(4):
        shard = decode(multi / f"rank{r}.params.pb", "ParameterShardFile")
        assert f'name: "{tied}"' in shard, (r, "the stage's params file lacks its copy")
        sizes = {int(field(v, "id")): v for v in blocks(programs[r], "values")}
        tied_steps = []
        for st in blocks(programs[r], "steps"):
            m = re.search(r"(send|recv) \{([^}]*)\}", st)
            if m:
                v = sizes[int(field(m.group(2), "value_id"))]
                n = 4 if field(v, "dtype") == "DTYPE_F32" else 0
                for d in re.findall(r"^\s*shape: (\d+)", v, re.M):
                    n *= int(d)
                if n == tied_bytes:
                    tied_steps.append((m.group(1), st))
        # One send and one recv of the weight-sized partial gradient per step
        # (not per micro-batch: no micro_batch); the forward weight (the same
        # size) is not sent any more.
        assert sorted(k for k, _ in tied_steps) == ["recv", "send"], (r, tied_steps)
        assert all(field(st, "micro_batch", "-1") == "-1" for _, st in tied_steps), tied_steps
    args = ["--steps", "3", "--lr", "0.1"]
    ref = losses(run_job(single, *args, "--save-params", str(tmp_path / "p1"))[0])
    assert len(ref) == 3, ref
    _check_against_single(run_job(multi, *args, "--save-params", str(tmp_path / "p4")), ref,
                          tmp_path, tied)
    print(f"tied weight ({micro_batches} micro-batches): one copy per stage, equal after 3 steps; "
          f"losses {ref}")


@pytest.mark.parametrize("optimizer,micro_batches", [("sgd", 1), ("sgd", 2), ("adamw", 2)])
def test_clip_norm_stage_local(tmp_path, optimizer, micro_batches):
    """--clip-norm 0.1 (active: gpt2-tiny's gradient norm is far above it) in
    two stages: each stage sums the squares of its own gradients and only
    those f32 scalars cross the cut for the norm, once per step. Per step a
    rank sends and receives exactly one scalar (4 bytes) and the tied
    weight's partial gradient (256x64 f32), nothing else; the losses equal
    the single-rank job's (ClipByGlobalNorm in one op), which differ from
    the unclipped job's, and the tied weight's copies stay bit-identical.
    (SGD's step is proportional to the clip scale, so a wrong norm shows in
    the losses; AdamW's is nearly scale-free.)"""
    pytest.importorskip("numpy")
    h = subprocess.run([STRAIT_RUN, "--help"], capture_output=True, text=True)
    if "--save-params" not in h.stdout + h.stderr:
        pytest.skip("strait-run has no --save-params")
    train = ("--loss", "cross-entropy", "--optimizer", optimizer)
    single, multi = compile_pair(tmp_path, *train, "--clip-norm", "0.1",
                                 multi_args=("--micro-batches", str(micro_batches)))
    programs, _ = check_transfers(multi)
    tied = "lm_head.weight"
    for r in range(4):
        # (dtype, shape) of every value; the stage's parameters by name.
        types, params = {}, {}
        for v in blocks(programs[r], "values"):
            t = (field(v, "dtype"), tuple(int(d) for d in re.findall(r"^\s*shape: (\d+)", v, re.M)))
            types[int(field(v, "id"))] = t
            if field(v, "parameter_name", ""):
                params[field(v, "parameter_name")] = t
        assert tied in params and len(params) > 10, (r, sorted(params))
        moved = []
        for st in blocks(programs[r], "steps"):
            m = re.search(r"(send|recv) \{([^}]*)\}", st)
            if m:
                moved.append((m.group(1), types[int(field(m.group(2), "value_id"))],
                              field(st, "micro_batch", "-1")))
        # No gradient of a non-tied parameter crosses the cut (the old clip
        # sent all of one stage's gradients there and back).
        # (An MLP projection has the tied weight's shape: that shape moves
        # once each way, the tied partial gradient.)
        grad_types = {t for n, t in params.items() if t != params[tied]}
        assert not [x for x in moved if x[1] in grad_types], (r, moved)
        assert sorted(k for k, t, _ in moved if t == params[tied]) == ["recv", "send"], (r, moved)
        # One f32 scalar each way (the stages' sums of squares), once per step.
        scalars = sorted(k for k, t, _ in moved if t == ("DTYPE_F32", ()))
        assert scalars == ["recv", "send"], (r, moved)
        if micro_batches > 1:
            per_step = sorted((k, t) for k, t, mb in moved if mb == "-1")
            assert per_step == [("recv", ("DTYPE_F32", ())), ("recv", ("DTYPE_F32", (256, 64))),
                                ("send", ("DTYPE_F32", ())), ("send", ("DTYPE_F32", (256, 64)))], \
                (r, moved)
    unclipped = tmp_path / "unclipped"
    run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", *train, "--emit=program",
         "-o", str(unclipped)])
    args = ["--steps", "4", "--lr", "0.5" if optimizer == "sgd" else "0.01"]
    ref = losses(run_job(single, *args, "--save-params", str(tmp_path / "p1"))[0])
    free = losses(run_job(unclipped, *args)[0])
    assert len(ref) == 4 and ref[-1] < ref[0], ref
    assert max(abs(a - b) for a, b in zip(ref[1:], free[1:])) > 1e-3, (ref, free)
    _check_against_single(run_job(multi, *args, "--save-params", str(tmp_path / "p4")), ref,
                          tmp_path, tied)
    print(f"clip-norm 0.1 ({optimizer}, {micro_batches} micro-batches): losses {ref} on 1 and 4 ranks, "
          f"unclipped {free}")
