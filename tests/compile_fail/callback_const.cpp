// Must not compile: a const callback, whose hooks could never run.
#include <torch/torch.h>
#include <trainkit/trainkit.hpp>

struct Counter {
  int steps = 0;
  void on_step_end(trainkit::TrainState&) { ++steps; }
};

void run(trainkit::Trainer<>& trainer, trainkit::data::TensorBatches& data) {
  const Counter counter;
  trainer.fit(trainkit::task::Classification{}, data, {}, counter);
}
