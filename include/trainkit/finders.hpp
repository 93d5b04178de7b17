#pragma once
// Finders (opt-in): the learning-rate range test and the batch-size finder.
#include "trainkit/finders/batch_size_finder.hpp"
#include "trainkit/finders/lr_finder.hpp"
