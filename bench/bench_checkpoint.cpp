// Checkpoint write and read time and size for a 25M-parameter model with
// AdamW state, vs torch::save / torch::load of the same tensors in the same
// run. Our write includes the fsyncs that make it crash-safe; torch::save's
// does not, so a third line times torch::save followed by an fsync.
#include <fcntl.h>
#include <unistd.h>

#include <torch/torch.h>
#include <trainkit/io.hpp>
#include <trainkit/trainkit.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <tuple>
#include <vector>

#include "bench_util.hpp"

using namespace trainkit;

int main() {
  const auto dir = std::filesystem::temp_directory_path() / "trainkit_bench_ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  torch::manual_seed(0);
  auto model = torch::nn::Sequential(torch::nn::Linear(5000, 5000));  // 25.0M parameters
  FlatParams flat(*model);
  optim::AdamW adamw(flat, {});
  flat.groups()[0].grad.normal_();
  adamw.step();

  io::Checkpoint ckpt;
  for (const auto& [name, t] : io::module_tensors(*model)) ckpt.parts["model"].tensors[name] = t;
  ckpt.parts["optim"] = adamw.state_dict();
  std::vector<at::Tensor> same;
  for (const auto& part : {"model", "optim"}) {
    for (const auto& [name, t] : ckpt.parts[part].tensors) same.push_back(t.detach());
  }
  const auto ours = dir / "ours.ckpt", theirs = dir / "theirs.pt";
  const auto seconds = [](auto&& f) {
    const auto t = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  double w_ours = 1e9, r_ours = 1e9, w_torch = 1e9, w_torch_sync = 1e9, r_torch = 1e9;
  for (int i = 0; i < 3; ++i) {
    w_ours = std::min(w_ours, seconds([&] { io::write_checkpoint(ours, ckpt); }));
    r_ours = std::min(r_ours, seconds([&] { io::read_checkpoint(ours); }));
    w_torch = std::min(w_torch, seconds([&] { torch::save(same, theirs.string()); }));
    w_torch_sync = std::min(w_torch_sync, seconds([&] {
                              torch::save(same, theirs.string());
                              const int fd = ::open(theirs.c_str(), O_RDONLY);
                              ::fsync(fd);
                              ::close(fd);
                            }));
    r_torch = std::min(r_torch, seconds([&] {
                         std::vector<at::Tensor> back;
                         torch::load(back, theirs.string());
                       }));
  }
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"parameters\": %lld, \"ours_MB\": %.1f, \"torch_save_MB\": %.1f, "
                "\"write_s\": %.3f, \"torch_save_s\": %.3f, \"torch_save_fsync_s\": %.3f, "
                "\"read_s\": %.3f, \"torch_load_s\": %.3f, \"write_vs_torch_save_fsync\": %.2f, "
                "\"read_vs_torch_load\": %.2f",
                (long long)flat.numel(), std::filesystem::file_size(ours) / 1e6,
                std::filesystem::file_size(theirs) / 1e6, w_ours, w_torch, w_torch_sync, r_ours,
                r_torch, w_ours / w_torch_sync, r_ours / r_torch);
  bench::report("checkpoint_25M_adamw", buf);

  // The step's stall: how long save_checkpoint holds up training, with the
  // write on the step's thread and on the background one (the state copied
  // to host memory first), on the same model in a fit of 18 steps saving
  // after every 6th: the first save's stall, and the longest (a save that
  // comes before the last one is written waits for it). The fit's whole
  // time says what the overlap saves. Both forms: one file, and sharded
  // (one process: its rank file and the index).
  const auto stall = [&](CheckpointOptions::Form form, bool asynchronous) {
    torch::manual_seed(0);
    Trainer<optim::AdamW> trainer(torch::nn::Sequential(torch::nn::Linear(5000, 5000)),
                                  {.checkpoint = {.form = form, .asynchronous = asynchronous}});
    data::TensorBatches batches({at::randn({72, 5000}), at::randn({72, 5000})}, {.batch_size = 4});
    struct TimedSave {
      std::filesystem::path file;
      std::vector<double>* stalls;
      void on_step_end(TrainState& s) {
        if (s.step % 6 != 0) return;
        const auto start = std::chrono::steady_clock::now();
        s.save_checkpoint(file);
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        stalls->push_back(took.count());
      }
    };
    std::vector<double> stalls;
    const auto whole = seconds([&] {
      trainer.fit(task::Regression{}, batches, {.epochs = 1},
                  TimedSave{dir / "stall.ckpt", &stalls});
    });
    return std::tuple{stalls.front(), *std::max_element(stalls.begin(), stalls.end()), whole};
  };
  for (const auto form : {CheckpointOptions::Form::File, CheckpointOptions::Form::Sharded}) {
    const auto [sync_first, sync_longest, sync_fit] = stall(form, false);
    const auto [async_first, async_longest, async_fit] = stall(form, true);
    std::snprintf(buf, sizeof buf,
                  "\"parameters\": %lld, \"save_stall_s\": %.3f, \"async_first_stall_s\": %.3f, "
                  "\"first_stall_ratio\": %.3f, \"async_longest_stall_s\": %.3f, "
                  "\"fit_3_saves_s\": %.3f, \"async_fit_3_saves_s\": %.3f",
                  (long long)flat.numel(), sync_longest, async_first, async_first / sync_first,
                  async_longest, sync_fit, async_fit);
    bench::report(form == CheckpointOptions::Form::File ? "checkpoint_stall_25M_adamw"
                                                        : "checkpoint_stall_sharded_25M_adamw",
                  buf);
  }
  std::filesystem::remove_all(dir);
}
