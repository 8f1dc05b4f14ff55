"""Weights out (python -m strait.export; docs/guide.md "Weights out") and straitc --lora-dropout.

A small PyTorch model with the two layouts of a linear layer (a torch Linear, [out, in],
exported as MatMul(x, Transpose(W)); transformers' GPT-2 Conv1D, [in, out], as Gemm(x, W)),
an embedding and an LM head, exported with torch.onnx; Strait trains it a few AdamW steps.
The reference each time is Strait's own forward after the updates (the logits of the next
step, --dump-outputs) and the PyTorch module itself:
* ``onnx``: onnxruntime on the written model gives Strait's logits; the frozen embedding is
  bit-unchanged; external data (forced, and kept when the source model was external) gives the
  same; a wrong shape, dtype or name is an error naming the tensor and its .npy file;
* ``safetensors``: torch ``load_state_dict(load_file(...), strict=True)`` on the module the
  ONNX came from gives Strait's logits, for the TorchScript export and for a dynamo export
  (``optimize=False``, ``--torch-only``);
* ``peft`` (a --lora job): ``peft.PeftModel.from_pretrained(module, folder)`` gives Strait's
  logits (Linear and Conv1D, fan_in_fan_out), and so does the merged safetensors file; on
  models/gpt2-tiny, transformers' GPT2LMHeadModel with the ONNX file's weights and the PEFT
  adapter gives Strait's logits;
* ``--lora-dropout``: two SGD steps against PyTorch with the adapters' masks recomputed in numpy
  from the DropoutTraining hash (test_dropout_training.py's), the mask visibly used; on
  gpt2-tiny, --recompute full (the adapters' Dropouts recomputed) and a resume from a step-2
  checkpoint end bit-identical to the plain run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

from jobutil import (GPT2_TINY, ROOT, STRAITC, STRAIT_RUN, kernel_ops, needs_gpt2_tiny, run,
                     write_tokens)

sys.path.insert(0, os.path.join(ROOT, "python"))
from strait import export, lora  # noqa: E402

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("safetensors")
Conv1D = pytest.importorskip("transformers.pytorch_utils").Conv1D
from onnx import numpy_helper  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from test_dropout_training import mask  # noqa: E402

pytestmark = needs_gpt2_tiny()

B, T, V, D, H = 2, 8, 32, 16, 24
RANK, ALPHA, SEED, STEPS = 4, 8.0, 3, 3


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.q = torch.nn.Linear(D, H)      # [H, D]: MatMul(x, Transpose(W)) + b
        self.c = Conv1D(D, H)               # [H, D] = [in, out]: Gemm(x, W, b)
        self.head = torch.nn.Linear(D, V, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        h = torch.relu(self.q(x))
        return self.head(torch.tanh(self.c(h)) + x)


def ort_logits(path, ids):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(["logits"], {"input_ids": ids})[0]


def close(got, want):
    scale = np.abs(want).max()
    assert np.abs(got - want.reshape(got.shape)).max() <= 1e-5 * scale


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    torch.manual_seed(0)
    net = Net()
    path = tmp / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros(B, T, dtype=torch.long),), str(path),
                          input_names=["input_ids"], output_names=["logits"], dynamo=False,
                          do_constant_folding=False, opset_version=17)
    tokens = np.random.default_rng(1).integers(0, V, T + 1).astype(np.uint16)
    (tmp / "tokens.bin").write_bytes(tokens.tobytes())
    ids = np.tile(tokens[:T].astype(np.int64), (B, 1))
    return dict(net=net, onnx=path, tmp=tmp, tokens=tokens, ids=ids)


def train(model, name, *flags, steps=STEPS, optimizer="adamw", lr=0.01, onnx_path=None):
    """Compiles and trains a job; its saved folder and the logits after `steps` updates."""
    tmp = model["tmp"]
    job = tmp / name
    run([STRAITC, str(onnx_path or model["onnx"]), "--input-shape", f"input_ids={B}x{T}", "--loss",
         "cross-entropy", "--optimizer", optimizer, "--seed", str(SEED), "--step-outputs", "all",
         "-o", str(job), *flags])
    common = ["--lr", str(lr), "--data", str(tmp / "tokens.bin"), "--threads", "1",
              "--timeout-ms", "60000"]
    run([STRAIT_RUN, str(job), "--steps", str(steps), *common, "--save-params",
         str(tmp / (name + "-params"))])
    run([STRAIT_RUN, str(job), "--steps", str(steps + 1), *common, "--quiet",
         "--dump-outputs", str(tmp / (name + "-dump"))])
    return tmp / (name + "-params"), np.load(tmp / (name + "-dump") / "logits.rank0.npy")


@pytest.fixture(scope="module")
def full(model):
    return train(model, "full", "--frozen", "emb.weight")


@pytest.fixture(scope="module")
def adapters(model):
    return train(model, "lora", "--lora", str(RANK), "--lora-alpha", str(ALPHA))


def test_onnx_writes_trained_initializers(model, full, tmp_path):
    params, logits = full
    out = tmp_path / "trained.onnx"
    r = export.write_onnx(model["onnx"], params, out)
    assert r == {"replaced": 6, "kept": 0, "external": False}
    close(ort_logits(out, model["ids"]), logits)
    # Trained weights moved, the frozen embedding did not.
    before = {i.name: numpy_helper.to_array(i) for i in onnx.load(model["onnx"]).graph.initializer}
    after = {i.name: numpy_helper.to_array(i) for i in onnx.load(out).graph.initializer}
    assert np.array_equal(after["emb.weight"], before["emb.weight"])
    assert not np.allclose(after["q.weight"], before["q.weight"])

    # External data: forced, and kept for a model stored that way (auto).
    ext = tmp_path / "ext" / "trained.onnx"
    ext.parent.mkdir()
    assert export.main(["onnx", str(model["onnx"]), str(params), "-o", str(ext),
                        "--external-data", "always"]) == 0
    stored = onnx.load(str(ext), load_external_data=False).graph.initializer
    assert {i.name for i in stored if i.data_location == onnx.TensorProto.EXTERNAL} == {
        "emb.weight", "q.weight", "c.weight", "head.weight"}  # biases < 1 KiB stay inline
    assert (ext.parent / "trained.onnx.data").stat().st_size >= 4 * (2 * V * D + 2 * D * H)
    close(ort_logits(ext, model["ids"]), logits)
    again = tmp_path / "again.onnx"
    assert export.write_onnx(ext, params, again)["external"]
    close(ort_logits(again, model["ids"]), logits)


def test_onnx_bad_parameters_are_named(model, full, tmp_path):
    params, _ = full
    bad = tmp_path / "bad"
    shutil.copytree(params, bad)
    q = next(f for f in os.listdir(bad) if f.startswith("q.weight."))
    np.save(bad / q, np.zeros((D, H), np.float32))
    with pytest.raises(ValueError, match=rf"'q.weight' \(.*{re.escape(q)}\) has shape "
                                         rf"\({D}, {H}\), the model's initializer \({H}, {D}\)"):
        export.write_onnx(model["onnx"], bad, tmp_path / "x.onnx")
    np.save(bad / q, np.zeros((H, D), np.int64))
    with pytest.raises(ValueError, match=r"'q.weight' .* is int64, the model's initializer float32"):
        export.write_onnx(model["onnx"], bad, tmp_path / "x.onnx")
    np.save(bad / q, np.full((H, D), np.nan, np.float32))
    with pytest.raises(ValueError, match=r"'q.weight' .* non-finite"):
        export.write_onnx(model["onnx"], bad, tmp_path / "x.onnx")
    with pytest.raises(ValueError, match=r"no initializer named 'extra'"):
        export.write_onnx(model["onnx"], {"extra": np.zeros(3, np.float32)}, tmp_path / "x.onnx")
    p = subprocess.run([sys.executable, "-m", "strait.export", "onnx", str(model["onnx"]),
                        str(tmp_path), "-o", str(tmp_path / "x.onnx")], capture_output=True,
                       text=True, cwd=os.path.join(ROOT, "python"), timeout=60)
    assert p.returncode == 1 and "not a strait-run --save-params folder" in p.stderr, p.stderr


def test_safetensors_loads_into_torch(model, full, tmp_path):
    params, logits = full
    out = tmp_path / "model.safetensors"
    names = export.write_safetensors(params, out)
    net = Net()
    assert sorted(net.state_dict()) == names
    net.load_state_dict(load_file(str(out)), strict=True)
    with torch.no_grad():
        close(net(torch.tensor(model["ids"])).numpy(), logits)
    with pytest.raises(ValueError, match="torch_only needs the ONNX model"):
        export.write_safetensors(params, out, torch_only=True)


def test_safetensors_of_a_dynamo_export(model, tmp_path):
    """torch.onnx.export(dynamo=True, optimize=False): the initializers are the state_dict's
    names and layouts, marked as parameters; --torch-only keeps exactly those."""
    path = tmp_path / "dynamo.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model["net"], (torch.zeros(B, T, dtype=torch.long),), str(path),
                          input_names=["input_ids"], output_names=["logits"], dynamo=True,
                          optimize=False, verbose=False)
    params, logits = train(model, "dynamo", "--momentum", "0", steps=2, optimizer="sgd", lr=0.1,
                           onnx_path=path)
    out = tmp_path / "model.safetensors"
    assert export.main(["safetensors", str(params), "-o", str(out), "--model", str(path),
                        "--torch-only"]) == 0
    net = Net()
    net.load_state_dict(load_file(str(out)), strict=True)
    with torch.no_grad():
        got = net(torch.tensor(model["ids"])).numpy()
    close(got, logits)
    assert np.abs(got - model["net"](torch.tensor(model["ids"])).detach().numpy()).max() > 1e-4
    with pytest.raises(ValueError, match="no PyTorch parameter marks"):
        export.write_safetensors(params, out, model["onnx"], torch_only=True)


def test_peft_adapter_loads_into_peft(model, adapters, full, tmp_path):
    peft = pytest.importorskip("peft")
    params, logits = adapters
    folder = tmp_path / "adapter"
    assert export.main(["peft", str(model["onnx"]), str(params), "-o", str(folder)]) == 0
    config = json.loads((folder / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["lora_dropout"]) == (RANK, ALPHA, 0.0)
    assert sorted(config["target_modules"]) == ["c", "q"]
    base = Net()
    base.load_state_dict(model["net"].state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PEFT's fan_in_fan_out correction for Conv1D
        peft_model = peft.PeftModel.from_pretrained(base, str(folder)).eval()
    ids = torch.tensor(model["ids"])
    with torch.no_grad():
        got = peft_model(ids).numpy()
        plain = model["net"](ids).numpy()
    close(got, logits)
    assert np.abs(got - plain).max() > 1e-3 * np.abs(plain).max()  # the adapters act

    # The merged weights as safetensors (the model gives the layouts) load into torch too.
    merged = tmp_path / "merged.safetensors"
    with pytest.raises(ValueError, match="give the ONNX model"):
        export.write_safetensors(params, merged)
    export.write_safetensors(params, merged, model["onnx"])
    net = Net()
    net.load_state_dict(load_file(str(merged)), strict=True)
    with torch.no_grad():
        close(net(ids).numpy(), logits)
    # A job without adapters has no PEFT adapter.
    with pytest.raises(ValueError, match="no LoRA adapters"):
        export.write_peft(model["onnx"], full[0], tmp_path / "none")


def test_peft_adapter_on_transformers_gpt2(tmp_path):
    """models/gpt2-tiny (transformers' GPT-2: Conv1D layers) with --lora 4 --lora-alpha 16 on
    every linear layer and the LM head, 3 AdamW steps: GPT2LMHeadModel + the PEFT adapter gives
    Strait's next-step logits. The head's weight is the tied embedding's: Strait adapts its
    product only (a remark says so), as PEFT adapts the lm_head Linear only, and a merge into
    the one ONNX weight is refused."""
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    job, params, dump = tmp_path / "job", tmp_path / "params", tmp_path / "dump"
    p = run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
             "--optimizer", "adamw", "--lora", "4", "--lora-alpha", "16", "--lora-targets",
             "*.c_attn.weight,*.c_proj.weight,*.c_fc.weight,lm_head.weight",
             "--step-outputs", "all", "-o", str(job)])
    assert ("remark: graph-add-lora: 'lm_head.weight' is adapted in its 1 product(s) only; 1 "
            "other op(s) (graph.Gather 'node_embedding') read the base weight") in p.stderr
    data = write_tokens(tmp_path / "tokens.bin", seed=3, n=1 << 12)
    common = ["--lr", "0.01", "--data", str(data), "--threads", "1", "--timeout-ms", "60000"]
    run([STRAIT_RUN, str(job), "--steps", "3", *common, "--save-params", str(params)])
    run([STRAIT_RUN, str(job), "--steps", "4", *common, "--quiet", "--dump-outputs", str(dump)])
    logits = np.load(dump / "logits.rank0.npy")
    ids = torch.tensor(np.load(dump / "input_ids.rank0.npy").astype(np.int64))
    config = export.write_peft(GPT2_TINY, params, tmp_path / "adapter")
    assert len(config["target_modules"]) == 9 and "lm_head" in config["target_modules"]
    with pytest.raises(ValueError, match="'lm_head.weight' is also read by 'node_embedding'"):
        export.write_onnx(GPT2_TINY, params, tmp_path / "merged.onnx")

    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256,
                                  n_positions=128, bos_token_id=0, eos_token_id=0)
    gpt2 = transformers.GPT2LMHeadModel(cfg).eval()
    m = onnx.load(GPT2_TINY)
    weights = {i.name: torch.tensor(numpy_helper.to_array(i)) for i in m.graph.initializer
               if i.name in export.torch_names(m)}
    missing, unexpected = gpt2.load_state_dict(weights, strict=False)
    # The tied embedding and head share one tensor: the file names it once.
    assert not unexpected and len(missing) <= 1 and set(missing) <= {
        "lm_head.weight", "transformer.wte.weight"}, (missing, unexpected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.PeftModel.from_pretrained(gpt2, str(tmp_path / "adapter")).eval()
    with torch.no_grad():
        got = model(input_ids=ids, use_cache=False).logits.numpy()
        with model.disable_adapter():
            plain = model(input_ids=ids, use_cache=False).logits.numpy()
    close(got, logits)
    assert np.abs(got - plain).max() > 1e-3 * np.abs(plain).max()  # the adapters act


def test_lora_dropout_matches_torch(model, tmp_path):
    p_drop, lr, steps = 0.25, 0.5, 2
    params, _ = train(model, "drop", "--lora", str(RANK), "--lora-alpha", str(ALPHA),
                      "--lora-dropout", str(p_drop), "--momentum", "0", steps=steps,
                      optimizer="sgd", lr=lr)
    assert export.lora_record(params)["dropout"] == p_drop
    got = export.load_saved_params(params)
    tok = torch.tensor(model["tokens"].astype(np.int64))
    ids, labels = tok[:T].repeat(B, 1), tok[1:].repeat(B, 1)

    def reference(masked):
        net = model["net"]
        w = {"q": torch.tensor(lora.initial_a("q.weight", D, RANK, SEED), requires_grad=True),
             "c": torch.tensor(lora.initial_a("c.weight", H, RANK, SEED), requires_grad=True)}
        b = {"q": torch.zeros(RANK, H, requires_grad=True),
             "c": torch.zeros(RANK, D, requires_grad=True)}
        s = ALPHA / RANK
        for it in range(1, steps + 1):
            # Keys in program order: q's adapter input [B, T, D], then c's [B*T, H].
            m = [mask(shape, SEED, k, it, -1, p=p_drop) if masked else torch.ones(shape)
                 for k, shape in enumerate([(B, T, D), (B * T, H)])]
            x = net.emb(ids)
            h = torch.relu(net.q(x) + ((x * m[0]) @ w["q"] * s) @ b["q"])
            h2 = h.reshape(B * T, H)
            c = net.c(h2) + ((h2 * m[1]) @ w["c"] * s) @ b["c"]
            out = net.head(torch.tanh(c).reshape(B, T, D) + x)
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, V), labels.reshape(-1))
            grads = torch.autograd.grad(loss, [w["q"], b["q"], w["c"], b["c"]])
            with torch.no_grad():
                for t, g in zip([w["q"], b["q"], w["c"], b["c"]], grads):
                    t -= lr * g
        return {f"{k}.weight.lora_{ab}": v.detach().numpy()
                for k in ("q", "c") for ab, v in (("A", w[k]), ("B", b[k]))}

    ref = reference(True)
    for name, want in ref.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-6, err_msg=name)
    # Without the masks the step differs: the check sees them.
    plain = reference(False)
    assert not np.allclose(got["c.weight.lora_B"], plain["c.weight.lora_B"], rtol=1e-4, atol=1e-6)
    assert not np.allclose(got["q.weight.lora_A"], plain["q.weight.lora_A"], rtol=1e-4, atol=1e-6)


def test_lora_dropout_recompute_and_resume_gpt2(tmp_path):
    data = write_tokens(tmp_path / "tokens.bin", seed=7, n=1 << 12)

    def job(name, *flags):
        run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
             "--optimizer", "adamw", "--lora", "4", "--lora-dropout", "0.2", "-o",
             str(tmp_path / name), *flags])
        return tmp_path / name

    def train(j, out, steps, *flags):
        p = run([STRAIT_RUN, str(j), "--steps", str(steps), "--lr", "0.01", "--data", str(data),
                 "--threads", "1", "--timeout-ms", "60000", "--save-params", str(tmp_path / out),
                 *map(str, flags)])
        return (re.findall(r"^step \d+/\d+ loss (\S+)", p.stdout, re.M),
                export.load_saved_params(tmp_path / out))

    plain, recomputed = job("plain"), job("recompute", "--recompute", "full")
    # 8 adapters' Dropouts (and their gradients); the recomputed blocks draw them again.
    assert kernel_ops(plain).count("DropoutTraining") >= 8
    assert kernel_ops(recomputed).count("DropoutTraining") > kernel_ops(plain).count(
        "DropoutTraining")
    losses, params = train(plain, "p", 4)
    again, rparams = train(recomputed, "r", 4)
    assert again == losses
    train(plain, "first", 2, "--checkpoint", tmp_path / "ck")
    resumed, sparams = train(plain, "s", 4, "--resume", tmp_path / "ck" / "step-2")
    assert resumed == losses[2:]
    for name in params:
        np.testing.assert_array_equal(rparams[name], params[name], err_msg=name)
        np.testing.assert_array_equal(sparams[name], params[name], err_msg=name)


def test_lora_dropout_flag_errors(model, tmp_path):
    base = [STRAITC, str(model["onnx"]), "--input-shape", f"input_ids={B}x{T}", "--loss",
            "cross-entropy", "-o", str(tmp_path / "j")]
    p = subprocess.run(base + ["--lora", "4", "--lora-dropout", "1"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and "--lora-dropout must be a ratio in [0, 1) (got 1)" in p.stderr
    p = subprocess.run(base + ["--lora-dropout", "0.1"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "--lora-dropout and --lora-targets need it" in p.stderr


def test_merge_refuses_a_weight_with_other_readers(tmp_path):
    """A weight adapted in its products only (graph-add-lora's remark: a tied embedding named
    in --lora-targets) cannot be merged: the Gather would change too."""
    from onnx import TensorProto, helper
    w = np.arange(V * D, dtype=np.float32).reshape(V, D) / (V * D)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "ids"], ["e"], name="embed"),
         helper.make_node("MatMul", ["e", "wt"], ["logits"], name="head"),
         helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0])],
        "tied", [helper.make_tensor_value_info("ids", TensorProto.INT64, [B])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, V])],
        [numpy_helper.from_array(w, "w")])
    path = tmp_path / "tied.onnx"
    onnx.save(helper.make_model(graph), str(path))
    params = {"w": w, "w.lora_A": np.ones((D, 2), np.float32),
              "w.lora_B": np.ones((2, V), np.float32)}
    with pytest.raises(ValueError, match=r"'w' is also read by 'embed'.*PEFT adapter"):
        export.write_onnx(path, params, tmp_path / "merged.onnx")
    # Without the Gather the same adapters merge (transposed: W is read through Transpose).
    graph.node.pop(0)
    graph.input[0].CopyFrom(helper.make_tensor_value_info("e", TensorProto.FLOAT, [B, D]))
    onnx.save(helper.make_model(graph), str(path))
    export.write_onnx(path, params, tmp_path / "merged.onnx")
    merged = numpy_helper.to_array(onnx.load(str(tmp_path / "merged.onnx")).graph.initializer[0])
    np.testing.assert_allclose(merged, w + (params["w.lora_A"] @ params["w.lora_B"]).T)
