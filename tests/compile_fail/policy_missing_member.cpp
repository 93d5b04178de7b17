// Must not compile: a scheduler policy without lr_at.
#include <trainkit/trainkit.hpp>

struct NoLrAt {
  struct Options {};
  explicit NoLrAt(const Options&) {}
  void start(const trainkit::sched::ScheduleContext&) {}
};

trainkit::Trainer<trainkit::optim::SGD, NoLrAt>* instantiate = nullptr;
template class trainkit::Trainer<trainkit::optim::SGD, NoLrAt>;
