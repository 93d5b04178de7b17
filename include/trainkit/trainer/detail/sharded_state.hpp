#pragma once
// The sharded checkpoint form, trainer side: what each rank writes (the
// boxes of the parameters and optimizer state it holds, in model shapes; the
// replicated parts from rank 0; its own random generators) and how a rank
// of any later run, under any strategy, reads back the elements it holds.
// The folder's format is io/sharded_checkpoint.hpp's, behind the codec.
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/io/named_tensors.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"
#include "trainkit/trainer/detail/checkpoint_parts.hpp"
#include "trainkit/trainer/detail/state_layout.hpp"

namespace trainkit::detail {

/// What the sharded form reads and writes of a trainer.
struct TrainerStateView {
  torch::nn::Module& model;
  FlatParams& flat;       ///< every parameter's place
  GroupSlots slots;       ///< flat's parameters by name (param_slots)
  FlatParams& optimized;  ///< what this rank's optimizer updates: all of flat, or its shard
  GroupShare held;        ///< which part of each group `optimized` is
  GroupShare written;     ///< which part of that this rank writes
  OptimizerLayout optimizer_layout;
  std::function<StateDict()> optimizer_state;  ///< null: the optimizer has none
  std::function<void(const StateDict&)> load_optimizer_state;
  /// After the rank's part of the parameters changed: make every rank's
  /// whole parameters agree (the Parallel policy's after_step).
  std::function<void()> share_parameters;
};

struct ShardedState {
  /// What a rank writes of one sharded save, taken at the save point.
  struct Prepared {
    std::filesystem::path staging, target;
    std::string what;
    int rank = 0;
    bool main = false;
    std::vector<io::TensorPiece> pieces;
    io::Checkpoint values;  ///< the index's (the main rank's)
  };
  /// Texts of every rank, by rank: a collective of the ranks' writers.
  using Gather = std::function<std::vector<std::string>(const std::string&)>;

  /// Writes the checkpoint `target` (a folder): a collective, every rank
  /// calls it at the same point; `others` are the parts besides the model
  /// and the optimizer. The index is in place when it returns.
  template <class Parallel>
  static void save(Parallel& parallel, const TrainerStateView& view, const CheckpointParts& others,
                   const io::detail::CheckpointCodec& codec, const std::filesystem::path& target) {
    write_now(parallel, prepare(parallel, view, others, target, /*copy=*/false), codec);
  }
  /// write() with the ranks' entries gathered on `parallel`'s group; every
  /// rank returns once the index is in place.
  template <class Parallel>
  static void write_now(Parallel& parallel, const Prepared& p,
                        const io::detail::CheckpointCodec& codec) {
    write(p, codec, [&](const std::string& mine) { return gather(parallel, mine, p.what); });
    parallel.barrier(p.what + " written");
  }

  /// A save's collective part (every rank at the same point): the staging
  /// folder emptied, the parts taken. With `copy` the pieces are this
  /// rank's own host copies, so write() may run beside the next steps.
  template <class Parallel>
  static Prepared prepare(Parallel& parallel, const TrainerStateView& view,
                          const CheckpointParts& others, const std::filesystem::path& target,
                          bool copy) {
    Prepared p{io::checkpoint_folder::staging_folder(target),
               target,
               "sharded checkpoint " + target.string(),
               parallel.rank(),
               parallel.is_main(),
               {},
               {}};
    if (p.main) {  // a crashed save's; a place that cannot be written fails in write()
      std::error_code ignored;
      std::filesystem::remove_all(p.staging, ignored);
    }
    parallel.barrier(p.what);
    const auto saved = others.save(/*clone=*/copy);  // a collective (the epoch's loss)
    for (const auto& [name, d] : saved.parts) {
      const bool per_rank = name == kRngPart;
      const auto part = per_rank ? rank_part(name, p.rank) : name;
      if (per_rank || p.main) {
        for (const auto& [key, t] : d.tensors) p.pieces.push_back(whole_piece(part + "/" + key, t));
      }
      p.values.parts[part].values = d.values;
    }
    add_model_pieces(view, p.main, p.pieces);
    p.values.parts["model"];
    if (view.optimizer_state) add_optimizer_pieces(view, p.main, p.pieces, p.values);
    if (copy) {
      for (auto& piece : p.pieces) piece.data = piece.data.clone();  // off what the steps change
    }
    return p;
  }

  /// Writes this rank's pieces; once every rank's are there (`gather`
  /// brings their entries, or the error a rank met), the main rank commits
  /// the index. Every rank learns of any rank's failure: nothing is
  /// committed then, and each throws.
  static void write(const Prepared& p, const io::detail::CheckpointCodec& codec,
                    const Gather& gather) {
    std::string mine;
    try {
      mine = std::string(1, kWritten) + codec.write_pieces(p.staging, p.rank, p.pieces);
    } catch (const std::exception& e) {
      mine = std::string(1, kFailed) + e.what();
    }
    auto all = gather(mine);
    for (size_t r = 0; r < all.size(); ++r) {
      if (!all[r].empty() && all[r][0] == kWritten) {
        all[r].erase(0, 1);
        continue;
      }
      const auto why = all[r].empty() ? std::string("no answer") : all[r].substr(1);
      throw Error(int(r) == p.rank ? why
                                   : "trainkit: " + p.what + ": rank " + std::to_string(r) +
                                         " could not write its part: " + why);
    }
    if (p.main) codec.commit(p.staging, p.target, p.values, all);
  }

  /// Restores every part from sharded `ckpt`, or nothing (any rank's error
  /// stops all, before anything changed).
  template <class Parallel>
  static void load(Parallel& parallel, const TrainerStateView& view, const CheckpointParts& others,
                   const io::Checkpoint& ckpt) {
    std::string error;
    Staged staged;
    io::Checkpoint rest;
    try {
      staged = stage(view, ckpt);
      rest = ckpt;
      rest.sharded = nullptr;
      const auto mine = rank_part(kRngPart, parallel.rank());
      const auto first = rank_part(kRngPart, 0);
      if (rest.parts.count(mine)) {
        rest.parts[kRngPart] = rest.parts.at(mine);
      } else if (rest.parts.count(first)) {  // more ranks now: the first rank's
        rest.parts[kRngPart] = rest.parts.at(first);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    const auto failed = parallel.max(error.empty() ? 0 : parallel.rank() + 1,
                                     "agree that the sharded checkpoint was read");
    if (!error.empty()) throw Error(error);
    if (failed > 0)
      throw Error("trainkit: rank " + std::to_string(failed - 1) + " could not read it");
    StateDict optimizer_backup;
    if (view.optimizer_state) {
      optimizer_backup = view.optimizer_state();
      for (auto& [key, t] : optimizer_backup.tensors) t = t.detach().clone();
      view.load_optimizer_state(staged.optimizer);
    }
    try {
      others.load(rest);
    } catch (...) {
      if (view.optimizer_state) view.load_optimizer_state(optimizer_backup);
      throw;
    }
    torch::NoGradGuard no_grad;
    for (size_t g = 0; g < staged.groups.size(); ++g)
      view.optimized.groups()[g].data.copy_(staged.groups[g]);
    for (auto& [target, source] : staged.whole) target.copy_(source);
    view.share_parameters();
  }

  /// Restores the model, and the optimizer's state where it has one, from
  /// `ckpt`, a folder PyTorch's dcp.save wrote ({"model": ..., "optim":
  /// get_state_dict's}); returns the optimizer's step count (0 without one).
  template <class Parallel>
  static int64_t load_pytorch(Parallel& parallel, TrainerStateView view, io::Checkpoint ckpt) {
    const auto& stored = *ckpt.sharded;
    const auto& infos = stored.tensors();
    const bool has_model = std::any_of(
        infos.begin(), infos.end(), [](const auto& i) { return i.first.rfind("model.", 0) == 0; });
    if (!has_model) {
      throw Error(
          "trainkit: PyTorch's checkpoints are read with the model's tensors named "
          "\"model.<name>\" (dcp.save({\"model\": model.state_dict(), \"optim\": ...})); this "
          "one has none" +
          (infos.empty() ? std::string()
                         : " (its first tensor: \"" + infos.begin()->first + "\")"));
    }
    std::set<std::string> kinds = {"step"};  // the optimizer's, per parameter
    for (const auto& [name, g] : view.optimizer_layout.elementwise)
      kinds.insert(state_kind(name, g));
    bool has_optimizer = false;
    const std::string prefix = "optim.state.";
    for (const auto& group : view.slots) {
      for (const auto& slot : group) {
        const auto param = prefix + slot.name + ".";
        for (auto it = infos.lower_bound(param);
             it != infos.end() && it->first.rfind(param, 0) == 0; ++it) {
          const auto kind = it->first.substr(param.size());
          if (kind.find('.') != std::string::npos) continue;  // a longer parameter name's
          if (!kinds.count(kind) || !view.optimizer_state) {
            throw Error("trainkit: the checkpoint's optimizer state \"" + it->first +
                        "\" is one this trainer's optimizer does not keep (PyTorch's optimizer "
                        "was another)");
          }
          has_optimizer = true;
        }
      }
    }
    int64_t steps = 0;
    if (has_optimizer) {
      // this trainer's options (beta1, ...), and PyTorch's step counts
      auto& values = ckpt.parts["optim"].values;
      values = view.optimizer_state().values;
      bool counted = false;
      for (const auto& group : view.slots) {
        for (const auto& slot : group) {
          const auto name = prefix + slot.name + ".step";
          if (!infos.count(name)) continue;
          const auto s = static_cast<int64_t>(stored.read_whole(name).item<double>());
          values[slot.name + ".steps"] = s;
          steps = std::max(steps, s), counted = true;
        }
      }
      if (counted) values["steps"] = steps;
    } else {
      view.optimizer_state = nullptr;  // the model alone: the optimizer starts fresh
    }
    load(parallel, view, CheckpointParts{}, ckpt);
    return steps;
  }

 private:
  static constexpr const char* kRngPart = "rng";
  static constexpr char kWritten = 'w', kFailed = 'f';  ///< before a rank's entries or error
  /// Per-rank parts are stored as "<part>@<rank>".
  static std::string rank_part(const std::string& part, int rank) {
    return part + "@" + std::to_string(rank);
  }
  static io::TensorPiece whole_piece(std::string name, const at::Tensor& t) {
    auto data = t.detach().cpu().contiguous();
    return {std::move(name), data.sizes().vec(),
            io::TensorBox{std::vector<int64_t>(size_t(data.dim()), 0), data.sizes().vec()}, data};
  }
  /// This group's part the rank holds, and the part it writes (absolute).
  static std::pair<int64_t, int64_t> held_range(const TrainerStateView& v, size_t g) {
    return FlatParams::shard_range(v.flat.groups()[g].numel(), v.held.index, v.held.count);
  }
  static std::pair<int64_t, int64_t> written_range(const TrainerStateView& v, size_t g) {
    const auto [begin, end] = held_range(v, g);
    const auto [from, to] = FlatParams::shard_range(end - begin, v.written.index, v.written.count);
    return {begin + from, begin + to};
  }
  /// The model's tensors outside the flat groups (buffers, frozen
  /// parameters), by name: whole on every rank.
  static io::NamedTensors whole_tensors(const TrainerStateView& v) {
    std::set<std::string> flat;
    for (const auto& group : v.slots)
      for (const auto& slot : group) flat.insert(slot.name);
    io::NamedTensors out;
    for (auto& [name, t] : io::module_tensors(v.model))
      if (!flat.count(name)) out.emplace_back(name, t);
    return out;
  }

  static void add_model_pieces(const TrainerStateView& v, bool main,
                               std::vector<io::TensorPiece>& pieces) {
    const auto& slots = v.slots;
    for (size_t g = 0; g < slots.size(); ++g) {
      const auto [begin, end] = written_range(v, g);
      for (const auto& slot : slots[g]) {
        add_pieces(pieces, "model." + slot.name, slot, v.optimized.groups()[g].data.detach(),
                   held_range(v, g).first, begin, end);
      }
    }
    if (!main) return;
    for (const auto& [name, t] : whole_tensors(v))
      pieces.push_back(whole_piece("model." + name, t));
  }

  static void add_optimizer_pieces(const TrainerStateView& v, bool main,
                                   std::vector<io::TensorPiece>& pieces, io::Checkpoint& values) {
    const auto& slots = v.slots;
    const auto local = v.optimizer_state();
    StateDict plain;
    plain.values = local.values;
    values.parts["optim"].values =
        optimizer_state_by_parameter(plain, v.optimizer_layout, slots).values;
    for (const auto& [name, t] : local.tensors) {
      const auto it = v.optimizer_layout.elementwise.find(name);
      if (it == v.optimizer_layout.elementwise.end()) {
        if (main) pieces.push_back(whole_piece("optim/" + name, t));
        continue;
      }
      const size_t g = it->second;
      const auto kind = state_kind(name, g);
      const auto [begin, end] = written_range(v, g);
      for (const auto& slot : slots[g]) {
        add_pieces(pieces, "optim.state." + slot.name + "." + kind, slot, t.detach().reshape({-1}),
                   held_range(v, g).first, begin, end);
      }
    }
  }

  /// Everything this rank will hold, read and checked, nothing changed yet.
  struct Staged {
    std::vector<at::Tensor> groups;                        ///< per optimized group
    std::vector<std::pair<at::Tensor, at::Tensor>> whole;  ///< (model tensor, its value)
    StateDict optimizer;
  };
  static Staged stage(const TrainerStateView& v, const io::Checkpoint& ckpt) {
    const auto& stored = *ckpt.sharded;
    const auto& infos = stored.tensors();
    const auto& slots = v.slots;
    const auto check = [&](const std::string& name, c10::IntArrayRef shape, at::ScalarType dtype) {
      const auto it = infos.find(name);
      if (it == infos.end()) throw Error("trainkit: the checkpoint has no tensor \"" + name + "\"");
      if (it->second.shape != shape.vec() || it->second.dtype != dtype) {
        throw Error("trainkit: checkpoint tensor \"" + name + "\" is " +
                    c10::toString(it->second.dtype) + c10::str(c10::IntArrayRef(it->second.shape)) +
                    ", expected " + c10::toString(dtype) + c10::str(shape));
      }
    };
    Staged out;
    int64_t model_tensors = 0;
    for (size_t g = 0; g < slots.size(); ++g) {
      const auto& data = v.optimized.groups()[g].data;
      const auto [begin, end] = held_range(v, g);
      auto staged = at::empty({end - begin}, data.options().device(at::kCPU));
      for (const auto& slot : slots[g]) {
        check("model." + slot.name, slot.shape, data.scalar_type());
        read_pieces(stored, "model." + slot.name, slot, staged, begin, begin, end);
        ++model_tensors;
      }
      out.groups.push_back(staged);
    }
    for (const auto& [name, t] : whole_tensors(v)) {
      check("model." + name, t.sizes(), t.scalar_type());
      out.whole.push_back({t, stored.read_whole("model." + name)});
      ++model_tensors;
    }
    int64_t stored_model = 0;
    for (const auto& [name, info] : infos) stored_model += name.rfind("model.", 0) == 0;
    if (stored_model != model_tensors) {
      throw Error("trainkit: the checkpoint's model has " + std::to_string(stored_model) +
                  " tensors, this model " + std::to_string(model_tensors));
    }
    if (v.optimizer_state) out.optimizer = stage_optimizer(v, ckpt);
    return out;
  }
  static StateDict stage_optimizer(const TrainerStateView& v, const io::Checkpoint& ckpt) {
    const auto& slots = v.slots;
    const auto part = ckpt.parts.find("optim");
    if (part == ckpt.parts.end()) throw Error("trainkit: the checkpoint has no \"optim\" state");
    const auto& stored = *ckpt.sharded;
    StateDict plain;
    plain.values = part->second.values;
    auto out = optimizer_state_by_group(plain, v.optimizer_layout, slots, v.flat);
    out.tensors = part->second.tensors;  // the optimizer's tensors outside the groups
    for (const auto& [name, g] : v.optimizer_layout.elementwise) {
      const auto kind = state_kind(name, g);
      const auto [begin, end] = held_range(v, g);
      auto staged =
          at::empty({end - begin}, v.optimized.groups()[g].data.options().device(at::kCPU));
      size_t found = 0;
      for (const auto& slot : slots[g]) found += stored.tensors().count(key(slot, kind));
      if (found == 0) continue;  // never made (SGD's momentum before a step)
      for (const auto& slot : slots[g]) {
        if (!stored.tensors().count(key(slot, kind)))
          throw Error("trainkit: the checkpoint has no tensor \"" + key(slot, kind) + "\"");
        read_pieces(stored, key(slot, kind), slot, staged, begin, begin, end);
      }
      out.tensors[name] = staged;
    }
    return out;
  }
  static std::string key(const ParamSlot& slot, const std::string& kind) {
    return "optim.state." + slot.name + "." + kind;
  }

  /// Every rank's `mine` on the main process (all, under DDP's collective).
  template <class Parallel>
  static std::vector<std::string> gather(Parallel& parallel, const std::string& mine,
                                         const std::string& what) {
    if constexpr (requires { parallel.all_gather(mine, what); }) {
      return parallel.all_gather(mine, what);
    } else {
      if (parallel.world_size() != 1) {
        throw Error("trainkit: " + what +
                    ": the Parallel policy has no all_gather(text, what), "
                    "which a sharded checkpoint over several ranks needs");
      }
      return {mine};
    }
  }
};

}  // namespace trainkit::detail
