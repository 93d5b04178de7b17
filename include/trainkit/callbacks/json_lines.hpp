#pragma once
// callbacks::JsonLines: one JSON object per line, for jq, pandas or a
// dashboard: {"kind":"step",...} on logging steps (the loss, the gradient
// norm and loss scale when present, the scalars callbacks before it
// published) and {"kind":"epoch",...} with the epoch metrics. Each line is
// appended whole; a resumed run appends to its file. Main process only.
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "trainkit/error.hpp"
#include "trainkit/io/append_file.hpp"
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

class JsonLines {
 public:
  struct Options {
    std::filesystem::path path = "runs/log.jsonl";
  };
  JsonLines() : JsonLines(Options{}) {}
  explicit JsonLines(Options o) : options_(std::move(o)) {
    detail::require_file_path("json_lines.path", options_.path, "runs/a/log.jsonl");
  }

  void on_fit_begin(TrainState& state) {
    if (!state.is_main_process()) return;
    file_ = std::make_unique<io::AppendFile>(options_.path, state.resumed
                                                                ? io::AppendFile::Mode::append
                                                                : io::AppendFile::Mode::truncate);
    start_ = clock::now();
    nlohmann::json line{{"kind", "config"}, {"step", state.step}};
    for (const auto& [name, value] : state.config) line[name] = value;
    write(line);
  }

  void on_step_end(TrainState& state) {
    if (!file_ || !state.should_log()) return;
    auto line = header("step", state);
    for (const auto& [name, value] : state.logged_values()) line[name] = value;
    write(line);
  }

  void on_epoch_end(TrainState& state) {
    if (!file_) return;
    auto line = header("epoch", state);
    for (const auto& [name, value] : state.metrics) line[name] = value;
    write(line);
  }

  void on_fit_end(TrainState&) { file_.reset(); }
  void on_exception(TrainState&) { file_.reset(); }

  const std::filesystem::path& path() const { return options_.path; }

 private:
  using clock = std::chrono::steady_clock;

  nlohmann::json header(const char* kind, const TrainState& state) const {
    return {{"kind", kind},
            {"step", state.step},
            {"epoch", state.epoch},
            {"samples", state.samples_seen},
            {"seconds", std::chrono::duration<double>(clock::now() - start_).count()}};
  }
  void write(const nlohmann::json& line) {
    // nlohmann writes non-finite numbers as null; bad UTF-8 in names is replaced.
    file_->append(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }

  Options options_;
  std::unique_ptr<io::AppendFile> file_;
  clock::time_point start_;
};

}  // namespace trainkit::callbacks
