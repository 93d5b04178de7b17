#pragma once
// Where this process sits in a multi-process run, read from the variables
// that torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,
// and whether its agent serves the store: TORCHELASTIC_USE_AGENT_STORE) or, failing those, from
// Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the master being the first host of
// SLURM_STEP_NODELIST/SLURM_NODELIST). LOCAL_RANK alone is an independent
// worker's slot (`scripts/launch.sh --independent`): its GPU, not a rank.
// Explicit values win over all.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "trainkit/error.hpp"

namespace trainkit::parallel {

/// Values given in code; each one that is set replaces the environment's.
struct Rendezvous {
  std::optional<int> rank{}, world_size{}, local_rank{}, local_world_size{};
  std::optional<std::string> master_addr{};
  std::optional<int> master_port{};
};

struct Environment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  /// Ranks on this host (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE); 0: not known.
  int local_world_size = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// "torchrun", "slurm", "worker" (LOCAL_RANK alone), "explicit" or "defaults"
  std::string source = "defaults";
  /// torchrun's agent serves the rendezvous store on MASTER_PORT
  /// (TORCHELASTIC_USE_AGENT_STORE=True): every rank joins it as a client.
  bool agent_store = false;
  /// torchrun's restarts of the group so far (TORCHELASTIC_RESTART_COUNT):
  /// each attempt rendezvous under its own prefix of the agent's store.
  int restart_count = 0;

  /// Reads the environment, then applies what `given` sets.
  static Environment detect(const Rendezvous& given = {});
};

}  // namespace trainkit::parallel

namespace trainkit::detail {

inline std::optional<std::string> env_var(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

inline int env_int(const char* name, const std::string& text) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw_option_error(name, text, "an integer");
}

/// The first host of a Slurm node list: "gpu[03-05,09],cpu1" -> "gpu03".
inline std::string first_slurm_host(const std::string& list) {
  const auto stop = list.find_first_of(",[");
  if (stop == std::string::npos || list[stop] == ',') return list.substr(0, stop);
  const auto close = list.find(']', stop);
  require_option(close != std::string::npos, "SLURM_NODELIST", list,
                 "a Slurm host list such as node[01-04],other");
  const auto range = list.substr(stop + 1, close - stop - 1);
  return list.substr(0, stop) + range.substr(0, range.find_first_of(",-"));
}

}  // namespace trainkit::detail

namespace trainkit::parallel {

inline Environment Environment::detect(const Rendezvous& given) {
  using trainkit::detail::env_int;
  const auto env = trainkit::detail::env_var;
  Environment e;
  if (const auto rank = env("RANK")) {
    e.source = "torchrun";
    e.rank = env_int("RANK", *rank);
    e.world_size = env_int("WORLD_SIZE", env("WORLD_SIZE").value_or("1"));
    e.local_rank = env_int("LOCAL_RANK", env("LOCAL_RANK").value_or(std::to_string(e.rank)));
    if (const auto n = env("LOCAL_WORLD_SIZE"))
      e.local_world_size = env_int("LOCAL_WORLD_SIZE", *n);
    e.agent_store = env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
    e.restart_count =
        env_int("TORCHELASTIC_RESTART_COUNT", env("TORCHELASTIC_RESTART_COUNT").value_or("0"));
  } else if (const auto procid = env("SLURM_PROCID")) {
    e.source = "slurm";
    e.rank = env_int("SLURM_PROCID", *procid);
    e.world_size = env_int("SLURM_NTASKS", env("SLURM_NTASKS").value_or("1"));
    e.local_rank = env_int("SLURM_LOCALID", env("SLURM_LOCALID").value_or("0"));
    const auto per_node =
        env("SLURM_NTASKS_PER_NODE").value_or("");  // "4", or "4(x2)" when unequal
    if (!per_node.empty() && per_node.find_first_not_of("0123456789") == std::string::npos)
      e.local_world_size = env_int("SLURM_NTASKS_PER_NODE", per_node);
    if (auto nodes =
            env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_NODELIST"))
      e.master_addr = trainkit::detail::first_slurm_host(*nodes);
  } else if (const auto local_rank = env("LOCAL_RANK")) {
    e.source = "worker";  // one process of its own: rank 0 of 1, on its own device
    e.local_rank = env_int("LOCAL_RANK", *local_rank);
  }
  if (const auto addr = env("MASTER_ADDR")) e.master_addr = *addr;
  if (const auto port = env("MASTER_PORT")) e.master_port = env_int("MASTER_PORT", *port);
  auto take = [&](auto& field, const auto& value) {
    if (!value) return;
    field = *value;
    e.source = "explicit";
  };
  take(e.rank, given.rank);
  take(e.world_size, given.world_size);
  take(e.local_rank, given.local_rank);
  take(e.master_addr, given.master_addr);
  take(e.master_port, given.master_port);
  if (given.local_world_size) e.local_world_size = *given.local_world_size;
  // the agent serves on torchrun's own address and port only
  if (given.master_addr || given.master_port) {
    e.agent_store = e.agent_store && env("MASTER_ADDR") == e.master_addr &&
                    env("MASTER_PORT") == std::to_string(e.master_port);
  }
  using trainkit::detail::require_option;
  require_option(e.world_size >= 1, "world_size", e.world_size, "a number >= 1 (WORLD_SIZE)");
  require_option(e.rank >= 0 && e.rank < e.world_size, "rank", e.rank,
                 "0 <= rank < world_size = " + std::to_string(e.world_size) + " (RANK)");
  require_option(e.local_rank >= 0, "local_rank", e.local_rank, "a number >= 0 (LOCAL_RANK)");
  require_option(e.local_world_size >= 0, "local_world_size", e.local_world_size,
                 "a number >= 1 (LOCAL_WORLD_SIZE), or 0 when not known");
  require_option(e.master_port > 0 && e.master_port < 65536, "master_port", e.master_port,
                 "a TCP port 1..65535 (MASTER_PORT)");
  return e;
}

}  // namespace trainkit::parallel
