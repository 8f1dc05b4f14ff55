"""Imports every model of Debian's libonnx-testdata and writes a report.

    python -m strait.testdata_report [--data DIR] [--build DIR] [--folders node,simple]
                                     [--out docs/onnx-testdata-import.md] [--json FILE]

For each `model.onnx` under the test-data folders this runs
`strait-translate --import-onnx`, re-parses and verifies the result with
`strait-opt`, and checks that the types of the function results equal those of
the expected outputs in `test_data_set_0/output_*.pb` (onnx.shape_inference
when a test has no data). Failures are classified from the importer's
diagnostic.

Inputs bound to test data: many node tests pass, as runtime tensors, values
that the graph dialect needs constant (Reshape's shape, Slice's starts, pads,
axes...). When the importer reports such an operand and it is a graph input,
the script rewrites the model in Python (the input becomes an initializer
holding its `test_data_set_0/input_N.pb` value) and imports again. Those
models are counted in their own class, "imported with bound inputs"; the
importer itself has no such option.

Python stays a helper here: no compiler logic, only driving the tools.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = "/usr/share/libonnx-testdata/data"
FOLDERS = ["node", "pytorch-converted", "pytorch-operator", "simple"]
IMPORT_SOURCES = "lib/Target/ONNX/Import*.cpp"

CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}
SEQUENCE_OPS = {"SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
                "SequenceInsert", "SequenceLength", "SplitToSequence", "ConcatFromSequence",
                "Optional", "OptionalGetElement", "OptionalHasElement"}

# Failure classes, in the order the report lists them.
CLASSES = [
    ("unsupported-op", "unsupported op"),
    ("non-constant", "non-constant shape operand"),
    ("dtype", "data type"),
    ("control-flow", "control flow"),
    ("sequence", "sequence/optional types"),
    ("domain", "non-default domain (training, ML)"),
    ("opset", "opset outside the importer's range (1 to 24)"),
    ("shape-mismatch", "imported, output type differs from the expected output"),
    ("other", "other"),
]

ONNX_TO_MLIR = {
    onnx.TensorProto.FLOAT: "f32", onnx.TensorProto.FLOAT16: "f16",
    onnx.TensorProto.BFLOAT16: "bf16", onnx.TensorProto.DOUBLE: "f64",
    onnx.TensorProto.INT64: "i64", onnx.TensorProto.INT32: "i32",
    onnx.TensorProto.INT16: "i16", onnx.TensorProto.INT8: "i8",
    onnx.TensorProto.UINT8: "ui8", onnx.TensorProto.UINT16: "ui16",
    onnx.TensorProto.UINT32: "ui32", onnx.TensorProto.UINT64: "ui64",
    onnx.TensorProto.BOOL: "i1",
}


@dataclasses.dataclass
class Result:
    folder: str
    name: str
    ops: list
    status: str = "ok"          # ok | bound | fail
    klass: str = ""             # failure class key
    detail: str = ""            # unsupported op, or first diagnostic line
    message: str = ""
    bound: list = dataclasses.field(default_factory=list)
    input_shapes: str = ""      # --input-shape taken from the test data
    checked_outputs: int = 0    # outputs whose type was compared
    mismatches: list = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status in ("ok", "bound") and not self.mismatches


def supported_ops(root: str = ROOT) -> list[str]:
    """Op types registered in the importer's table (parsed from its sources:
    r.add("Op", ...) and the UNARY/BINARY macro lists)."""
    ops = set()
    for path in glob.glob(os.path.join(root, IMPORT_SOURCES)):
        text = open(path, encoding="utf-8").read()
        ops.update(re.findall(r'\br\.add\("([A-Za-z0-9]+)"', text))
        text = re.sub(r"#define .*", "", text)
        ops.update(re.findall(r'\b(?:UNARY|BINARY)\(([A-Z][A-Za-z0-9]*)\)', text))
    return sorted(ops)


def graph_ops(graph: onnx.GraphProto) -> list[str]:
    ops = []
    for node in graph.node:
        ops.append(node.op_type if node.domain in ("", "ai.onnx")
                   else f"{node.domain}.{node.op_type}")
    return ops


def tensor_types(mlir: str) -> list[str] | None:
    """Result types of `func.func @main` in printed IR, as 'AxBxf32' strings."""
    m = re.search(r"func\.func @main\((.*)$", mlir, re.M)
    if not m:
        return None
    line = m.group(1)
    arrow = line.rfind(") -> ")
    if arrow < 0:
        return None
    out = line[arrow + 5:]
    return re.findall(r"tensor<([^>]*)>", out)


def expected_types(model: onnx.ModelProto, test_dir: str) -> list[str] | None:
    """Types of the expected outputs: test_data_set_0 when present, else
    onnx.shape_inference's static output types (None when unknown)."""
    outs = sorted(glob.glob(os.path.join(test_dir, "test_data_set_0", "output_*.pb")),
                  key=lambda p: int(re.findall(r"(\d+)\.pb$", p)[0]))
    types = []
    if outs and len(outs) == len(model.graph.output):
        for path, decl in zip(outs, model.graph.output):
            t = onnx.TensorProto()
            try:
                t.ParseFromString(open(path, "rb").read())
            except Exception:  # a sequence or optional output
                return None
            if not t.HasField("data_type") and not t.dims:
                return None
            # The declared type wins: old test data store bfloat16 as uint16.
            declared = decl.type.tensor_type.elem_type
            elt = ONNX_TO_MLIR.get(declared or t.data_type)
            types.append("x".join([str(d) for d in t.dims] + [elt or "?"]))
        return types
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return None
    for o in inferred.graph.output:
        tt = o.type.tensor_type
        if not o.type.HasField("tensor_type") or not tt.HasField("shape"):
            return None
        if any(not d.HasField("dim_value") for d in tt.shape.dim):
            return None
        types.append("x".join([str(d.dim_value) for d in tt.shape.dim] +
                              [ONNX_TO_MLIR.get(tt.elem_type, "?")]))
    return types


def classify(msg: str, ops: list[str]) -> tuple[str, str]:
    """(class key, detail) for an importer diagnostic."""
    first = next((l for l in msg.splitlines() if "error:" in l), msg.strip()[:200])
    first = re.sub(r"^.*?error: ", "", first)
    m = re.search(r"op '([^']+)' \(opset \d+\) is not supported", msg)
    if m:
        op = m.group(1)
        if op in SEQUENCE_OPS:
            return "sequence", op
        if op in CONTROL_FLOW:
            return "control-flow", m.group(0)
        return "unsupported-op", op
    if "control flow" in msg:
        m = re.search(r"control flow \((\w+)\)", msg)
        return "control-flow", m.group(1) if m else first
    if ("sequences, maps and optionals" in msg or "is not a tensor" in msg
            or "a static program returns tensors" in msg):
        return "sequence", first
    if "no opset_import for the default ONNX domain" in msg:
        return "domain", "only ai.onnx.preview.training"
    if re.search(r"domain '[^']*' is not supported", msg):
        m = re.search(r"domain '([^']*)'", msg)
        return "domain", m.group(1)
    if "must be constant" in msg:
        return "non-constant", first
    if "data type" in msg or "dtype" in msg:
        return "dtype", first
    if re.search(r"opset \d+ is not supported", msg):
        return "opset", first
    return "other", first


def _test_input(test_dir: str, k: int) -> onnx.TensorProto | None:
    path = os.path.join(test_dir, "test_data_set_0", f"input_{k}.pb")
    if not os.path.exists(path):
        return None
    t = onnx.TensorProto()
    try:
        t.ParseFromString(open(path, "rb").read())
    except Exception:
        return None
    return t


def _bind_inputs(model: onnx.ModelProto, test_dir: str, names: set[str]) -> bool:
    """Replaces graph inputs `names` by Constant nodes holding their
    test_data_set_0 values (not initializers: float initializers are weights,
    which the importer does not fold); False when one has no such value."""
    index = {i.name: k for k, i in enumerate(model.graph.input)}
    consts = []
    for name in sorted(names):
        t = _test_input(test_dir, index[name]) if name in index else None
        if t is None:
            return False
        t.name = name
        consts.append(onnx.helper.make_node("Constant", [], [name], value=t,
                                            name=f"bound_{name}"))
    keep = [i for i in model.graph.input if i.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    nodes = consts + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return True


def _input_shapes(model: onnx.ModelProto, test_dir: str) -> str:
    """--input-shape giving every graph input its test_data_set_0 shape."""
    inits = {t.name for t in model.graph.initializer}
    spec = []
    for k, i in enumerate(model.graph.input):
        if i.name in inits:
            continue
        t = _test_input(test_dir, k)
        if t is None or not re.fullmatch(r"[\w.:/-]+", i.name):
            continue
        spec.append(f"{i.name}=" + ("x".join(map(str, t.dims)) if t.dims else "scalar"))
    return ",".join(spec)


def _run(cmd: list[str], stdin: str | None = None, timeout: int = 60):
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return 124, "", f"error: timed out after {timeout} s"
    except OSError as e:  # e.g. a tool being relinked
        return 126, "", f"error: cannot run {cmd[0]}: {e}"


def import_model(build: str, path: str, shapes: str = "") -> tuple[bool, str, str]:
    """(ok, mlir, diagnostics): import, then re-parse and verify with strait-opt."""
    translate = os.environ.get("STRAIT_TRANSLATE") or os.path.join(build, "bin",
                                                                   "strait-translate")
    cmd = [translate, "--import-onnx", path]
    if shapes:
        cmd.append(f"--input-shape={shapes}")
    rc, out, err = _run(cmd)
    if rc != 0:
        return False, "", err or f"error: exit code {rc}"
    opt = os.environ.get("STRAIT_OPT") or os.path.join(build, "bin", "strait-opt")
    rc, out2, err2 = _run([opt, "-"], stdin=out)
    if rc != 0:
        return False, "", "error: strait-opt rejects the imported IR: " + err2
    return True, out, ""


def check_one(build: str, folder: str, test_dir: str) -> Result:
    path = os.path.join(test_dir, "model.onnx")
    model = onnx.load(path, load_external_data=False)
    res = Result(folder, os.path.basename(test_dir), graph_ops(model.graph))
    shapes = ""
    ok, mlir, msg = import_model(build, path)
    if not ok and "has dynamic dimension" in msg:
        # Fix dynamic input dimensions to the test data's, as a user would.
        shapes = _input_shapes(model, test_dir)
        ok, mlir, msg = import_model(build, path, shapes)
        res.input_shapes = shapes
    bound: set[str] = set()
    inputs = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
    with tempfile.TemporaryDirectory() as tmp:
        # Bind the operand the importer names (up to every graph input, once each).
        while not ok and "must be constant" in msg:
            names = set(re.findall(r"input '[^']*' \(([^)]*)\) must be constant", msg))
            names = (names & inputs) - bound
            if not names:
                # Computed from inputs: bind the integer inputs at once, then (a Loop's
                # trip count computed from Range's float bounds) the others.
                names = {i.name for i in model.graph.input
                         if i.name in inputs and i.type.tensor_type.elem_type in
                         (onnx.TensorProto.INT64, onnx.TensorProto.INT32)} - bound
                if not names and "a loop is unrolled at import" in msg:
                    names = inputs - bound
            if not names:
                break
            bound |= names
            rewritten = onnx.load(path, load_external_data=False)
            if not _bind_inputs(rewritten, test_dir, bound):
                break
            tmp_path = os.path.join(tmp, "model.onnx")
            onnx.save(rewritten, tmp_path)
            # Bound inputs are no longer graph inputs: drop their --input-shape entries.
            kept = ",".join(e for e in shapes.split(",") if e and e.split("=")[0] not in bound)
            ok, mlir, msg = import_model(build, tmp_path, kept)
    if not ok:
        res.status = "fail"
        res.message = msg.strip()
        res.klass, res.detail = classify(msg, res.ops)
        return res
    if bound:
        res.status = "bound"
        res.bound = sorted(bound)
    got = tensor_types(mlir)
    want = expected_types(model, test_dir)
    if got is None or want is None:
        return res
    res.checked_outputs = len(want)
    if len(got) != len(want):
        res.mismatches.append(f"{len(got)} results, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            res.mismatches.append(f"output {i}: tensor<{g}>, expected tensor<{w}>")
    if res.mismatches:
        res.klass, res.detail = "shape-mismatch", res.mismatches[0]
    return res


def run(data: str, build: str, folders: list[str], jobs: int = 2) -> list[Result]:
    tests = []
    for folder in folders:
        for d in sorted(glob.glob(os.path.join(data, folder, "*"))):
            if os.path.exists(os.path.join(d, "model.onnx")):
                tests.append((folder, d))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda t: check_one(build, *t), tests))


def _examples(items: list[str], n: int = 6) -> str:
    shown = ", ".join(f"`{x}`" for x in items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


def render(results: list[Result], supported: list[str], folders: list[str]) -> str:
    lines = ["# Importing Debian's libonnx-testdata",
             "",
             "Generated by `python/strait/testdata_report.py` (do not edit by hand):",
             "",
             "    .venv/bin/python -m strait.testdata_report   # from python/, or PYTHONPATH=python",
             "",
             "Each `model.onnx` is imported with `strait-translate --import-onnx`, the IR is",
             "re-parsed and verified by `strait-opt`, and the result types of the function are",
             "compared with the expected outputs of `test_data_set_0` (element type and shape;",
             "`onnx.shape_inference` where a test has no data). *Passed* = imported, verified",
             "and every output type equal. *Bound inputs* counts models whose shape-like",
             "runtime inputs (Reshape's shape, Slice's starts, pads, axes, what a Loop's trip",
             "count is computed from...) the script moved into initializers holding their test",
             "values, since the graph dialect needs those constant; the importer has no such",
             "option.",
             "",
             "`real/` holds only download links (no models) and is not counted.",
             "",
             "## Totals", "",
             "| folder | passed | of which bound inputs | failed | shape/type mismatches | total |",
             "|---|---|---|---|---|---|"]
    for folder in folders + ["all"]:
        rs = [r for r in results if folder == "all" or r.folder == folder]
        lines.append(f"| {folder} | {sum(r.passed for r in rs)} | "
                     f"{sum(r.passed and r.status == 'bound' for r in rs)} | "
                     f"{sum(r.status == 'fail' for r in rs)} | "
                     f"{sum(bool(r.mismatches) for r in rs)} | {len(rs)} |")
    sup = set(supported)
    in_set = [r for r in results if all(o in sup for o in r.ops)]
    in_scope = [r for r in in_set if r.klass not in ("opset", "domain", "sequence")]
    lines += ["", f"Tests whose ops are all in the supported set: {len(in_set)}; of those "
              f"passed: {sum(r.passed for r in in_set)}. Leaving out opsets below 7, "
              f"training domains and sequence-typed inputs: {len(in_scope)}, passed "
              f"{sum(r.passed for r in in_scope)}.", ""]
    left = [r for r in in_scope if not r.passed]
    if left:
        lines += ["In scope and still failing:", ""]
        lines += [f"- `{r.folder}/{r.name}`: {r.detail}" for r in left]
        lines.append("")
    lines += ["## Failures by class", ""]
    for key, title in CLASSES:
        rs = [r for r in results if r.klass == key]
        if not rs:
            continue
        lines.append(f"### {title}: {len(rs)}")
        lines.append("")
        if key in ("unsupported-op", "sequence", "control-flow", "domain"):
            by = collections.defaultdict(list)
            for r in rs:
                by[r.detail].append(r.name)
            for detail, names in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                lines.append(f"- `{detail}` ({len(names)}): {_examples(names, 4)}")
        else:
            for r in rs[:12]:
                lines.append(f"- `{r.folder}/{r.name}`: {r.detail}")
            if len(rs) > 12:
                lines.append(f"- and {len(rs) - 12} more")
        lines.append("")
    seen = collections.Counter(o for r in results for o in set(r.ops))
    lines += ["## Op types", "",
              f"Supported by the importer: **{len(supported)}** ONNX op types.", "",
              ", ".join(f"`{o}`" for o in supported), "",
              f"Seen in the test data: {len(seen)}; supported: "
              f"{sum(o in sup for o in seen)}. Not supported (tests using it):", ""]
    missing = sorted((o for o in seen if o not in sup), key=lambda o: (-seen[o], o))
    lines.append(", ".join(f"`{o}` ({seen[o]})" for o in missing))
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=DATA)
    p.add_argument("--build", default=os.environ.get("STRAIT_BUILD_DIR",
                                                     os.path.join(ROOT, "build")))
    p.add_argument("--folders", default=",".join(FOLDERS))
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "onnx-testdata-import.md"),
                   help="report path ('-' for none)")
    p.add_argument("--json", default="", help="also write per-test results here")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--translate", default="",
                   help="strait-translate to use instead of BUILD/bin's (experiments)")
    args = p.parse_args(argv)
    folders = [f for f in args.folders.split(",") if f]
    if args.translate:
        os.environ["STRAIT_TRANSLATE"] = args.translate
    results = run(args.data, args.build, folders, args.jobs)
    supported = supported_ops()
    if args.out != "-":
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(render(results, supported, folders))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([dataclasses.asdict(r) | {"passed": r.passed} for r in results], f,
                      indent=1)
    for folder in folders:
        rs = [r for r in results if r.folder == folder]
        print(f"{folder}: {sum(r.passed for r in rs)}/{len(rs)} passed")
    print(f"supported op types: {len(supported)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
