#!/usr/bin/env python3
"""Builds a byte-level (vocabulary 256) token dataset from real English text
that a fresh Debian bookworm ships, for strait-run --data.

Sources, in a fixed order so the output is reproducible on one system:
  1. the licences of /usr/share/common-licenses (package base-files:
     GPL-3, GPL-2, LGPL-2.1, Apache-2.0, GFDL-1.3, MPL-2.0, ...);
  2. with --docstrings (default on), the module, class and function
     docstrings of Python's standard library (the interpreter running this
     script), sorted by path.
Each document is UTF-8 encoded; every byte is one token (0..255), as the
committed models/gpt2-tiny (vocab 256) expects; documents are separated by a
byte 0x0A 0x0A. Output: nanoGPT's format, flat little-endian uint16
(`train.bin`, `val.bin`: the last --val-fraction of the stream) and a
`meta.txt` with counts and sources. Nothing large is committed; rerun this.

usage: make-text-tokens.py OUT_DIR [--max-bytes N] [--no-docstrings] [--val-fraction F]
"""
import argparse
import array
import ast
import os
import sys
import sysconfig

LICENSES = "/usr/share/common-licenses"


def license_texts():
    if not os.path.isdir(LICENSES):
        return []
    out = []
    for name in sorted(os.listdir(LICENSES)):
        path = os.path.join(LICENSES, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as f:
                out.append((path, f.read()))
    return out


def docstrings():
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in ("test", "tests", "idle_test", "site-packages",
                                          "dist-packages", "__pycache__"))
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            path = os.path.join(dirpath, fn)
            try:
                with open(path, "rb") as f:
                    tree = ast.parse(f.read(), path)
            except (SyntaxError, ValueError, OSError):
                continue
            docs = []
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)):
                    d = ast.get_docstring(node)
                    if d and len(d) > 40:
                        docs.append(d)
            if docs:
                out.append((path, "\n\n".join(docs).encode("utf-8")))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--max-bytes", type=int, default=0, help="cap on the tokens (0: all)")
    ap.add_argument("--no-docstrings", action="store_true")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    a = ap.parse_args()
    docs = license_texts()
    if not a.no_docstrings:
        docs += docstrings()
    if not docs:
        sys.exit("make-text-tokens: no text found (neither %s nor Python docstrings)" % LICENSES)
    stream = b"\n\n".join(d for _, d in docs)
    if a.max_bytes > 0:
        stream = stream[: a.max_bytes]
    if len(stream) < 1024:
        sys.exit("make-text-tokens: only %d bytes of text found" % len(stream))
    tokens = array.array("H", list(stream))  # one uint16 token per byte
    if sys.byteorder != "little":
        tokens.byteswap()
    n_val = max(1, int(len(tokens) * a.val_fraction))
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "train.bin"), "wb") as f:
        tokens[: len(tokens) - n_val].tofile(f)
    with open(os.path.join(a.out_dir, "val.bin"), "wb") as f:
        tokens[len(tokens) - n_val:].tofile(f)
    with open(os.path.join(a.out_dir, "meta.txt"), "w") as f:
        f.write("vocab_size 256 (byte-level)\ndtype uint16\n")
        f.write("train_tokens %d\nval_tokens %d\n" % (len(tokens) - n_val, n_val))
        for path, d in docs:
            f.write("source %s %d\n" % (path, len(d)))
    print("make-text-tokens: %d documents, %d train + %d val tokens in %s"
          % (len(docs), len(tokens) - n_val, n_val, a.out_dir))


if __name__ == "__main__":
    main()
