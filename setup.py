"""The package build's C extensions (everything else is in pyproject.toml).

costlearn's C code is compiled here, at install, and never at run time:
``costlearn/ranker/_build.py`` says what is built and with which flags. Each
extension is optional: where no C compiler works the install goes on without
it, and costlearn ranks with numpy (the same answers, slower).
"""
import importlib.util
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_SPEC = importlib.util.spec_from_file_location("costlearn_build", os.path.join("costlearn", "ranker", "_build.py"))
_BUILD = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_BUILD)


class BuildExt(build_ext):
    """build_ext with costlearn's flags on a Unix compiler (gcc, clang), the unsafe ones taken out."""

    def build_extensions(self):
        if self.compiler.compiler_type == "unix":
            for attr in ("compiler", "compiler_so", "linker_so"):
                setattr(self.compiler, attr, [a for a in getattr(self.compiler, attr) if not _BUILD.unsafe(a)])
            for ext in self.extensions:
                ext.extra_compile_args = list(_BUILD.FLAGS)
        super().build_extensions()


def _extension(name: str, sources: tuple) -> Extension:
    """Extension ``name``, compiled from its C ``sources`` (one library), rebuilt when a header changes; it
    carries the sha256 of every file it is built from (_build.source_sha256)."""
    folder = os.path.join("costlearn", "ranker")
    digest = _BUILD.source_sha256(name)
    return Extension(f"costlearn.ranker.{name}", [os.path.join(folder, source) for source in sources],
                     include_dirs=[folder], depends=[os.path.join(folder, header) for header in _BUILD.HEADERS],
                     libraries=["m"] if os.name == "posix" else [],
                     define_macros=[("COSTLEARN_SOURCE_SHA256", f'"{digest}"')], optional=True)


setup(ext_modules=[_extension(name, sources) for name, sources in _BUILD.EXTENSIONS.items()],
      cmdclass={"build_ext": BuildExt})
