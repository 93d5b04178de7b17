#pragma once
// trainkit: training-loop building blocks over LibTorch. This umbrella is
// the core: the Trainer, every policy, the tasks, in-memory batches and the
// basic callbacks. Opt in to the rest, so a file that only trains does not
// compile it: trainkit/data.hpp (the loader, samplers, file readers,
// transforms), trainkit/callbacks.hpp (all callbacks: observability such as
// JsonLines, TensorBoard, RunReport, Profiler; ModelCheckpoint;
// ProgressiveResize), trainkit/io.hpp (checkpoint files, safetensors) and
// the parallel/ headers. concepts.hpp is the contract to read first.
#if __cplusplus < 202002L
#error "trainkit needs C++20 (-std=c++20)"
#endif

#include "trainkit/accumulate.hpp"
#include "trainkit/callbacks/csv_logger.hpp"
#include "trainkit/callbacks/early_stopping.hpp"
#include "trainkit/callbacks/lr_monitor.hpp"
#include "trainkit/callbacks/nan_guard.hpp"
#include "trainkit/callbacks/progress_bar.hpp"
#include "trainkit/callbacks/throughput.hpp"
#include "trainkit/capture.hpp"
#include "trainkit/clip.hpp"
#include "trainkit/concepts.hpp"
#include "trainkit/data/batch.hpp"
#include "trainkit/data/batch_view.hpp"
#include "trainkit/data/seed.hpp"
#include "trainkit/data/tensor_dataset.hpp"
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
#include "trainkit/trainer_with.hpp"
#include "trainkit/version.hpp"
