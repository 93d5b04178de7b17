#pragma once
// Learning-rate schedules (closed forms of torch.optim.lr_scheduler's, and
// ReduceLROnPlateau, which reads the epoch's metrics).
#include "trainkit/sched/constant.hpp"
#include "trainkit/sched/context.hpp"
#include "trainkit/sched/cosine.hpp"
#include "trainkit/sched/exponential.hpp"
#include "trainkit/sched/linear.hpp"
#include "trainkit/sched/multi_step.hpp"
#include "trainkit/sched/one_cycle.hpp"
#include "trainkit/sched/reduce_on_plateau.hpp"
#include "trainkit/sched/step.hpp"
#include "trainkit/sched/warmup_cosine.hpp"
