#pragma once
// The study database the `study` fuzz target reads: a valid study written by
// SqliteStorage, and the cells of it whose text an input replaces, one input
// line per cell in the order of `study_cells` (a line left out keeps the
// study's own text). The seed is the study's own text of every cell.
#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <trainkit/tune/sqlite.hpp>
#include <vector>

namespace trainkit::fuzz {

struct StudyCell {
  const char* table;
  const char* column;
  const char* row;  // a WHERE clause that picks one row of the template
};

// What a study stores in Optuna's tables: distributions and attributes
// (JSON), numbers and their types, states, times, the direction; of a
// complete trial and a waiting one.
inline constexpr StudyCell study_cells[] = {
    {"study_directions", "direction", "objective = 0"},
    {"trials", "state", "number = 0"},
    {"trials", "datetime_start", "number = 0"},
    {"trial_values", "value", "objective = 0"},
    {"trial_values", "value_type", "objective = 0"},
    {"trial_params", "distribution_json", "param_name = 'lr'"},
    {"trial_params", "param_value", "param_name = 'lr'"},
    {"trial_params", "distribution_json", "param_name = 'layers'"},
    {"trial_params", "param_value", "param_name = 'layers'"},
    {"trial_params", "distribution_json", "param_name = 'act'"},
    {"trial_params", "param_value", "param_name = 'act'"},
    {"trial_intermediate_values", "step", "step = 1"},
    {"trial_intermediate_values", "intermediate_value", "step = 1"},
    {"trial_intermediate_values", "intermediate_value_type", "step = 1"},
    {"trial_user_attributes", "value_json", "key = 'note'"},
    {"trial_system_attributes", "value_json", "key = 'fixed_params'"},
    {"trials", "state", "number = 1"},
};

struct StudyTemplate {
  std::vector<int64_t> rowids;      // of each cell's row
  std::vector<std::string> values;  // each cell's text as SqliteStorage wrote it
};

/// Writes the study to `file` (which must not exist) and reads its cells back.
inline StudyTemplate write_study_template(const std::filesystem::path& file) {
  using namespace trainkit::tune;
  {
    SqliteStorage s(file);
    const auto study = s.create_study("fuzz", Direction::Minimize, false);
    const auto t = *s.start_trial(study, WorkerId{"fuzz", "", 1, 5.0}, std::nullopt, false);
    s.set_param(t.id, "lr", {FloatDistribution{1e-4, 1, true, std::nullopt}, 0.01});
    s.set_param(t.id, "layers", {IntDistribution{2, 8, 2, false}, 4});
    s.set_param(t.id, "act", {CategoricalDistribution{{"relu", "gelu", 1, nullptr}}, 1});
    s.report(t.id, 0, 0.9);
    s.report(t.id, 1, 0.7);
    s.set_user_attr(t.id, "note",
                    {{"text", "x"}, {"inf", std::numeric_limits<double>::infinity()}});
    s.finish_trial(t.id, {TrialState::Complete, 0.5});
    s.enqueue_trial(study, {{"lr", 0.01}, {"act", "relu"}}, nlohmann::json::object());
  }
  StudyTemplate out;
  sqlite3* db = nullptr;
  sqlite3_open(file.c_str(), &db);
  for (const auto& c : study_cells) {
    const std::string sql =
        std::string("SELECT rowid, ") + c.column + " FROM " + c.table + " WHERE " + c.row;
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr);
    if (sqlite3_step(s) != SQLITE_ROW) throw Error("fuzz: the template has no row for " + sql);
    out.rowids.push_back(sqlite3_column_int64(s, 0));
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
    out.values.emplace_back(text ? text : "");
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  return out;
}

}  // namespace trainkit::fuzz
