#pragma once
// Forward declarations of trainkit's public types, without including LibTorch.
#include <cstdint>

namespace trainkit {
class Error;
class FlatParams;
class TrainState;
class ModelRef;
struct StepOutput;
namespace optim {
class SGD;
class Adam;
class AdamW;
template <class TorchOptimizer, class TorchOptions>
class Wrap;
}  // namespace optim
namespace sched {
class Constant;
class Step;
class MultiStep;
class Exponential;
class Cosine;
class WarmupCosine;
class OneCycle;
class Linear;
}  // namespace sched
namespace precision {
class Fp32;
class Bf16;
class Fp16;
class GradScaler;
}  // namespace precision
namespace accumulate {
struct None;
template <int64_t N>
struct Every;
class Steps;
}  // namespace accumulate
namespace clip {
struct None;
class Norm;
class Value;
}  // namespace clip
namespace parallel {
class Single;
class DDP;
class ZeroSharded;
}  // namespace parallel
namespace task {
struct Classification;
struct Regression;
}  // namespace task
namespace callbacks {
class EarlyStopping;
class ProgressBar;
class CsvLogger;
}  // namespace callbacks
template <class Optimizer, class Scheduler, class Precision, class Accumulate, class Clip,
          class Parallel>
class Trainer;
}  // namespace trainkit
