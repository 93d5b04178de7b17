import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout


class TrainkitTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def _with_tune(self):
        return bool(self.dependencies["trainkit"].options.with_tune)

    def generate(self):
        toolchain = CMakeToolchain(self)
        # the search's program is built only where the package has it
        toolchain.variables["TRAINKIT_TUNE"] = self._with_tune()
        toolchain.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "test_package"), env="conanrun")
            if self._with_tune():
                self.run(os.path.join(self.cpp.build.bindir, "test_package_tune"),
                         env="conanrun")
