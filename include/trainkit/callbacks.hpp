#pragma once
// Ready callbacks.
#include "trainkit/callbacks/csv_logger.hpp"
#include "trainkit/callbacks/early_stopping.hpp"
#include "trainkit/callbacks/model_checkpoint.hpp"
#include "trainkit/callbacks/nan_guard.hpp"
#include "trainkit/callbacks/progress_bar.hpp"
#include "trainkit/callbacks/progressive_resize.hpp"
