#pragma once
// Forward declarations of trainkit's public types, without including
// LibTorch. Every class of the policy folders, callbacks/ and task.hpp is
// here: tests/lists_test.cpp checks this file against the headers.
#include <cstdint>

namespace trainkit {
class Error;
class FlatParams;
struct ParamGroup;
struct GroupOptions;
class TrainState;
class ModelRef;
struct StepOutput;
namespace optim {
struct AdamOptions;
class Adam;
struct AdamWOptions;
class AdamW;
struct LambOptions;
class Lamb;
struct LarsOptions;
class Lars;
struct MuonOptions;
class Muon;
struct ScheduleFreeAdamWOptions;
class ScheduleFreeAdamW;
struct SGDOptions;
class SGD;
template <class TorchOptimizer, class TorchOptions>
class Wrap;
}  // namespace optim
namespace sched {
struct ScheduleContext;
class Constant;
class Step;
class MultiStep;
class Exponential;
class Cosine;
class WarmupCosine;
class OneCycle;
class Linear;
class ReduceLROnPlateau;
}  // namespace sched
namespace precision {
struct Unscaled;
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
struct Rendezvous;
struct Environment;
class ProcessGroup;
class Single;
class DDP;
class ZeroSharded;
class ShardGradOp;
class FullShard;
class HybridShard;
class UnitRunner;
}  // namespace parallel
namespace task {
struct Classification;
struct Regression;
}  // namespace task
namespace callbacks {
class Monitor;
class EarlyStopping;
class ProgressBar;
class CsvLogger;
class ModelCheckpoint;
class NanGuard;
class LrMonitor;
class Throughput;
class Ema;
class Freeze;
class JsonLines;
class TensorBoard;
class RunReport;
class Profiler;
class ProgressiveResize;
}  // namespace callbacks
namespace capture {
struct None;
class CudaGraph;
}  // namespace capture
template <class Optimizer, class Scheduler, class Precision, class Accumulate, class Clip,
          class Parallel, class Capture>
class Trainer;
}  // namespace trainkit
