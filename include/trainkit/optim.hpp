#pragma once
// Optimizer policies: flat SGD, Adam, AdamW, Muon (with AdamW), LARS and LAMB
// (trust ratios), schedule-free AdamW, and a wrapper for torch::optim.
#include "trainkit/optim/adam.hpp"
#include "trainkit/optim/adamw.hpp"
#include "trainkit/optim/lamb.hpp"
#include "trainkit/optim/lars.hpp"
#include "trainkit/optim/muon.hpp"
#include "trainkit/optim/schedule_free_adamw.hpp"
#include "trainkit/optim/sgd.hpp"
#include "trainkit/optim/wrap.hpp"
