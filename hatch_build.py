"""Build hook: compiles quicack's native core (``native/``, Rust, with cargo) into the package.

hatchling runs :class:`NativeBuildHook` whenever it builds a wheel, also for ``pip install -e``:
``cargo build --release`` of ``native/`` (crates from crates.io, ~1 min the first time), the
library copied to ``quicack/_native.abi3.so`` (the stable ABI of CPython ≥ 3.11).  An editable
install imports it from the source tree; a wheel carries it.  After changing the Rust code,
``python hatch_build.py`` builds it again in place.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
CRATE = ROOT / "native"
TARGET = ROOT / "quicack" / "_native.abi3.so"


def cargo() -> str:
    found = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    if not Path(found).exists():
        raise SystemExit("quicack's native core is Rust: building it needs cargo (install Rust with rustup, "
                         "https://rustup.rs, then run the install again)")
    return found


def build() -> Path:
    """Build the extension and put it in the source tree's package."""
    subprocess.run([cargo(), "build", "--release", "--features", "extension-module", "--manifest-path",
                    str(CRATE / "Cargo.toml")], check=True, env=dict(os.environ, CARGO_TERM_COLOR="never"))
    built = CRATE / "target" / "release" / ("lib_native.dylib" if sys.platform == "darwin" else "lib_native.so")
    tmp = TARGET.with_suffix(".tmp")
    shutil.copyfile(built, tmp)
    tmp.replace(TARGET)  # (a process that has the old one loaded keeps it)
    return TARGET


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # (run as a script without hatchling installed)
    BuildHookInterface = object


class NativeBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
        library = build()
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            build_data["force_include"][str(library)] = "quicack/_native.abi3.so"


if __name__ == "__main__":
    print(build())
