// A model defined and scripted in Python (examples/scripted_model.py),
// trained here in C++ on the built-in glyphs, and written back for Python:
//   python3 examples/scripted_model.py script model.pt
//   scripted --model model.pt --out trained/
//   python3 examples/scripted_model.py check trained/
// scripts/run.sh example scripted runs all three.
#include <CLI/CLI.hpp>
#include <trainkit/data.hpp>
#include <trainkit/script_module.hpp>
#include <trainkit/trainkit.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "glyphs.hpp"

using namespace trainkit;

int main(int argc, char** argv) {
  CLI::App app{"trainkit: train a model scripted in Python (examples/scripted_model.py)"};
  std::string model_path, out_dir = "scripted_out";
  int64_t epochs = 4, train_size = 6000, batch_size = 64;
  double min_accuracy = 0.6;
  app.add_option("--model", model_path, "the TorchScript archive (torch.jit.save)")->required();
  app.add_option("--out", out_dir, "folder for the trained archive and state dict");
  app.add_option("--epochs", epochs, "training epochs")->check(CLI::PositiveNumber);
  app.add_option("--train-size", train_size, "glyphs to train on")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "samples per step")->check(CLI::PositiveNumber);
  app.add_option("--min-accuracy", min_accuracy, "the validation accuracy to reach");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto train = examples::make_glyphs(train_size, /*seed=*/1);
    const auto val = examples::make_glyphs(1000, /*seed=*/2);
    data::Loader train_batches(train, data::RandomSampler({.size = train.size(), .seed = 42}),
                               {.batch_size = batch_size});
    data::Loader val_batches(val, data::SequentialSampler(val.size()), {.batch_size = 500});

    // The scripted model as a torch::nn::Module: its parameters by Python's
    // names, so groups select them as Python would ("bn" layers at a lower rate).
    ScriptModule model(model_path);
    Trainer<optim::AdamW, sched::OneCycle> trainer(model,
                                                   {.optim = {.lr = 1e-2, .weight_decay = 0.01},
                                                    .sched = {.max_lr = 1e-2},
                                                    .param_groups = {params::no_weight_decay()}});
    const auto result = trainer.fit(task::Classification{}, train_batches,
                                    {.epochs = epochs, .val_data = val_batches});
    const double accuracy = result.metrics.at("val_accuracy");

    std::filesystem::create_directories(out_dir);
    model->save(std::filesystem::path(out_dir) / "trained.pt");  // torch.jit.load opens it
    model->save_state_dict(std::filesystem::path(out_dir) / "trained_state.pt");  // GlyphNet's
    std::printf(
        "scripted: val_accuracy %.3f after %lld steps; wrote %s/trained.pt and "
        "trained_state.pt (%s)\n",
        accuracy, (long long)result.steps, out_dir.c_str(),
        accuracy >= min_accuracy ? "ok" : "below --min-accuracy");
    return accuracy >= min_accuracy ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scripted: %s\n", e.what());
    return 1;
  }
}
