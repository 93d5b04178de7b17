// The one doctest main shared by every test binary.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

// CTest runs each case by its name, and CMake splits a name at ';' into two
// that match no case, so a case so named would never run (six did not).
TEST_CASE("every test case name can be run by CTest (no semicolon)") {
  for (const auto& tc : doctest::detail::getRegisteredTests()) {
    const std::string name = tc.m_name;
    CHECK_MESSAGE(name.find(';') == std::string::npos, name);
  }
}
