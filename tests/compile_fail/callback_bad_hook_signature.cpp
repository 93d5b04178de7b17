// Must not compile: on_step_end without its TrainState& parameter.
#include <torch/torch.h>
#include <trainkit/trainkit.hpp>

struct Misspelled {
  void on_step_end() {}  // should be on_step_end(trainkit::TrainState&)
};

void run(trainkit::Trainer<>& trainer, trainkit::data::TensorBatches& data) {
  trainer.fit(trainkit::task::Classification{}, data, {}, Misspelled{});
}
