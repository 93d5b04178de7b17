#pragma once
// Parallel policies: device placement and gradient synchronisation.
// parallel::DDP and the sharding strategies are included on their own
// (trainkit/parallel/ddp.hpp, zero_sharded.hpp, shard_grad_op.hpp,
// full_shard.hpp): LibTorch's c10d headers
// add about 1 s to every file that includes them (docs/decisions.md).
#include "trainkit/parallel/single.hpp"
#include "trainkit/parallel/unit.hpp"
