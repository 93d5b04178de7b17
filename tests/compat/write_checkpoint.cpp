// Writes the compatibility checkpoint: `write_checkpoint FILE`. Each file in
// this folder was written by the release (or commit) its name gives, with
// this writer as it was there: checkpoint-0.1.0.ckpt by 0.1.0's release
// commit (CHANGELOG.md), with
//   g++ -std=c++20 -O1 -fopenmp -I include -isystem \
//     /usr/include/torch/csrc/api/include tests/compat/write_checkpoint.cpp \
//     -ltorch -ltorch_cpu -lc10 -lz
// in a `git archive` of that commit. resume_test.cpp checks that every later
// trainkit resumes from it; checkpoint-efa98fe.ckpt, of a development build
// before 0.1.0, is refused (decision 103).
#include <iostream>

#include <trainkit/io/checkpoint.hpp>

#include "setup.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_checkpoint FILE\n";
    return 2;
  }
  const std::filesystem::path file = argv[1];
  struct SaveAt {
    std::filesystem::path file;
    void on_step_end(trainkit::TrainState& s) {
      if (s.step == tk_compat::kSavedAtStep) {
        s.save_checkpoint(file);
        s.request_stop("saved");
      }
    }
  };
  auto trainer = tk_compat::trainer();
  auto data = tk_compat::loader();
  trainer.fit(trainkit::task::Classification{}, data, {.epochs = tk_compat::kEpochs},
              tk_compat::early_stopping(), SaveAt{file});
  std::cout << "wrote " << file << "\n";
}
