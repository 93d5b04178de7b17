#pragma once
// Finders (opt-in): the learning-rate range test.
#include "trainkit/finders/lr_finder.hpp"
