#pragma once
// SIGINT/SIGTERM during fit: the first one is only noted (the trainer
// finishes the current optimizer step, writes a checkpoint and returns); a
// second one restores the default action and re-raises, so the process ends
// at once. The previous handlers come back when the scope ends.
#include <csignal>

#include <atomic>

namespace trainkit::detail {

class SignalCatcher {
 public:
  SignalCatcher() {
    caught_flag().store(0);
    struct sigaction action {};
    action.sa_handler = &SignalCatcher::handle;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalCatcher() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

  /// The first signal received in this scope, or 0.
  static int caught() { return caught_flag().load(); }

 private:
  static std::atomic<int>& caught_flag() {
    static std::atomic<int> flag{0};
    return flag;
  }
  static void handle(int sig) {
    int expected = 0;
    if (!caught_flag().compare_exchange_strong(expected, sig)) {
      std::signal(sig, SIG_DFL);  // second signal: no more waiting
      std::raise(sig);
    }
  }

  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace trainkit::detail
