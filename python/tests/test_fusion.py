"""graph-fuse-elementwise end to end: gpt2-tiny trains to the same losses.

Compiles the gpt2-tiny training step twice (--fuse=elementwise, the
default, and --fuse=none), runs both on the CPU runtime for a few steps on
the same token data and checks:
  - the fused program has fewer kernels, FusedElementwise among them;
  - the losses of every step agree. The fused CPU kernel evaluates the same
    f32 operations as the unfused kernels in the same order per element
    (runtime/test/FusedTest.cpp checks bit equality op by op), so the only
    expected difference is none at all; the tolerance (1e-5 relative) only
    leaves room for a libm that vectorizes differently in the two loops.
"""

import os
import re
import subprocess

import pytest

from jobutil import (GPT2_TINY, PROTO_DIR, ROOT, STRAITC, STRAIT_RUN, kernel_ops, needs_gpt2_tiny,
                     run, step_losses, train_saving_params, write_tokens)

MODEL = GPT2_TINY

pytestmark = needs_gpt2_tiny()


def compile_job(tmp_path, fuse):
    job = tmp_path / fuse
    run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
         "--optimizer", "sgd", f"--fuse={fuse}", "-o", str(job)])
    return job


def test_fused_gpt2_tiny_trains_like_unfused(tmp_path):
    # Token ids below gpt2-tiny's 256-entry vocabulary, fixed seed.
    data = write_tokens(tmp_path / "tokens.bin", seed=12345)

    fused, unfused = compile_job(tmp_path, "elementwise"), compile_job(tmp_path, "none")
    ops_f, ops_u = kernel_ops(fused), kernel_ops(unfused)
    n_fused = ops_f.count("FusedElementwise")
    assert n_fused > 0 and "FusedElementwise" not in ops_u
    assert len(ops_f) < len(ops_u), (len(ops_f), len(ops_u))
    elementwise = {"Add", "Sub", "Mul", "Div", "Pow", "Tanh", "Where"}
    print(f"gpt2-tiny training step: {len(ops_u)} kernels unfused, {len(ops_f)} fused "
          f"({n_fused} FusedElementwise; elementwise kernels "
          f"{sum(o in elementwise for o in ops_u)} -> {sum(o in elementwise for o in ops_f)})")

    got, ref = step_losses(fused, data), step_losses(unfused, data)
    assert len(ref) == 5 and len(got) == 5, (got, ref)
    for g, e in zip(got, ref):
        assert abs(g - e) <= 1e-5 * abs(e), (got, ref)
    print(f"losses fused {got} unfused {ref}")


@pytest.mark.parametrize("precision", ["bf16", "f32"])
def test_fused_step_is_bit_identical(tmp_path, precision):
    """The fused step computes exactly what the unfused one does, 16-bit storage and
    recomputation included: under --precision bf16 the casts at a group's edge become
    bf16 loads and stores of the FusedElementwise kernel (f32 registers, stores rounded
    as Cast rounds), and the backward GELU recomputes tanh & co. from the forward's
    product instead of reading four f32 tensors the forward kept. Five AdamW steps of
    gpt2-tiny give the same losses and bit-identical parameters fused and unfused."""
    data = write_tokens(tmp_path / "tokens.bin", seed=777)
    results, mlir = {}, {}
    for fuse in ("elementwise", "none"):
        # --rematerialize=true: a job without a GPU cluster does not recompute by default.
        args = [STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
                "--optimizer", "adamw", "--precision", precision, f"--fuse={fuse}",
                "--rematerialize=true"]
        mlir[fuse] = run(args + ["--emit=mlir"]).stdout
        job = tmp_path / fuse
        run(args + ["-o", str(job)])
        results[fuse] = train_saving_params(job, data, tmp_path / (fuse + "-params"), lr=0.01, threads=1)
    (losses_f, params_f), (losses_u, params_u) = results["elementwise"], results["none"]
    assert len(losses_f) == 5 and losses_f == losses_u, (losses_f, losses_u)
    assert params_f.keys() == params_u.keys() and len(params_f) > 10
    differ = [k for k in params_f if params_f[k].tobytes() != params_u[k].tobytes()]
    assert not differ, f"parameters differ fused vs unfused: {differ[:5]}"

    fused = re.findall(r"graph\.FusedElementwise .*: \((.*)\) -> (.*)$", mlir["elementwise"], re.M)
    hidden = f"tensor<2x16x256x{precision}>"  # the MLP's hidden activation (GELU in and out)
    # The forward GELU: one input and one result (nothing kept for the backward).
    assert any(ins == hidden and out == hidden for ins, out in fused), fused
    # The backward GELU reads two hidden-sized tensors, the forward's product and the
    # incoming gradient, not the four the forward kept before (x, x/2, tanh, 1 + tanh).
    readers = [ins for ins, out in fused if out == hidden and ins.count(hidden) >= 2]
    assert readers and all(ins.count("2x16x256x") == 2 for ins in readers), fused
    if precision == "bf16":
        assert "2x16x256xf32" not in "".join(ins + out for ins, out in fused), fused
        casts_f, casts_u = mlir["elementwise"].count("graph.Cast "), mlir["none"].count("graph.Cast ")
        assert casts_f < casts_u, (casts_f, casts_u)
        print(f"bf16 gpt2-tiny: graph.Cast {casts_u} unfused -> {casts_f} fused")
    print(f"{precision}: losses {losses_f}, {len(params_f)} parameters bit-identical")


def test_rematerialized_pipeline_is_bit_identical(tmp_path):
    """graph-rematerialize on a pipelined job: gpt2-tiny in bf16 on 4 ranks (2 stages x 2
    replicas, 2 micro-batches), the clones in the backward of each micro-batch read the
    forward's values of that micro-batch. Losses equal with and without the recomputation,
    and the recomputation did happen (the stage with the MLPs keeps fewer forward values:
    its FusedElementwise kernels have fewer outputs)."""
    data = write_tokens(tmp_path / "tokens.bin", seed=4242)
    cluster = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")
    losses, outputs = {}, {}
    for remat in ("true", "false"):
        job = tmp_path / remat
        run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
             "--optimizer", "adamw", "--precision", "bf16", "--cluster", cluster,
             "--num-stages", "2", "--micro-batches", "2", f"--rematerialize={remat}",
             "-o", str(job)])
        p = run([STRAIT_RUN, str(job), "--steps", "4", "--lr", "0.01", "--data", str(data),
                 "--threads", "1", "--timeout-ms", "60000"])
        losses[remat] = re.findall(r"^step \d+/4 loss (\S+)", p.stdout, re.M)
        outputs[remat] = 0
        for rank in range(4):
            prog = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", PROTO_DIR,
                                   "strait_program.proto"],
                                  stdin=open(job / f"rank{rank}.program.pb", "rb"),
                                  capture_output=True, text=True, check=True).stdout
            for block in re.findall(r'^kernels \{\n((?:  .*\n)*?)\}', prog, re.M):
                if 'op: "FusedElementwise"' in block:
                    outputs[remat] += block.count("\n  outputs:")
    assert len(losses["true"]) == 4 and losses["true"] == losses["false"], losses
    assert outputs["true"] < outputs["false"], outputs
    print(f"4 ranks, 2 micro-batches, bf16: losses {losses['true']} with and without "
          f"recomputation; FusedElementwise outputs {outputs['false']} -> {outputs['true']}")
