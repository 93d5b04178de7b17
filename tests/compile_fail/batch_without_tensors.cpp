// Must not compile: a batch type trainkit cannot see tensors in (a class
// with a constructor and private members, no BatchTraits specialisation).
#include <torch/torch.h>
#include <trainkit/trainkit.hpp>

#include <vector>

class Opaque {
 public:
  Opaque(at::Tensor x, at::Tensor y) : x_(std::move(x)), y_(std::move(y)) {}
  const at::Tensor& x() const { return x_; }
  const at::Tensor& y() const { return y_; }

 private:
  at::Tensor x_, y_;
};

struct OpaqueTask {
  trainkit::StepOutput step(trainkit::ModelRef& model, const Opaque& b) const {
    return {torch::mse_loss(model(b.x()), b.y())};
  }
};

void run(trainkit::Trainer<>& trainer, std::vector<Opaque>& data) {
  trainer.fit(OpaqueTask{}, data);
}
