#pragma once
// After a collective failed, which ranks are still there? A timed-out
// collective names no peer (Gloo says "Operation timed out!"), so each rank
// that fails answers a roll call in the rendezvous store and waits a few
// seconds for the others' answers: the ranks that never answer are the dead,
// hung or cut-off ones. The store may be gone too (its host died, or the
// link to it): that is said instead. Best effort and bounded: the calls run
// on a thread of their own, and a store that does not answer in time ends
// the wait, never the process.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace trainkit::detail {

/// "ranks 2, 3 of the group did not answer a roll call (by 5.0 s after the
/// collective began)", or what else the store said; the answers are waited
/// for until `until`. Once per group (a failed group stays failed: its
/// later collectives fail at once and say the same).
inline std::string roll_call(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                             std::chrono::steady_clock::time_point until, const std::string& by) {
  if (!store || world <= 1) return "";
  const std::string prefix = "trainkit/roll_call/";
  auto answer = std::make_shared<std::promise<std::string>>();
  auto result = answer->get_future();
  std::thread([store, rank, world, until, by, prefix, answer] {
    try {
      store->set(prefix + std::to_string(rank), std::vector<uint8_t>{1});
      std::vector<int> missing;
      do {
        missing.clear();
        for (int r = 0; r < world; ++r) {
          if (r != rank && !store->check({prefix + std::to_string(r)})) missing.push_back(r);
        }
        if (missing.empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      } while (std::chrono::steady_clock::now() < until);
      if (missing.empty()) {
        answer->set_value("every rank of the group answered a roll call");
        return;
      }
      std::string ranks;
      for (const int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      answer->set_value((missing.size() == 1 ? "rank " : "ranks ") + ranks +
                        " of the group did not answer a roll call (" + by + ")");
    } catch (const std::exception& e) {
      std::string why = e.what();
      why.resize(std::min(why.find('\n'), why.size()));
      answer->set_value("the rendezvous store did not answer a roll call (" + why + ")");
    }
  }).detach();  // holds its own references; a store that hangs keeps only this thread
  if (result.wait_until(until + std::chrono::seconds(2)) != std::future_status::ready)
    return "the rendezvous store did not answer a roll call in time";
  return result.get();
}

}  // namespace trainkit::detail
