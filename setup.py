"""The build, for its one optional compiled module; everything else is declared in setup.cfg.

``consumer_client/consumer_records_c.pyx`` (the consumer's record loop) is compiled with Cython
when ``pip install`` can: Cython comes from the build requirements in pyproject.toml, and a C
compiler must be on the machine. When either is missing, or compiling fails, the install goes
on without it (a warning says why) and the consumer uses its pure-Python loop, which gives the
same messages; ``consumer_client.consumer_records.COMPILED`` says which one runs.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError

_FAILURES = (CCompilerError, ExecError, PlatformError, OSError)


def _warn(what: object) -> None:
    print(f"sluice: the compiled record loop was not built ({what}); the consumer will use "
          f"its pure-Python loop", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that leaves out an extension it cannot compile instead of failing. A left-out
    extension is also dropped from ``self.extensions``, which lists the outputs an install (and
    an editable install) copies afterwards."""

    def run(self) -> None:
        try:
            super().run()
        except _FAILURES as e:
            _warn(e)
            self.extensions = []

    def build_extensions(self) -> None:
        self.check_extensions_list(self.extensions)
        built = []
        for ext in self.extensions:
            try:
                self.build_extension(ext)
            except _FAILURES as e:
                _warn(e)
                continue
            built.append(ext)
        self.extensions = built


def _extensions() -> list[Extension]:
    if sys.version_info >= (3, 14):
        # The loop allocates its Message tuples directly; 3.14 tuples cache their hash in a
        # field such an allocation leaves at 0 (a valid-looking hash), so it is left out there.
        _warn("it is built for Python up to 3.13")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _warn("Cython is not installed")
        return []
    try:
        return cythonize([Extension("consumer_client.consumer_records_c",
                                    ["consumer_client/consumer_records_c.pyx"])],
                         language_level=3, quiet=True)
    except Exception as e:  # a Cython that cannot translate the loop: install without it
        _warn(e)
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
