// Compiled as a plain compiler line without LibTorch's CMake target would
// be: the Gloo headers are there, but not LibTorch's USE_C10D_GLOO define.
// Asking for Gloo must then name the define, not claim the headers missing.
#undef USE_C10D_GLOO
#include <trainkit/parallel/process_group.hpp>

#include <chrono>
#include <cstdio>

#include "scratch.hpp"

int main() {
  try {
    trainkit::parallel::Environment env;
    env.master_port = tk_test::free_port();
    trainkit::parallel::ProcessGroup group(env, "gloo", std::chrono::seconds(10));
    std::puts("gloo_define: the group was made without USE_C10D_GLOO");
    return 1;
  } catch (const trainkit::Error& e) {
    std::puts(e.what());
    return 0;
  }
}
