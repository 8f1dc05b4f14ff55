"""The parameters' 16-bit copies: weight casts leave the iteration.

With --precision bf16 every product reads its weight through a Cast of the f32 variable, once
per iteration. The exporter (straitc --parameter-copies, on by default) makes those casts one
`once` step that runs when the parameters are loaded, into persistent ROLE_PARAMETER_COPY
values, and AdamW writes the copy of each new parameter as it updates it (a fourth output
group, rounded as Cast rounds). Variables nothing assigns (frozen ones) are cast once and never
again; SGD's variables keep their per-iteration casts. The result is exact: gpt2-tiny trains
to the same losses and bit-identical parameters with and without the copies, on one rank and
pipelined over two stages with two micro-batches.
"""

import os
import re

import pytest

from jobutil import (GPT2_TINY, ROOT, STRAITC, needs_gpt2_tiny, run, train_saving_params,
                     write_tokens)
from test_fuse_loss_grad import decode

MODEL = GPT2_TINY
CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")

pytestmark = needs_gpt2_tiny()


def ops_of(text):
    """Op of every kernel of a decoded program."""
    return re.findall(r'^kernels \{\n(?:  .*\n)*?  op: "([^"]+)"', text, re.M)


def once_kernel_ids(text):
    """Kernel ids of the program's `once` steps."""
    ids = set()
    for step in re.finditer(r"^steps \{\n((?:  .*\n)*?)\}", text, re.M):
        if re.search(r"^  once: true", step.group(1), re.M):
            ids |= {int(x) for x in re.findall(r"^    kernel_ids: (\d+)", step.group(1), re.M)}
    return ids


def compile_and_train(tmp_path, name, data, extra):
    job = tmp_path / name
    run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--precision", "bf16", "-o", str(job)] + extra)
    losses, params = train_saving_params(job, data, tmp_path / (name + "-params"), lr=0.01)
    return job, losses, params


@pytest.mark.parametrize("layout", ["one-rank", "two-stages"])
def test_copies_train_like_per_step_casts(tmp_path, layout):
    data = write_tokens(tmp_path / "tokens.bin", seed=53)
    extra = [] if layout == "one-rank" else [
        "--cluster", CLUSTER, "--num-stages", "2", "--micro-batches", "2"]
    results = {}
    for copies in ("true", "false"):
        results[copies] = compile_and_train(tmp_path, copies, data,
                                            extra + [f"--parameter-copies={copies}"])
    (job_on, losses_on, params_on), (job_off, losses_off, params_off) = (
        results["true"], results["false"])
    assert len(losses_on) == 5 and losses_on == losses_off, (losses_on, losses_off)
    assert params_on.keys() == params_off.keys() and params_on
    for name in params_on:
        assert params_on[name].tobytes() == params_off[name].tobytes(), name
    # Not vacuous: the parameters were trained.
    assert float(losses_on[0]) != float(losses_on[-1])
    # Every rank: the casts of its weights are in the once step, none in the iteration; AdamW
    # writes the copies.
    for program in sorted(job_on.glob("rank*.program.pb")):
        text_on, text_off = decode(program), decode(job_off / program.name)
        once = once_kernel_ids(text_on)
        assert once, program.name
        ops_on, ops_off = ops_of(text_on), ops_of(text_off)
        # Each micro-batch cast the weights: the once step replaces that many casts.
        per_step_casts = ops_on.count("Cast") - len(once)
        micro_batches = 1 if layout == "one-rank" else 2
        assert ops_off.count("Cast") - per_step_casts == micro_batches * len(once), program.name
        assert not once_kernel_ids(text_off)
        copies = re.findall(r"role: ROLE_PARAMETER_COPY", text_on)
        assert len(copies) == len(once), program.name
        assert "ROLE_PARAMETER_COPY" not in text_off


def adamw_copy_outputs(text):
    """(tensors, present 16-bit copies) of the program's AdamW kernel."""
    kernel = re.search(r'^kernels \{\n(?:  .*\n)*?  op: "AdamW"\n((?:  .*\n)*?)\}', text, re.M)
    ins = re.findall(r"^  inputs: (\d+)", kernel.group(1), re.M)
    outs = re.findall(r"^  outputs: (\d+)", kernel.group(1), re.M)
    n = (len(ins) - 2) // 4
    assert len(outs) == 4 * n, (len(ins), len(outs))
    return n, sum(1 for o in outs[3 * n:] if int(o) != 2 ** 32 - 1)


def test_frozen_variables_cast_once_and_sgd_keeps_its_casts(tmp_path):
    data = write_tokens(tmp_path / "tokens.bin", seed=59)
    # The first block frozen: its weights are cast once and never written again; AdamW updates
    # (and writes the copies of) the others only. Same training as with per-step casts.
    frozen = ["--frozen", "transformer.h.0.*"]
    job_on, losses_on, params_on = compile_and_train(tmp_path, "on", data, frozen)
    job_off, losses_off, params_off = compile_and_train(
        tmp_path, "off", data, frozen + ["--parameter-copies=false"])
    assert losses_on == losses_off
    for name in params_on:
        assert params_on[name].tobytes() == params_off[name].tobytes(), name
    text = decode(job_on / "rank0.program.pb")
    once = once_kernel_ids(text)
    n, written = adamw_copy_outputs(text)
    _, written_all = adamw_copy_outputs(decode(
        compile_and_train(tmp_path, "all", data, [])[0] / "rank0.program.pb"))
    # Every weight of the products is cast once; the frozen block's are not AdamW's.
    assert 0 < written < written_all <= len(once), (written, written_all, len(once))
    # SGD's variables change every step without copies: their casts stay per step.
    job = tmp_path / "sgd"
    run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
         "--optimizer", "sgd", "--precision", "bf16", "-o", str(job)])
    sgd = decode(job / "rank0.program.pb")
    assert not once_kernel_ids(sgd) and "ROLE_PARAMETER_COPY" not in sgd
