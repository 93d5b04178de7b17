// One worker process of a shared study, for workers_test.cpp:
//   tune_worker STORAGE STUDY MODE MAX_TRIALS [RETRY_FAILED]
// STORAGE is sqlite:PATH or postgres:CONNINFO. Every mode suggests x, n and
// c first; then
//   run             reports three steps and returns (Study::optimize until
//                   the study has MAX_TRIALS)
//   sleep-in-trial  sleeps in its first trial until killed
//   write-loop      reports step after step (value = step / 4) until killed
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include <trainkit/tune/pruners/none.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/study.hpp>

#include "storage_spec.hpp"

using namespace trainkit::tune;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: tune_worker STORAGE STUDY run|sleep-in-trial|write-loop MAX_TRIALS "
                 "[RETRY_FAILED]\n";
    return 2;
  }
  const std::string mode = argv[3];
  try {
    Study study(tune_test::open_storage(argv[1]), {.name = argv[2]}, sampler::Random({.seed = 11}),
                pruner::None{});
    study.optimize(
        [&](Trial& t) {
          const double x = t.suggest_float("x", -5, 5);
          const auto n = t.suggest_int("n", 1, 1000);
          const auto c = t.suggest_categorical("c", {"a", "b", "c"});
          if (mode == "sleep-in-trial") {
            std::this_thread::sleep_for(std::chrono::hours(1));
          } else if (mode == "write-loop") {
            for (int64_t step = 0;; ++step) t.report(static_cast<double>(step) / 4, step);
          }
          const double value = x * x + static_cast<double>(n) / 1000 + (c == "a" ? 0 : 1);
          for (int64_t step = 0; step < 3; ++step) {
            t.report(value + static_cast<double>(3 - step), step);
            std::this_thread::sleep_for(std::chrono::milliseconds(15));
          }
          return value;
        },
        {.max_trials = std::atoll(argv[4]),
         .heartbeat_s = 1,
         .retry_failed = argc > 5 ? std::atoi(argv[5]) : 0});
  } catch (const std::exception& e) {
    std::cerr << "tune_worker: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
