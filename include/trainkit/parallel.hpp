#pragma once
// Parallel policies: device placement and gradient synchronisation.
#include "trainkit/parallel/ddp.hpp"
#include "trainkit/parallel/single.hpp"
#include "trainkit/parallel/zero_sharded.hpp"
