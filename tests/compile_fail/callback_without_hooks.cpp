// Must not compile: a callback with no hook at all.
#include <torch/torch.h>
#include <trainkit/trainkit.hpp>

struct NotACallback {
  int on_step = 0;  // not a hook name
};

void run(trainkit::Trainer<>& trainer, trainkit::data::TensorBatches& data) {
  trainer.fit(trainkit::task::Classification{}, data, {}, NotACallback{});
}
