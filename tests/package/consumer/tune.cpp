// trainkit::tune from a package: a 5-trial random search on each storage of
// one machine (in memory; an SQLite file, read back through a second
// connection). Only the headers it needs, to keep the build short.
#include <trainkit/tune/pruners/none.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/sqlite.hpp>
#include <trainkit/tune/study.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace tune = trainkit::tune;

namespace {

// The number of complete trials the study holds after 5 more.
size_t search(const std::shared_ptr<tune::Storage>& storage) {
  tune::Study study(storage, {.name = "consumer"}, tune::sampler::Random({.seed = 1}),
                    tune::pruner::None{});
  study.optimize(
      [](tune::Trial& t) {
        const double x = t.suggest_float("x", -3, 3);
        return (x - 1) * (x - 1);
      },
      {.n_trials = 5, .log = nullptr});
  size_t complete = 0;
  for (const auto& t : study.trials()) complete += t.state == tune::TrialState::Complete;
  return complete;
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 1 ? argv[1] : "consumer_tune";
  std::filesystem::create_directories(dir);
  const auto file = dir / "study.db";
  std::filesystem::remove(file);

  const size_t in_memory = search(std::make_shared<tune::InMemoryStorage>());
  const size_t in_sqlite = search(std::make_shared<tune::SqliteStorage>(file));
  tune::SqliteStorage again(file);
  const size_t read_back =
      again.trials(again.create_study("consumer", tune::Direction::Minimize, true)).size();
  std::printf("consumer_tune: %zu trials in memory, %zu in %s (%zu read back)\n", in_memory,
              in_sqlite, file.c_str(), read_back);
  return in_memory == 5 && in_sqlite == 5 && read_back == 5 ? 0 : 1;
}
