#pragma once
// trainkit::tune, the hyperparameter search (CMake target trainkit::tune,
// which links SQLite): studies, the SQLite storage, the samplers and
// pruners, the Trainer's pruning callback and the study report. Opt-in
// beyond this header: tune/samplers/gp.hpp (LibTorch's full header) and
// tune/postgres.hpp (links libpq). docs/tune.md is the guide.
#include "trainkit/tune/pruners/asha.hpp"
#include "trainkit/tune/pruners/none.hpp"
#include "trainkit/tune/pruners/percentile.hpp"
#include "trainkit/tune/pareto.hpp"
#include "trainkit/tune/pruning.hpp"
#include "trainkit/tune/report.hpp"
#include "trainkit/tune/samplers/grid.hpp"
#include "trainkit/tune/samplers/halton.hpp"
#include "trainkit/tune/samplers/nsga2.hpp"
#include "trainkit/tune/samplers/random.hpp"
#include "trainkit/tune/samplers/tpe.hpp"
#include "trainkit/tune/sqlite.hpp"
#include "trainkit/tune/study.hpp"
