#pragma once
// Parallel policies: device placement and gradient synchronisation.
#include "trainkit/parallel/single.hpp"
