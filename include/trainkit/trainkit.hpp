#pragma once
// trainkit: training-loop building blocks over LibTorch. This umbrella
// includes every public header; concepts.hpp is the contract to read first.
#if __cplusplus < 202002L
#error "trainkit needs C++20 (-std=c++20)"
#endif

#include "trainkit/accumulate.hpp"
#include "trainkit/callbacks.hpp"
#include "trainkit/clip.hpp"
#include "trainkit/concepts.hpp"
#include "trainkit/data.hpp"
#include "trainkit/detail/compat.hpp"  // also rejects LibTorch < 1.13
#include "trainkit/error.hpp"
#include "trainkit/io.hpp"
#include "trainkit/optim.hpp"
#include "trainkit/parallel.hpp"
#include "trainkit/params.hpp"
#include "trainkit/precision.hpp"
#include "trainkit/reproducibility.hpp"
#include "trainkit/sched.hpp"
#include "trainkit/state.hpp"
#include "trainkit/task.hpp"
#include "trainkit/trainer.hpp"
#include "trainkit/version.hpp"
