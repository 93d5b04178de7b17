// libFuzzer target: the study storage of trainkit::tune. A study database
// that SQLite itself checks (pages, schema) is not where a hostile study
// hurts: its cells are. Each input's lines replace the text of the cells in
// study_db.hpp (distributions and attributes as JSON, numbers, states), then
// the study is read as a sampler reads it: every trial, every parameter's
// value, the best trial and the space the trials share.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string_view>

#include "fuzz.hpp"
#include "study_db.hpp"

namespace {

namespace fs = std::filesystem;
using namespace trainkit;

struct Fixture {
  fs::path dir;
  fuzz::StudyTemplate cells;
  sqlite3* writer = nullptr;
  std::unique_ptr<tune::SqliteStorage> storage;
  int64_t study = 0;
  std::vector<sqlite3_stmt*> updates;  // one per cell: SET column = ?1 WHERE rowid = ?2

  Fixture() {
    dir = fs::temp_directory_path() / ("trainkit-fuzz-study-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const auto file = dir / "study.db";
    cells = fuzz::write_study_template(file);
    sqlite3_open(file.c_str(), &writer);
    for (const auto& c : fuzz::study_cells) {
      const std::string sql =
          std::string("UPDATE ") + c.table + " SET " + c.column + " = ?1 WHERE rowid = ?2";
      sqlite3_stmt* s = nullptr;
      sqlite3_prepare_v2(writer, sql.c_str(), -1, &s, nullptr);
      updates.push_back(s);
    }
    storage = std::make_unique<tune::SqliteStorage>(file);
    study = storage->create_study("fuzz", tune::Direction::Minimize, true);
  }
  ~Fixture() {
    storage.reset();
    for (auto* s : updates) sqlite3_finalize(s);
    sqlite3_close(writer);
    fs::remove_all(dir);
  }

  // Cell k's text becomes `text`; false when SQLite refuses it (a key that
  // collides), which leaves the cell as it was.
  bool set(size_t k, std::string_view text) {
    sqlite3_stmt* s = updates[k];
    sqlite3_bind_text(s, 1, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, cells.rowids[k]);
    const bool ok = sqlite3_step(s) == SQLITE_DONE;
    sqlite3_reset(s);
    return ok;
  }

  // The template's text everywhere, then the input's lines over it.
  void write(std::string_view input) {
    sqlite3_exec(writer, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
    for (size_t k = 0; k < updates.size(); ++k) set(k, cells.values[k]);
    for (size_t k = 0; k < updates.size() && !input.empty(); ++k) {
      const auto end = input.find('\n');
      set(k, input.substr(0, end));
      input = end == std::string_view::npos ? std::string_view() : input.substr(end + 1);
    }
    sqlite3_exec(writer, "COMMIT", nullptr, nullptr, nullptr);
  }
};

Fixture& fixture() {
  static Fixture f;  // destroyed at exit: the temporary folder goes with it
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& f = fixture();
  return fuzz::run(data, size, [&](const std::string& input) {
    f.write(input);
    const auto direction = f.storage->direction(f.study);
    const auto trials = f.storage->trials(f.study);
    for (const auto& t : trials) {
      for (const auto& [name, param] : t.params) (void)param.value();
    }
    const tune::StudyView view{direction, trials};
    (void)view.best();
    (void)tune::intersection_search_space(view, true);
  });
}
