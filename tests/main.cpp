// The one doctest main shared by every test binary.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "scratch.hpp"

// CTest runs each case by its name, and CMake splits a name at ';' into two
// that match no case, so a case so named would never run (six did not).
TEST_CASE("every test case name can be run by CTest (no semicolon)") {
  for (const auto& tc : doctest::detail::getRegisteredTests()) {
    const std::string name = tc.m_name;
    CHECK_MESSAGE(name.find(';') == std::string::npos, name);
  }
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int failed = context.run();
  // The process's folder (tests/scratch.hpp) goes, unless a test failed: then
  // its files are what the failure is read from.
  if (const auto& dir = tk_test::detail::process_dir_slot()) {
    if (failed == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(*dir, ignored);
    } else {
      std::fprintf(stderr, "trainkit test: this process's files are kept in %s\n", dir->c_str());
    }
  }
  return failed;
}
