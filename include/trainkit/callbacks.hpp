#pragma once
// Ready callbacks. Callbacks that publish step scalars (Throughput,
// LrMonitor) go before the loggers that write them (TensorBoard, JsonLines,
// RunReport) in the callback list.
#include "trainkit/callbacks/csv_logger.hpp"
#include "trainkit/callbacks/early_stopping.hpp"
#include "trainkit/callbacks/ema.hpp"
#include "trainkit/callbacks/freeze.hpp"
#include "trainkit/callbacks/json_lines.hpp"
#include "trainkit/callbacks/lr_monitor.hpp"
#include "trainkit/callbacks/model_checkpoint.hpp"
#include "trainkit/callbacks/nan_guard.hpp"
#include "trainkit/callbacks/profiler.hpp"
#include "trainkit/callbacks/progress_bar.hpp"
#include "trainkit/callbacks/progressive_resize.hpp"
#include "trainkit/callbacks/run_report.hpp"
#include "trainkit/callbacks/tensorboard.hpp"
#include "trainkit/callbacks/throughput.hpp"
