"""Builds the torch-free C++ extension ``torchrl._C`` from ``csrc/``.

The extension only uses pybind11 and numpy buffers: it never includes torch headers nor links
libtorch, so one build works with any torch version.
"""

from glob import glob

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

ext_modules = [
    Pybind11Extension(
        "torchrl._C",
        sorted(glob("csrc/*.cpp")),
        include_dirs=["csrc"],
        cxx_std=17,
        extra_compile_args=["-O3"],
    )
]

setup(ext_modules=ext_modules, cmdclass={"build_ext": build_ext})
