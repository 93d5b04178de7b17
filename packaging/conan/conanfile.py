"""Conan 2 recipe for trainkit (header-only).

From a checkout:  conan create packaging/conan --build=missing -s compiler.cppstd=20
With the hyperparameter search (trainkit::tune):  add -o "trainkit/*:with_tune=True"
The sources are the checkout itself (exported from the repository root)."""
import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy, load
from conan.tools.layout import basic_layout
from conan.tools.scm import Version

required_conan_version = ">=2.0"

ROOT = os.path.join("..", "..")  # the repository root, from this folder


class TrainkitConan(ConanFile):
    name = "trainkit"
    description = "Header-only training-loop building blocks over LibTorch"
    license = "BSD-3-Clause"
    topics = ("deep-learning", "libtorch", "training", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    # with_cuda: define TRAINKIT_HAS_CUDA (CUDA paths, CUDA RNG state in
    # checkpoints); "auto" follows the libtorch package's own CUDA option.
    # with_tune: the hyperparameter search, component `tune` (target
    # trainkit::tune), with SQLite and libpq; off, nothing of it is required.
    options = {"with_cuda": ["auto", True, False], "with_tune": [True, False]}
    default_options = {"with_cuda": "auto", "with_tune": False}
    no_copy_source = True

    def set_version(self):
        # include/trainkit/version.hpp is the one place the version is written.
        header = load(self, os.path.join(self.recipe_folder, ROOT, "include", "trainkit",
                                         "version.hpp"))
        self.version = ".".join(
            re.search(rf"^#define TRAINKIT_VERSION_{part} (\d+)$", header, re.M).group(1)
            for part in ("MAJOR", "MINOR", "PATCH"))

    def export_sources(self):
        root = os.path.join(self.recipe_folder, ROOT)
        copy(self, "include/*", src=root, dst=self.export_sources_folder)
        copy(self, "LICENSE", src=root, dst=self.export_sources_folder)

    def layout(self):
        basic_layout(self, src_folder=".")

    def requirements(self):
        # transitive_headers: users include LibTorch and nlohmann-json through ours.
        self.requires("libtorch/[>=1.13 <3]", transitive_headers=True)
        self.requires("nlohmann_json/[>=3.10 <4]", transitive_headers=True)
        self.requires("zlib/[>=1.2.11 <2]", transitive_headers=True)
        if self.options.with_tune:
            # tune/sqlite.hpp and tune/postgres.hpp include their C headers
            self.requires("sqlite3/[>=3.35 <4]", transitive_headers=True)
            self.requires("libpq/[>=14 <18]", transitive_headers=True)

    @property
    def _compilers_minimum_version(self):
        return {"gcc": "12", "clang": "14"}

    def validate(self):
        # README's "Limits": Linux only. The headers use POSIX files, signals
        # and processes (unistd.h, fcntl.h); nothing has run on macOS.
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration(
                f"{self.ref} supports Linux only (it uses POSIX files and signals, and is "
                f"tested on Linux alone); this profile's os is {self.settings.os}.")
        try:
            check_min_cppstd(self, 20)
        except ConanInvalidConfiguration as e:  # most often a default profile's gnu17
            raise ConanInvalidConfiguration(f"{e} Pass -s compiler.cppstd=20.") from e
        compiler = str(self.settings.compiler)
        minimum = self._compilers_minimum_version.get(compiler)
        if minimum and Version(self.settings.compiler.version) < minimum:
            raise ConanInvalidConfiguration(
                f"{self.ref} needs {compiler} >= {minimum} for the C++20 it uses; "
                f"this profile has {compiler} {self.settings.compiler.version}.")

    def package_id(self):
        # Header-only: one package for every setting and dependency binary. The
        # option stays: it changes what package_info() tells consumers.
        self.info.settings.clear()
        self.info.requires.clear()

    def package(self):
        copy(self, "LICENSE", src=self.source_folder,
             dst=os.path.join(self.package_folder, "licenses"))
        # Without with_tune, no header of the search: it could not compile.
        excludes = () if self.options.with_tune else ("trainkit/tune/*", "trainkit/tune.hpp")
        copy(self, "*.hpp", src=os.path.join(self.source_folder, "include"),
             dst=os.path.join(self.package_folder, "include"), excludes=excludes)

    def _libtorch_has_cuda(self):
        if str(self.options.with_cuda) != "auto":
            return str(self.options.with_cuda) == "True"
        # ConanCenter's libtorch has no CUDA option yet; other recipes name it
        # differently. A missing option means a CPU build.
        options = self.dependencies["libtorch"].options
        return any(str(options.get_safe(name)) == "True"
                   for name in ("with_cuda", "cuda", "use_cuda"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "trainkit")
        self.cpp_info.set_property("pkg_config_name", "trainkit")
        # Components, so that trainkit::trainkit links only the core's
        # requirements and trainkit::tune adds SQLite and libpq, as in CMake.
        core = self.cpp_info.components["trainkit"]
        core.bindirs = []
        core.libdirs = []
        core.set_property("cmake_target_name", "trainkit::trainkit")
        core.set_property("pkg_config_name", "trainkit")
        core.requires = ["libtorch::libtorch", "nlohmann_json::nlohmann_json", "zlib::zlib"]
        if self._libtorch_has_cuda():
            # what CMake's find_package(trainkit) defines for a CUDA LibTorch
            core.defines = ["TRAINKIT_HAS_CUDA=1"]
        if self.settings.os == "Linux":
            # at::parallel_for in LibTorch's headers is an OpenMP loop
            core.cxxflags = ["-fopenmp"]
            core.sharedlinkflags = ["-fopenmp"]
            core.exelinkflags = ["-fopenmp"]
            if str(self.settings.get_safe("compiler.libcxx", "")).startswith("libstdc++"):
                # libstdc++ ahead of LibTorch, as CMake's target does (decision 84)
                stdcxx_first = "-Wl,--push-state,--no-as-needed,-lstdc++,--pop-state"
                core.sharedlinkflags.append(stdcxx_first)
                core.exelinkflags.append(stdcxx_first)
        if self.options.with_tune:
            tune = self.cpp_info.components["tune"]
            tune.bindirs = []
            tune.libdirs = []
            tune.set_property("cmake_target_name", "trainkit::tune")
            tune.set_property("pkg_config_name", "trainkit-tune")
            tune.requires = ["trainkit", "sqlite3::sqlite3", "libpq::libpq"]
