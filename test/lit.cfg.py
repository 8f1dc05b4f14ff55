# -*- Python -*-
# lit configuration of Strait's FileCheck tests.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "STRAIT"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.strait_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%models", os.path.join(config.strait_src_root, "models")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

tool_dirs = [config.strait_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(
    ["strait-opt", "strait-translate", "straitc"], tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.strait_tools_dir, append_path=True)

if config.strait_python and os.path.exists(config.strait_python):
    config.available_features.add("python")
    config.substitutions.append(("%python", config.strait_python))
