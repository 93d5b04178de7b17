// Writes the compatibility checkpoint: `write_checkpoint FILE`. The file in
// this folder was written by the commit its name gives; resume_test.cpp
// checks that every later trainkit still resumes from it.
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
