#pragma once
// Activation checkpointing: run a segment of the model so that backward
// recomputes its forward instead of keeping its activations, trading
// compute for memory (PyTorch's reentrant torch.utils.checkpoint). Only the
// segment's input is saved. The recomputation sees the random generators
// (CPU, and the input's CUDA device) and the autocast settings of the
// forward, so dropout draws the same mask and fp16/bf16 regions cast the same.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/types.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/detail/compat.hpp"
#include "trainkit/error.hpp"
#if TRAINKIT_HAS_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace trainkit::memory {

/// A part of the forward pass: a tensor in, a tensor out.
using Segment = std::function<at::Tensor(const at::Tensor&)>;

namespace detail {

/// What the recomputation needs besides the saved input.
struct SegmentState : torch::CustomClassHolder {
  explicit SegmentState(Segment f) : fn(std::move(f)) {}
  Segment fn;
  at::Tensor cpu_rng;
  int cuda_device = -1;  ///< the input's CUDA device, whose generator is kept
  at::Tensor cuda_rng;
  struct Autocast {
    c10::DeviceType device;
    bool enabled;
    c10::ScalarType dtype;
  };
  std::vector<Autocast> autocast;
};

inline at::Generator cuda_generator([[maybe_unused]] int device) {
#if TRAINKIT_HAS_CUDA
  return at::cuda::detail::getDefaultCUDAGenerator(c10::DeviceIndex(device));
#else
  throw Error("trainkit: memory::checkpoint got a CUDA tensor in a build without CUDA");
#endif
}

inline at::Tensor rng_state(at::Generator gen) {  // a handle: copies share the state
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
inline void set_rng_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

/// Puts the forward's generator states in place for the recomputation and
/// the current ones back afterwards, so training draws on as if nothing ran.
class ForkedRng {
 public:
  explicit ForkedRng(const SegmentState& s) : state_(s) {
    const auto cpu = at::detail::getDefaultCPUGenerator();
    cpu_now_ = rng_state(cpu);
    set_rng_state(cpu, s.cpu_rng);
    if (s.cuda_device >= 0) {
      const auto cuda = cuda_generator(s.cuda_device);
      cuda_now_ = rng_state(cuda);
      set_rng_state(cuda, s.cuda_rng);
    }
  }
  ~ForkedRng() {
    set_rng_state(at::detail::getDefaultCPUGenerator(), cpu_now_);
    if (state_.cuda_device >= 0) set_rng_state(cuda_generator(state_.cuda_device), cuda_now_);
  }
  ForkedRng(const ForkedRng&) = delete;
  ForkedRng& operator=(const ForkedRng&) = delete;

 private:
  const SegmentState& state_;
  at::Tensor cpu_now_, cuda_now_;
};

/// The forward's autocast settings, on or off, for the recomputation (a
/// backward called inside an autocast region must not recompute a segment
/// that ran in fp32 in bf16), and the current ones back afterwards.
class ReplayedAutocast {
 public:
  explicit ReplayedAutocast(const std::vector<SegmentState::Autocast>& modes) {
    for (const auto& m : modes) {
      now_.push_back({m.device, trainkit::detail::autocast_enabled(m.device),
                      trainkit::detail::autocast_dtype(m.device)});
      trainkit::detail::set_autocast(m.device, m.enabled, m.dtype);
    }
    at::autocast::increment_nesting();
  }
  ~ReplayedAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    for (const auto& m : now_) trainkit::detail::set_autocast(m.device, m.enabled, m.dtype);
  }
  ReplayedAutocast(const ReplayedAutocast&) = delete;
  ReplayedAutocast& operator=(const ReplayedAutocast&) = delete;

 private:
  std::vector<SegmentState::Autocast> now_;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // `anchor` requires grad, so the output has this node even when neither
  // the input nor anything else passed in does (the segment's parameters
  // are not inputs of this node: the recomputation reaches them).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& /*anchor*/, c10::intrusive_ptr<SegmentState> s) {
    s->cpu_rng = rng_state(at::detail::getDefaultCPUGenerator());
    if (input.is_cuda()) {
      s->cuda_device = input.get_device();
      s->cuda_rng = rng_state(cuda_generator(s->cuda_device));
    }
    for (const auto device : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
      s->autocast.push_back({device, trainkit::detail::autocast_enabled(device),
                             trainkit::detail::autocast_dtype(device)});
    }
    ctx->save_for_backward({input});
    ctx->saved_data["segment"] = c10::IValue::make_capsule(s);
    return s->fn(input);  // autograd is off here: no activation is kept
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s =
        c10::static_intrusive_pointer_cast<SegmentState>(ctx->saved_data["segment"].toCapsule());
    const auto input = ctx->get_saved_variables()[0];
    auto x = input.detach().requires_grad_(input.requires_grad());
    at::Tensor out;
    {
      ForkedRng rng(*s);
      ReplayedAutocast autocast(s->autocast);
      at::AutoGradMode grad(true);
      out = s->fn(x);
    }
    if (out.requires_grad()) torch::autograd::backward({out}, {grads[0]});
    return {x.requires_grad() ? x.grad() : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace detail

/// `segment(input)`, keeping only `input` for backward: the segment runs
/// again there. Gradients equal the plain call's; the segment must be a
/// function of its input, its parameters and the random generators alone.
inline at::Tensor checkpoint(Segment segment, const at::Tensor& input) {
  if (!at::GradMode::is_enabled()) return segment(input);  // nothing to save anyway
  const auto anchor = at::empty({0}, input.options().dtype(at::kFloat)).requires_grad_(true);
  return detail::CheckpointFunction::apply(
      input, anchor, c10::make_intrusive<detail::SegmentState>(std::move(segment)));
}

/// A Sequential whose blocks run in checkpointed segments of `segment_size`
/// consecutive blocks: only the activations at segment boundaries are kept
/// (about N / segment_size + segment_size blocks' worth instead of N).
class CheckpointedSequentialImpl : public torch::nn::Module {
 public:
  CheckpointedSequentialImpl(torch::nn::Sequential blocks, int64_t segment_size)
      : blocks_(register_module("blocks", std::move(blocks))), segment_size_(segment_size) {
    trainkit::detail::require_option(segment_size >= 1, "CheckpointedSequential.segment_size",
                                     segment_size, "a number >= 1");
  }
  at::Tensor forward(at::Tensor x) {
    const int64_t n = static_cast<int64_t>(blocks_->size());
    for (int64_t begin = 0; begin < n; begin += segment_size_) {
      const int64_t end = std::min(n, begin + segment_size_);
      x = checkpoint(
          [this, begin, end](const at::Tensor& in) {
            auto h = in;
            for (auto it = blocks_->begin() + begin; it != blocks_->begin() + end; ++it)
              h = it->forward(h);
            return h;
          },
          x);
    }
    return x;
  }
  torch::nn::Sequential& blocks() { return blocks_; }

 private:
  torch::nn::Sequential blocks_;
  int64_t segment_size_;
};
TORCH_MODULE(CheckpointedSequential);

}  // namespace trainkit::memory
