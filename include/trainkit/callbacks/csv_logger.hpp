#pragma once
// callbacks::CsvLogger: one row per epoch (epoch, step, lr, seconds and every
// epoch metric). Each row is appended whole (io::AppendFile), so a crash
// loses at most the row being formed; written on the main process only.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/io/append_file.hpp"
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

class CsvLogger {
 public:
  struct Options {
    std::filesystem::path path = "train_log.csv";
  };
  CsvLogger() : CsvLogger(Options{}) {}
  explicit CsvLogger(Options o) : options_(std::move(o)) {
    detail::require_file_path("csv_logger.path", options_.path, "runs/a/log.csv");
  }

  void on_fit_begin(TrainState& state) {
    if (!state.is_main_process()) return;
    columns_.clear();
    // A resumed run appends to its log under the columns already there.
    const bool append = state.resumed && std::filesystem::exists(options_.path);
    if (append) {
      std::ifstream in(options_.path);
      std::string header;
      std::getline(in, header);
      std::stringstream cells(header);
      std::string cell;
      for (int i = 0; std::getline(cells, cell, ','); ++i) {
        if (i >= 4) columns_.push_back(cell);  // after epoch,step,lr,seconds
      }
    }
    file_ = std::make_unique<io::AppendFile>(
        options_.path, append ? io::AppendFile::Mode::append : io::AppendFile::Mode::truncate);
    start_ = std::chrono::steady_clock::now();
  }

  void on_epoch_end(TrainState& state) {
    if (!file_) return;
    std::ostringstream row;
    row.precision(9);
    if (columns_.empty()) {
      for (const auto& [name, value] : state.metrics) columns_.push_back(name);
      row << "epoch,step,lr,seconds";
      for (const auto& c : columns_) row << ',' << c;
      row << '\n';
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    row << state.epoch + 1 << ',' << state.step << ',' << state.lr << ',' << seconds;
    for (const auto& c : columns_) {
      row << ',';
      if (const auto it = state.metrics.find(c); it != state.metrics.end()) row << it->second;
    }
    row << '\n';
    file_->append(row.str());
  }

  void on_fit_end(TrainState&) { file_.reset(); }
  void on_exception(TrainState&) { file_.reset(); }

  const std::filesystem::path& path() const { return options_.path; }

 private:
  Options options_;
  std::unique_ptr<io::AppendFile> file_;
  std::vector<std::string> columns_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace trainkit::callbacks
