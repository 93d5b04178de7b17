// Uses a schedule (LibTorch-free), a tensor (links LibTorch) and the event
// writer (nlohmann-free IO): the include paths and link line are complete.
#include <torch/types.h>
#include <trainkit/io/tfevents.hpp>
#include <trainkit/sched/cosine.hpp>
#include <trainkit/version.hpp>

#include <cstdio>
#include <filesystem>

int main(int argc, char** argv) {
  trainkit::sched::Cosine cosine({.t_max = 10});
  cosine.start({1.0, 10});
  const auto t = torch::full({2}, cosine.lr_at(5));
  trainkit::io::EventWriter events(argc > 1 ? argv[1] : "consumer_events");
  events.scalar("lr", 5, t.sum().item<double>());
  std::printf("consumer: trainkit %d.%d, lr(5) = %.3f, events in %s\n", TRAINKIT_VERSION_MAJOR,
              TRAINKIT_VERSION_MINOR, t[0].item<double>(), events.path().parent_path().c_str());
  return t[0].item<double>() == 0.5 ? 0 : 1;
}
