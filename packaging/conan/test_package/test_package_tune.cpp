// With -o trainkit/*:with_tune=True: the search's headers compile and SQLite
// links: a 5-trial random search stored in an SQLite file.
#include <trainkit/tune/pruners/none.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/sqlite.hpp>
#include <trainkit/tune/study.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>

namespace tune = trainkit::tune;

int main() {
  const auto file = std::filesystem::temp_directory_path() / "trainkit_test_package.db";
  std::filesystem::remove(file);
  tune::Study study(std::make_shared<tune::SqliteStorage>(file), {.name = "test_package"},
                    tune::sampler::Random({.seed = 1}), tune::pruner::None{});
  study.optimize([](tune::Trial& t) { return t.suggest_float("x", -1, 1); },
                 {.n_trials = 5, .log = nullptr});
  const auto n = study.trials().size();
  std::printf("trainkit test_package: %zu trials in %s\n", n, file.c_str());
  std::filesystem::remove(file);
  return n == 5 ? 0 : 1;
}
