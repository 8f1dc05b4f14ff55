"""Every model input fed from data: strait-run --input NAME=FILE.npy (and --eval-input).

strait-run fed one data input (token ids or npy samples) and `labels`; every other input got
zeros, which for a transformers model's attention_mask masks every position: fine-tuning on
padded sequences trained on garbage without an error. Now:

- a tiny transformers BERT classifier (2 layers, eager attention, no dropout), exported with
  input_ids, attention_mask and token_type_ids, trains 6 SGD steps (momentum 0.9) on padded
  sentence pairs of different lengths with `--data ids.npy --labels y.npy --input
  attention_mask=mask.npy --input token_type_ids=tt.npy`; the losses and final parameters equal
  PyTorch's trained on the same rows. The rows are recomputed here from the sampling contract of
  runtime/lib/data/DataLoader.h (splitmix64 of seed, stream and iteration; replica r of a
  layout feeds rows [rB, (r+1)B) of the iteration's sequence), and --dump-outputs shows the
  fed mask and token types are those rows of the files;
- the mask matters: the same run with `--input-fill attention_mask=1` has other losses, which
  equal PyTorch's with an all-ones mask;
- 2 pipeline stages x 2 replicas with 2 micro-batches each: the first stage's ranks get their
  replica's rows of every input (straitc puts the mask's preprocessing, which reads graph inputs
  only, in the first stage and sends the additive mask on with the activations; a stage whose
  own ops read an input would have it as its own input and be fed the same rows), and the job's
  losses and weights equal the one-rank job's;
- each error (dtype, shape, row count, unknown input, two flags for one input, a mask left unfed
  with npy data, --input with a token file, --input naming the data input, --eval-data without
  --eval-input) stops the job before training with a message naming the input and the file;
- token files (no padding): an unfed attention_mask gets ones and position_ids 0..T-1, with a
  note in the rank's log.
"""
from __future__ import annotations

import io
import os
import re
import subprocess

import numpy as np
import pytest

from jobutil import ROOT, STRAIT_RUN, STRAITC, run

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not (os.path.exists(STRAITC) and os.path.exists(STRAIT_RUN)),
                                reason="needs build/bin/straitc and strait-run")

CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")
V, T, C, N, B = 24, 8, 3, 40, 8  # vocab, sequence, classes, samples, global batch
STEPS, LR, SEED = 6, 0.05, 1234
MASK = 2 ** 64 - 1


def splitmix(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def sample_rows(iteration, count, n=N, seed=SEED, stream=0):
    """DataLoader's sampleOffsets: the rows an iteration feeds, in batch order."""
    base = splitmix(splitmix(splitmix(seed) ^ stream) ^ iteration)
    return [splitmix((base + i) & MASK) % n for i in range(count)]


class Classifier(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.m(input_ids=input_ids, attention_mask=attention_mask,
                      token_type_ids=token_type_ids).logits


def make_model():
    config = transformers.BertConfig(
        vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, type_vocab_size=2, num_labels=C,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.3,
        pad_token_id=V - 1)  # an id the data never holds: no padding_idx row (ONNX has none)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = Classifier(transformers.BertForSequenceClassification(config)).eval()
    # No two parameters equal (zero biases, unit LayerNorm scales): the TorchScript exporter
    # would merge them into one initializer, which then trains as one tied weight.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
            p.add_(0.1 * torch.rand(p.shape))
    return model


def padded_pairs(rng, n):
    """Sentence pairs [CLS] a [SEP] b [SEP] of random lengths, right-padded with 0."""
    ids = np.zeros((n, T), np.int64)
    mask = np.zeros((n, T), np.int64)
    types = np.zeros((n, T), np.int64)
    for i in range(n):
        length = int(rng.integers(3, T + 1))
        first = int(rng.integers(1, length))
        ids[i, :length] = rng.integers(3, V - 1, length)
        mask[i, :length] = 1
        types[i, first:length] = 1
    return ids, mask, types


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("data-inputs")
    model = make_model()
    rng = np.random.default_rng(7)
    ids, mask, types = padded_pairs(rng, N)
    labels = rng.integers(0, C, N).astype(np.int64)
    assert (mask == 0).any() and (mask.sum(1) < T).sum() > N // 2  # most rows padded
    for name, a in (("ids", ids), ("mask", mask), ("tt", types), ("y", labels)):
        np.save(d / f"{name}.npy", a)
    example = tuple(torch.from_numpy(a[:4]) for a in (ids, mask, types))
    buf = io.BytesIO()
    batch = {0: "batch"}
    torch.onnx.export(model, example, buf, dynamo=False, opset_version=17,
                      do_constant_folding=False,
                      input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["logits"],
                      dynamic_axes={"input_ids": batch, "attention_mask": batch,
                                    "token_type_ids": batch, "logits": batch})
    (d / "bert.onnx").write_bytes(buf.getvalue())
    names = {t.name for t in onnx.load(str(d / "bert.onnx")).graph.initializer}
    assert names >= {k for k, _ in model.named_parameters()}, names  # one per parameter
    common = [STRAITC, str(d / "bert.onnx"), "--loss", "cross-entropy", "--optimizer", "sgd"]
    shape = lambda b: ",".join(f"{n}={b}x{T}" for n in  # noqa: E731
                               ("input_ids", "attention_mask", "token_type_ids"))
    run(common + ["--input-shape", shape(B), "--emit=program", "-o", str(d / "single")])
    out = run(common + ["--input-shape", shape(B // 4), "--cluster", CLUSTER, "--num-stages", "2",
                        "--micro-batches", "2", "-o", str(d / "multi")]).stdout
    assert "(4 ranks, 2 stages)" in out, out
    return dict(d=d, model=model, ids=ids, mask=mask, types=types, labels=labels)


def strait_run(job, *extra, steps=STEPS, check=True):
    cmd = [STRAIT_RUN, str(job), "--steps", str(steps), "--lr", str(LR), "--threads", "1",
           "--timeout-ms", "60000", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}\n" \
                                  f"{p.stderr[-3000:]}\n{logs(job)[-3000:]}"
    return p


def logs(job):
    folder = job / "logs"
    return "".join((folder / f).read_text() for f in sorted(os.listdir(folder))) \
        if folder.exists() else ""


def rank_losses(job, rank):
    text = (job / "logs" / f"rank{rank}.log").read_text()
    return [float(x) for x in re.findall(r"iteration \d+/\d+ .*?loss (\S+)", text)]


def load_params(folder, rank):
    out = {}
    with open(folder / f"params.rank{rank}.txt") as f:
        for line in f:
            file, name = line.split()
            out[name] = np.load(folder / file)
    return out


def data_flags(s, mask="mask.npy"):
    d = s["d"]
    return ["--data", str(d / "ids.npy"), "--labels", str(d / "y.npy"),
            "--input", f"attention_mask={d / mask}", "--input", f"token_type_ids={d / 'tt.npy'}"]


def torch_training(s, ones_mask=False):
    """PyTorch on the rows strait-run feeds: losses and final parameters."""
    model = make_model().train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    for it in range(STEPS):
        rows = sample_rows(it, B)
        mask = np.ones((B, T), np.int64) if ones_mask else s["mask"][rows]
        logits = model(torch.from_numpy(s["ids"][rows]), torch.from_numpy(mask),
                       torch.from_numpy(s["types"][rows]))
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(s["labels"][rows]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, {k: v.detach().numpy() for k, v in model.named_parameters()}


def compare_params(got, want, names=None):
    names = names or got.keys()
    for k in names:
        w = want[k]
        assert got[k].shape == w.shape, k
        scale = float(np.abs(w).max()) or 1.0
        np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5 * scale, err_msg=k)


@pytest.fixture(scope="module")
def reference(setup):
    return torch_training(setup)


@pytest.fixture(scope="module")
def single(setup):
    d = setup["d"]
    strait_run(d / "single", *data_flags(setup), "--save-params", str(d / "p1"),
               "--dump-outputs", str(d / "dump1"))
    return rank_losses(d / "single", 0), load_params(d / "p1", 0)


def test_padded_bert_matches_pytorch(setup, reference, single):
    d = setup["d"]
    log = (d / "single" / "logs" / "rank0.log").read_text()
    assert "input 'attention_mask' <- " in log and "gets no data" not in log, log
    want_losses, want_params = reference
    losses, params = single
    assert len(losses) == STEPS
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4)
    assert params.keys() <= want_params.keys() and len(params) == len(want_params)
    compare_params(params, want_params)
    # The weights moved, and the fed arrays are the last iteration's rows of the files.
    initial = {k: v.detach().numpy() for k, v in make_model().named_parameters()}
    assert max(float(np.abs(params[k] - v).max()) for k, v in initial.items()) > 1e-3
    rows = sample_rows(STEPS - 1, B)
    for name, whole in (("input_ids", setup["ids"]), ("attention_mask", setup["mask"]),
                        ("token_type_ids", setup["types"])):
        np.testing.assert_array_equal(np.load(d / "dump1" / f"{name}.rank0.npy"), whole[rows],
                                      err_msg=name)


def test_the_mask_matters(setup, single):
    d = setup["d"]
    flags = data_flags(setup)
    at = flags.index(f"attention_mask={d / 'mask.npy'}")
    del flags[at - 1:at + 1]
    strait_run(d / "single", *flags, "--input-fill", "attention_mask=1")
    ones = rank_losses(d / "single", 0)
    padded, _ = single
    assert max(abs(a - b) for a, b in zip(ones, padded)) > 1e-3, (ones, padded)
    want, _ = torch_training(setup, ones_mask=True)
    np.testing.assert_allclose(ones, want, rtol=1e-4)


def test_two_stages_two_replicas_equal_one_rank(setup, single):
    d = setup["d"]
    multi = d / "multi"
    strait_run(multi, *data_flags(setup), "--save-params", str(d / "p4"),
               "--dump-outputs", str(d / "dump4"))
    # Ranks 2, 3: the last stage of replicas 0, 1; their mean loss is the one-rank job's.
    per_replica = [rank_losses(multi, 2), rank_losses(multi, 3)]
    got = [(a + b) / 2 for a, b in zip(*per_replica)]
    ref_losses, ref_params = single
    np.testing.assert_allclose(got, ref_losses, rtol=1e-5)
    assert per_replica[0] != per_replica[1]
    ranks = {r: load_params(d / "p4", r) for r in range(4)}
    assert set(ranks[0]) | set(ranks[2]) == set(ref_params)
    for r in range(4):
        compare_params(ranks[r], ref_params)
    # Every rank that reads attention_mask (the first stage's) gets its replica's rows:
    # replica k (rank r, k = r % 2) feeds rows [4k, 4k+4) of the one-rank job's batch.
    rows = sample_rows(STEPS - 1, B)
    fed = set()
    for r in range(4):
        for name, whole in (("attention_mask", setup["mask"]), ("token_type_ids", setup["types"]),
                            ("input_ids", setup["ids"])):
            f = d / "dump4" / f"{name}.rank{r}.npy"
            if f.exists():
                k = r % 2
                np.testing.assert_array_equal(np.load(f), whole[rows[4 * k:4 * k + 4]],
                                              err_msg=str(f))
                fed.add((name, r))
    assert {(n, r) for n in ("attention_mask", "token_type_ids") for r in (0, 1)} <= fed, fed


def run_error(job, *flags):
    p = strait_run(job, *flags, steps=1, check=False)
    out = p.stdout + p.stderr + logs(job)
    assert p.returncode != 0, out
    assert "iteration 1/1" not in out, out
    return out


def test_errors(setup, tmp_path):
    s, d = setup, setup["d"]
    job = d / "single"
    base = ["--data", str(d / "ids.npy"), "--labels", str(d / "y.npy"),
            "--input", f"token_type_ids={d / 'tt.npy'}"]
    cases = {
        "int32": (s["mask"].astype(np.int32),
                  "input 'attention_mask' (i64[8x8]) does not match the dtype '<i4' of "),
        "wide": (np.ones((N, T + 1), np.int64),
                 "does not fit {f}: expected [40x8] (N samples of the input's per-sample "
                 "shape), got [40x9]"),
        "short": (s["mask"][:-1], "{f} of shape [39x8] holds 39 rows but --data "
                  f"{d / 'ids.npy'} holds 40 samples"),
    }
    for name, (array, message) in cases.items():
        f = tmp_path / f"{name}.npy"
        np.save(f, array)
        out = run_error(job, *base, "--input", f"attention_mask={f}")
        assert message.format(f=f) in out, (name, out)
    out = run_error(job, *base, "--input", f"attention_mask={d / 'mask.npy'}",
                    "--input", f"attn_mask={d / 'mask.npy'}")
    assert "--input attn_mask: no program of the job has an input 'attn_mask' (its inputs: " \
           "'input_ids', 'attention_mask', 'token_type_ids', 'labels')" in out, out
    out = run_error(job, *base, "--input", f"attention_mask={d / 'mask.npy'}",
                    "--input", f"attention_mask={d / 'mask.npy'}")
    assert "two --input flags name input 'attention_mask'" in out, out
    out = run_error(job, *base)
    assert "input 'attention_mask' (i64[8x8]) gets no data and is named like a mask" in out, out
    assert "--input attention_mask=FILE.npy" in out, out
    out = run_error(job, *base, "--input", f"attention_mask={d / 'mask.npy'}",
                    "--input", f"input_ids={d / 'ids.npy'}")
    assert "--input input_ids: 'input_ids' is the data input" in out, out
    out = run_error(job, *base, "--input", f"attention_mask={d / 'mask.npy'}",
                    "--eval-data", str(d / "ids.npy"), "--eval-labels", str(d / "y.npy"))
    assert "--eval-input token_type_ids=FILE.npy" in out or \
        "--eval-input attention_mask=FILE.npy" in out, out
    tokens = tmp_path / "t.bin"
    np.arange(200, dtype=np.uint16).tofile(tokens)
    out = run_error(job, "--data", str(tokens), "--input", f"attention_mask={d / 'mask.npy'}")
    assert f"--data {tokens} is a token file" in out, out


def test_eval_input_feeds_held_out_rows(setup):
    """--eval-input: the held-out loss of the padded rows, not of unmasked ones."""
    d = setup["d"]
    flags = data_flags(setup) + [
        "--eval-data", str(d / "ids.npy"), "--eval-labels", str(d / "y.npy"),
        "--eval-input", f"attention_mask={d / 'mask.npy'}",
        "--eval-input", f"token_type_ids={d / 'tt.npy'}", "--eval-batches", "2"]
    p = strait_run(d / "single", *flags, steps=1)
    got = float(re.search(r"eval after step 1/1: loss (\S+)", p.stdout).group(1))
    # PyTorch: the model after one step, on eval batches 0 and 1 (the training sequence's rows).
    model = make_model().train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    rows = sample_rows(0, B)
    t = lambda a, r: torch.from_numpy(a[r])  # noqa: E731
    loss = torch.nn.functional.cross_entropy(
        model(t(setup["ids"], rows), t(setup["mask"], rows), t(setup["types"], rows)),
        t(setup["labels"], rows))
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        want = np.mean([float(torch.nn.functional.cross_entropy(
            model(t(setup["ids"], r), t(setup["mask"], r), t(setup["types"], r)),
            t(setup["labels"], r))) for r in (sample_rows(0, B), sample_rows(1, B))])
    assert abs(got - want) < 1e-4 * max(1.0, abs(want)), (got, want)


def token_model(path):
    """input_ids, attention_mask, position_ids [b, T] -> logits [b, T, V]: (emb[ids] +
    pos[position_ids]) * mask, then a projection."""
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
         helper.make_node("Gather", ["pos", "position_ids"], ["p"]),
         helper.make_node("Add", ["e", "p"], ["h"]),
         helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
         helper.make_node("Unsqueeze", ["m", "axis"], ["m3"]),
         helper.make_node("Mul", ["h", "m3"], ["hm"]),
         helper.make_node("MatMul", ["hm", "w"], ["logits"])],
        "tokens",
        [helper.make_tensor_value_info(n, TensorProto.INT64, [2, T])
         for n in ("input_ids", "attention_mask", "position_ids")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, T, 256])],
        [numpy_helper.from_array(rng.standard_normal((256, 4)).astype(np.float32), "emb"),
         numpy_helper.from_array(rng.standard_normal((T, 4)).astype(np.float32), "pos"),
         numpy_helper.from_array(rng.standard_normal((4, 256)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array([2], np.int64), "axis")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_token_windows_get_ones_and_positions(tmp_path):
    token_model(str(tmp_path / "m.onnx"))
    run([STRAITC, str(tmp_path / "m.onnx"), "--loss", "cross-entropy", "--optimizer", "sgd",
         "-o", str(tmp_path / "job")])
    tokens = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 256, 500).astype(np.uint16).tofile(tokens)
    strait_run(tmp_path / "job", "--data", str(tokens), "--dump-outputs", str(tmp_path / "out"),
               steps=2)
    log = (tmp_path / "job" / "logs" / "rank0.log").read_text()
    assert "input 'attention_mask' <- ones (a mask" in log, log
    assert "input 'position_ids' <- positions 0..7" in log, log
    assert "gets no data" not in log, log
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "attention_mask.rank0.npy"),
                                  np.ones((2, T), np.int64))
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "position_ids.rank0.npy"),
                                  np.tile(np.arange(T), (2, 1)))
