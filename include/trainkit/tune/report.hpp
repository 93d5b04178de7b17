#pragma once
// Reports of a study, from its trials (Study::trials(), or a storage's):
//   write_trials_csv    one row per trial, a column per parameter (blank
//                       where a trial lacks one: conditional parameters)
//   write_trials_json   the same and the intermediate values, the
//                       distributions and the best trial
//   write_study_report  one self-contained HTML page (inline SVG, no script,
//                       no network): best value and parameters, trial counts,
//                       the optimisation history, a slice plot per parameter,
//                       parallel coordinates and the learning curves; for
//                       several objectives, the Pareto front instead of the
//                       history, slices and parallel coordinates
// All three are written atomically, and are the same bytes for the same
// trials (no clock is read), so a report can be rewritten after every trial.
//
// Laid out as Optuna's visualization: tune/report/tables.hpp (CSV, JSON),
// one file per chart that builds the chart's data and then draws it
// (tune/report/*_chart.hpp, with the SVG engine callbacks::RunReport draws
// with, trainkit/detail/svg_chart.hpp) and tune/report/page.hpp.
#include "trainkit/tune/report/page.hpp"
#include "trainkit/tune/report/tables.hpp"
