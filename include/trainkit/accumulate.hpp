#pragma once
// Gradient accumulation policies.
#include "trainkit/accumulate/every.hpp"
#include "trainkit/accumulate/none.hpp"
#include "trainkit/accumulate/steps.hpp"
