"""Conan 2 recipe for trainkit (header-only).

From a checkout:  conan create packaging/conan --build=missing
The sources are the checkout itself (exported from the repository root)."""
import os

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class TrainkitConan(ConanFile):
    name = "trainkit"
    version = "0.1.0"
    description = "Header-only training-loop building blocks over LibTorch"
    topics = ("deep-learning", "libtorch", "training", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    no_copy_source = True

    def export_sources(self):
        root = os.path.join(self.recipe_folder, "..", "..")
        copy(self, "include/*", src=root, dst=self.export_sources_folder)

    def layout(self):
        basic_layout(self, src_folder=".")

    def requirements(self):
        # transitive_headers: users include LibTorch and nlohmann-json through ours.
        self.requires("libtorch/[>=1.13 <3]", transitive_headers=True)
        self.requires("nlohmann_json/[>=3.10 <4]", transitive_headers=True)
        self.requires("zlib/[>=1.2.11 <2]", transitive_headers=True)

    def validate(self):
        check_min_cppstd(self, 20)

    def package_id(self):
        self.info.clear()

    def package(self):
        copy(self, "*.hpp", src=os.path.join(self.source_folder, "include"),
             dst=os.path.join(self.package_folder, "include"))

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.set_property("cmake_file_name", "trainkit")
        self.cpp_info.set_property("cmake_target_name", "trainkit::trainkit")
        self.cpp_info.set_property("pkg_config_name", "trainkit")
        if self.settings.os in ("Linux", "FreeBSD"):
            # at::parallel_for in LibTorch's headers is an OpenMP loop
            self.cpp_info.cxxflags = ["-fopenmp"]
            self.cpp_info.sharedlinkflags = ["-fopenmp"]
            self.cpp_info.exelinkflags = ["-fopenmp"]
