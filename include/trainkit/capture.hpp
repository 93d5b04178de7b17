#pragma once
// The capture policies: capture::None (eager steps) and capture::CudaGraph.
#include "trainkit/capture/cuda_graph.hpp"
#include "trainkit/capture/none.hpp"
