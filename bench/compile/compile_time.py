#!/usr/bin/env python3
"""Whole-compile time of straitc on the model zoo, against IREE on the same ONNX files.

The mission's anchor: IREE users report 1.5-6 h to compile 8-12B-parameter models. This bench
measures, for each committed model (shape-only: the weights are not committed):

  train  straitc's whole job for a GPU cluster: import, training step (loss, autodiff, AdamW,
         bf16 autocast, fusion), plan (stages, replicas, codecs), one program and parameter
         shard per rank written to a job folder;
  fwd    straitc's forward program for one CPU rank (`--emit=program`, no loss), the same job
         IREE does below;
  iree   the peer, if installed (`pip install iree-base-compiler`, then --iree-bin DIR or
         iree-compile on PATH): iree-import-onnx (weights externalized, not read) of the model
         with the same static input shape, then iree-compile for llvm-cpu (the host CPU).

Not the same work: IREE generates machine code for every kernel (LLVM codegen), while straitc
emits programs that the runtime runs on its prebuilt kernels (the CUDA backend compiles its
fused elementwise kernels with NVRTC when a rank starts, not here). Both are what a user waits
for before the first step. Each time is the best of --repeat runs (wall, whole process; peak
RSS from /usr/bin/time).

Usage: bench/compile/compile_time.py [--build build] [--repeat 3] [--models llama-7b,gpt2]
                                     [--iree-bin DIR] [--no-iree]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTERS = os.path.join(ROOT, "examples", "clusters")
TIME = "/usr/bin/time"

# model, input spec, cluster for the training job, global batch
MODELS = [
    ("gpt2", "input_ids=8x1024", "gpu-h100-h200-a100", 384),
    ("bert-base", "input_ids=8x512", "gpu-h100-h200-a100", 384),
    ("vit-b-16", "pixel_values=8x3x224x224", "fusionllm-48", 384),
    ("resnet101", "pixel_values=8x3x224x224", "fusionllm-48", 384),
    ("llama-7b", "input_ids=1x1024", "gpu-h100-h200-a100", 64),
]


def timed(cmd, cwd=None):
    """Runs cmd under /usr/bin/time; returns (wall s, peak RSS MiB, stderr)."""
    t0 = time.perf_counter()
    p = subprocess.run([TIME, "-f", "%M"] + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, cwd=cwd)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    lines = p.stderr.strip().splitlines()
    return wall, int(lines[-1]) / 1024.0, "\n".join(lines[:-1])


def best(repeat, run):
    """The fastest of `repeat` calls of run() -> (wall, rss, extra)."""
    return min((run() for _ in range(repeat)), key=lambda r: r[0])


def ranks_of(job):
    return len([f for f in os.listdir(job) if f.endswith(".program.pb")])


def static_onnx(model, spec, out_path, python):
    """Writes a copy of the model's graph (no weights read) with static input dims."""
    code = r"""
import sys, onnx
src, spec, dst = sys.argv[1:4]
m = onnx.load(src, load_external_data=False)
name, dims = spec.split("=")
dims = [int(d) for d in dims.split("x")]
for inp in m.graph.input:
    if inp.name == name:
        for d, v in zip(inp.type.tensor_type.shape.dim, dims):
            d.ClearField("dim_param"); d.dim_value = v
onnx.save(m, dst)
"""
    subprocess.check_call([python, "-c", code, model, spec, out_path])


def find_iree(args):
    if args.no_iree:
        return None
    if args.iree_bin:
        d = args.iree_bin
    else:
        exe = shutil.which("iree-compile")
        d = os.path.dirname(exe) if exe else None
    if not d or not os.path.exists(os.path.join(d, "iree-compile")):
        print("IREE not found (pip install iree-base-compiler; --iree-bin DIR): peer column skipped")
        return None
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", default=",".join(m[0] for m in MODELS))
    ap.add_argument("--iree-bin", help="folder with iree-import-onnx and iree-compile")
    ap.add_argument("--no-iree", action="store_true")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    straitc = os.path.join(args.build, "bin", "straitc")
    iree = find_iree(args)
    wanted = args.models.split(",")
    unknown = [w for w in wanted if w not in [m[0] for m in MODELS]]
    if unknown:
        sys.exit(f"unknown model(s): {', '.join(unknown)}")

    work = tempfile.mkdtemp(prefix="strait-compile-time-")
    try:
        print(f"{'model':10} {'nodes':>6} | {'train s':>8} {'MiB':>5} {'ranks':>5} {'cluster':>20} |"
              f" {'fwd s':>6} {'MiB':>5} | {'iree s':>7} {'MiB':>5} | {'iree/fwd':>8}"
              f" {'iree/train':>10}")
        for name, spec, cluster, batch in MODELS:
            if name not in wanted:
                continue
            model = os.path.join(ROOT, "models", name, name + ".onnx")
            job = os.path.join(work, name + ".job")
            fwd = os.path.join(work, name + ".fwd")

            def train():
                shutil.rmtree(job, ignore_errors=True)
                r = timed([straitc, model, "--shape-only", "--input-shape", spec,
                           "--loss", "cross-entropy", "--optimizer", "adamw", "--precision", "bf16",
                           "--cluster", os.path.join(CLUSTERS, cluster + ".yaml"),
                           "--global-batch", str(batch), "-o", job])
                return r[0], r[1], ranks_of(job)

            def forward():
                shutil.rmtree(fwd, ignore_errors=True)
                r = timed([straitc, model, "--shape-only", "--input-shape", spec,
                           "--emit=program", "-o", fwd])
                return r[0], r[1], None

            t_train, m_train, ranks = best(args.repeat, train)
            t_fwd, m_fwd, _ = best(args.repeat, forward)
            summary = subprocess.run([straitc, model, "--shape-only", "--input-shape", spec,
                                      "--emit=summary"], capture_output=True, text=True).stdout
            nodes = next((ln.split()[1] for ln in summary.splitlines() if ln.startswith("ops:")), "?")

            peer = ""
            if iree:
                static = os.path.join(work, name + ".static.onnx")
                static_onnx(model, spec, static, args.python)
                mlir = os.path.join(work, name + ".mlir")
                vmfb = os.path.join(work, name + ".vmfb")

                def compile_iree():
                    w1, r1, _ = timed([os.path.join(iree, "iree-import-onnx"), static,
                                       "--large-model", "--externalize-params",
                                       "--no-save-params", "-o", mlir])
                    w2, r2, _ = timed([os.path.join(iree, "iree-compile"), mlir,
                                       "--iree-hal-target-device=local",
                                       "--iree-hal-local-target-device-backends=llvm-cpu",
                                       "--iree-llvmcpu-target-cpu=host", "-o", vmfb])
                    return w1 + w2, max(r1, r2), None

                t_iree, m_iree, _ = best(args.repeat, compile_iree)
                peer = (f" {t_iree:7.2f} {m_iree:5.0f} | {t_iree / t_fwd:7.1f}x"
                        f" {t_iree / t_train:9.1f}x")
            else:
                peer = f" {'-':>7} {'-':>5} | {'-':>8} {'-':>10}"
            print(f"{name:10} {nodes:>6} | {t_train:8.2f} {m_train:5.0f} {ranks:5d} {cluster:>20} |"
                  f" {t_fwd:6.2f} {m_fwd:5.0f} |{peer}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
