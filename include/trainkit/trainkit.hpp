#pragma once
// trainkit: training-loop building blocks over LibTorch. This umbrella is
// the core: the Trainer, every policy, the tasks, the data pipeline and the
// callbacks that need no file format. Opt in to the rest, which compiles a
// JSON library or more: trainkit/callbacks.hpp (all callbacks, or one of
// ModelCheckpoint, JsonLines, TensorBoard, RunReport, Profiler),
// trainkit/io.hpp (checkpoint files, safetensors) and the parallel/ headers.
// concepts.hpp is the contract to read first.
#if __cplusplus < 202002L
#error "trainkit needs C++20 (-std=c++20)"
#endif

#include "trainkit/accumulate.hpp"
#include "trainkit/callbacks/csv_logger.hpp"
#include "trainkit/callbacks/early_stopping.hpp"
#include "trainkit/callbacks/lr_monitor.hpp"
#include "trainkit/callbacks/nan_guard.hpp"
#include "trainkit/callbacks/progress_bar.hpp"
#include "trainkit/callbacks/progressive_resize.hpp"
#include "trainkit/callbacks/throughput.hpp"
#include "trainkit/clip.hpp"
#include "trainkit/concepts.hpp"
#include "trainkit/data.hpp"
#include "trainkit/detail/compat.hpp"  // also rejects LibTorch < 1.13
#include "trainkit/error.hpp"
#include "trainkit/optim.hpp"
#include "trainkit/parallel.hpp"
#include "trainkit/params.hpp"
#include "trainkit/precision.hpp"
#include "trainkit/reproducibility.hpp"
#include "trainkit/sched.hpp"
#include "trainkit/state.hpp"
#include "trainkit/task.hpp"
#include "trainkit/trainer.hpp"
#include "trainkit/version.hpp"
