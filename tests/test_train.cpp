// End to end: training, determinism, interrupt + resume, checkpoints, bad input,
// and the command line's exit codes and messages.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>
#include <sys/wait.h>

#include "growformer/checkpoint.hpp"
#include "growformer/data/listops.hpp"
#include "growformer/trainer.hpp"
#include "testing.hpp"

using namespace gf;
namespace fs = std::filesystem;
using json = nlohmann::json;

using gf_test::metrics_without_timing;

namespace {

const char* kTiny = R"(name: tiny
seed: 7
threads: 2
data:
  plugin: listops
  train_size: 256
  val_size: 64
  test_size: 64
  min_length: 4
  max_length: 24
  max_depth: 3
  max_args: 4
model:
  d_model: 16
  layers: 1
  max_len: 32
  dropout: 0.1
  attention:
    plugin: mha
    heads: 2
optimizer: {plugin: adamw, lr: 0.003}
train:
  steps: 40
  batch_size: 16
  warmup: 5
  eval_every: 10
  log_every: 5
  check_every: 10
)";

std::string tmpdir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("gf_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  return p.string();
}

int train(const std::string& dir, const std::vector<std::string>& sets = {}, long stop_after = -1) {
  ConfigNode cfg = ConfigNode::load_string(kTiny, "tiny.yaml");
  for (auto& s : sets) cfg.apply_override(s);
  Experiment ex(cfg, {GF_PLUGIN_DIR});
  RunFlags f;
  f.run_dir = dir;
  f.quiet = true;
  f.stop_after = stop_after;
  return ex.train(f);
}

struct Cli {
  int status;
  std::string output;
};
Cli run_cli(const std::string& args) {
  std::string out = tmpdir("cli_out") + ".txt";
  std::string cmd = std::string(GF_BIN) + " " + args + " > " + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  fs::remove(out);
  return {WEXITSTATUS(rc), ss.str()};
}
bool has(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

}  // namespace

TEST_CASE("a run writes the run directory and two runs with one seed agree exactly") {
  std::string a = tmpdir("det_a"), b = tmpdir("det_b");
  REQUIRE(train(a) == 0);
  REQUIRE(train(b) == 0);
  for (auto f : {"config.resolved.yaml", "plugins.lock", "metrics.jsonl", "events.jsonl",
                 "checkpoints/last.safetensors", "checkpoints/best.safetensors"})
    CHECK(fs::exists(fs::path(a) / f));
  auto ma = metrics_without_timing(a), mb = metrics_without_timing(b);
  REQUIRE(ma.size() == mb.size());
  CHECK(ma.size() == 8 + 4 + 1);  // train lines every 5 steps, val every 10, final test
  for (size_t i = 0; i < ma.size(); ++i) CHECK(ma[i] == mb[i]);
  json first = ma.front();
  for (auto k : {"step", "split", "loss", "accuracy", "heads", "lr"}) CHECK(first.contains(k));
  CHECK(ma.back()["split"] == "test");
  // a different seed gives a different run
  std::string c = tmpdir("det_c");
  REQUIRE(train(c, {"seed=8"}) == 0);
  CHECK(metrics_without_timing(c) != ma);
  for (auto& d : {a, b, c}) fs::remove_all(d);
}

TEST_CASE("an interrupted and resumed run ends with the same metrics as an uninterrupted one") {
  std::string full = tmpdir("full"), cut = tmpdir("cut");
  REQUIRE(train(full) == 0);
  REQUIRE(train(cut, {}, 17) == 0);  // stops after step 17 with a checkpoint (mid log window)
  CHECK(metrics_without_timing(cut).size() < metrics_without_timing(full).size());
  auto ex = experiment_from_checkpoint(cut + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
  RunFlags f;
  f.quiet = true;
  REQUIRE(ex->resume(cut, f) == 0);
  auto a = metrics_without_timing(full), b = metrics_without_timing(cut);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
  fs::remove_all(full);
  fs::remove_all(cut);
}

TEST_CASE(
    "train.stop_patience ends the run at the validation P after the best, with its test; "
    "a resume before or after the stop gives the same run") {
  // the full run's validations say where a patience of 2 must stop
  std::string full = tmpdir("es_full");
  REQUIRE(train(full, {"train.steps=200"}) == 0);
  long best_step = -1, expect = -1;
  double best = -1;
  for (const json& m : metrics_without_timing(full)) {
    if (m["split"] != "val") continue;
    long s = m["step"].get<long>();
    if (m["accuracy"].get<double>() > best) {
      best = m["accuracy"].get<double>();
      best_step = s;
    } else if (s - best_step >= 2 * 10 && s < 200) {
      expect = s;
      break;
    }
  }
  REQUIRE(expect > 0);  // the tiny task stops improving well before step 200
  std::string es = tmpdir("es");
  REQUIRE(train(es, {"train.steps=200", "train.stop_patience=2"}) == 0);
  auto m = metrics_without_timing(es);
  CHECK(m.back()["split"] == "test");
  CHECK(m.back()["step"] == expect);
  long last_val = -1;
  for (auto& x : m)
    if (x["split"] == "val") last_val = x["step"].get<long>();
  CHECK(last_val == expect);
  // up to the stop the run is the full run's
  auto f = metrics_without_timing(full);
  for (size_t i = 0; i + 1 < m.size(); ++i) CHECK(m[i] == f[i]);
  std::ifstream ev(es + "/events.jsonl");
  std::string line;
  int stops = 0;
  while (std::getline(ev, line)) {
    json e = json::parse(line);
    if (e["type"] != "early_stop") continue;
    ++stops;
    CHECK(e["step"] == expect);
    CHECK(e["best_step"] == best_step);
  }
  CHECK(stops == 1);
  // resumed from before the stop: the same lines; resumed after it: straight to the same test
  std::string cut = tmpdir("es_cut");
  REQUIRE(train(cut, {"train.steps=200", "train.stop_patience=2"}, expect - 7) == 0);
  for (const std::string& d : {cut, es}) {
    auto ex = experiment_from_checkpoint(d + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
    RunFlags rf;
    rf.quiet = true;
    REQUIRE(ex->resume(d, rf) == 0);
    CHECK(metrics_without_timing(d) == m);
  }
  // a patience needs validations to count
  CHECK_THROWS_WITH_AS(train(tmpdir("es_bad"), {"train.stop_patience=2", "train.eval_every=0"}),
                       doctest::Contains("train.stop_patience"), ConfigError);
  for (auto& d : {full, es, cut}) fs::remove_all(d);
}

TEST_CASE(
    "policies see the training window, the latest validation and a validation probe; "
    "a resumed run sees the same") {
  // criterion: gain asks for a probe at every check (probe_every 1); with log_every equal to
  // check_every the window a check sees is the one the train line reports
  const std::vector<std::string> sets = {
      "growth={plugin: incrt_geometric, criterion: gain, probe_every: 1, round_probe_every: 1, "
      "stopped_probe_every: 1, probe_examples: 16, settle_probes: 1, calibration: fixed, "
      "calibration_checks: 1}",
      "train.check_every=5", "model.attention.max_heads=8"};
  std::string full = tmpdir("probe_full"), cut = tmpdir("probe_cut");
  REQUIRE(train(full, sets) == 0);
  REQUIRE(train(cut, sets, 17) == 0);
  auto ex = experiment_from_checkpoint(cut + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
  RunFlags f;
  f.quiet = true;
  REQUIRE(ex->resume(cut, f) == 0);
  auto lines = [](const std::string& dir) {
    std::vector<json> out;
    std::ifstream in(dir + "/events.jsonl");
    for (std::string l; std::getline(in, l);) out.push_back(json::parse(l));
    return out;
  };
  const auto a = lines(full), b = lines(cut);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
  // a probe at every check (steps 5, 10, ..., 40), each of 16 validation examples (one
  // batch of 16), with a finite loss and the train window of the log line of the same step
  std::map<long, json> train_lines;
  for (const json& m : metrics_without_timing(full))
    if (m["split"] == "train") train_lines[m["step"].get<long>()] = m;
  size_t probes = 0;
  for (const json& e : a) {
    if (e["type"] != "probe") continue;
    ++probes;
    CHECK(e["examples"].get<double>() == 16.0);
    CHECK(std::isfinite(e["probe_loss"].get<double>()));
    const long step = std::lround(e["step"].get<double>());
    REQUIRE(train_lines.count(step));
    CHECK(e["train_loss"].get<double>() ==
          doctest::Approx(train_lines[step]["loss"].get<double>()));
    CHECK(e["train_steps"].get<double>() == 5.0);
  }
  CHECK(probes == 8);
  fs::remove_all(full);
  fs::remove_all(cut);
}

TEST_CASE(
    "training-time muting: a paired round's heads sit out every 2nd step while it waits; the "
    "run is the same as without up to the round, differs after, and resumes exactly") {
  auto lines = [](const std::string& dir) {
    std::vector<json> out;
    std::ifstream in(dir + "/events.jsonl");
    for (std::string l; std::getline(in, l);) out.push_back(json::parse(l));
    return out;
  };
  // a round as soon as the probe is watched twice (settle_tolerance 1, min_gain 0), and a window
  // longer than the run (grow_until 1), so the round waits to the end
  auto sets = [](int every) {
    return std::vector<std::string>{
        "model.attention.heads=1", "model.attention.d_k=4", "train.check_every=5",
        "model.dropout=0",
        "growth={plugin: incrt_geometric, criterion: gain, round_test: paired, calibration: fixed, "
        "calibration_checks: 1, probe_every: 1, round_probe_every: 1, settle_probes: 1, "
        "settle_tolerance: 1, min_gain: 0, "
        "min_share: 1, grow_until: 1, probe_examples: 32, round_mute_every: " +
            std::to_string(every) + "}"};
  };
  const std::string on = tmpdir("mute_on"), off = tmpdir("mute_off"), cut = tmpdir("mute_cut");
  REQUIRE(train(on, sets(2)) == 0);
  REQUIRE(train(off, sets(0)) == 0);
  double grown_at = -1;
  for (const json& e : lines(on))
    if (e["type"] == "grow" && grown_at < 0) grown_at = e["step"].get<double>();
  REQUIRE(grown_at > 0);
  REQUIRE(grown_at < 35);
  const auto a = metrics_without_timing(on), b = metrics_without_timing(off);
  REQUIRE(a.size() == b.size());
  bool differ_after = false;
  for (size_t i = 0; i < a.size(); ++i) {
    const double step = a[i]["step"].get<double>();
    if (step <= grown_at) CHECK(a[i] == b[i]);
    if (step > grown_at + 1 && a[i] != b[i]) differ_after = true;
  }
  CHECK(differ_after);
  // stopped mid-round (a muted step next) and resumed: the same log
  REQUIRE(train(cut, sets(2), long(grown_at) + 3) == 0);
  auto ex = experiment_from_checkpoint(cut + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
  RunFlags f;
  f.quiet = true;
  REQUIRE(ex->resume(cut, f) == 0);
  CHECK(metrics_without_timing(cut) == a);
  fs::remove_all(on);
  fs::remove_all(off);
  fs::remove_all(cut);
}

TEST_CASE(
    "pruning: ablation measures each head's removal on the validation probe, prunes the "
    "cheapest, and a resumed run does the same") {
  auto lines = [](const std::string& dir) {
    std::vector<json> out;
    std::ifstream in(dir + "/events.jsonl");
    for (std::string l; std::getline(in, l);) out.push_back(json::parse(l));
    return out;
  };
  auto ablation_checks = [](const std::vector<json>& ev) {
    std::vector<json> out;
    for (const json& e : ev)
      if (e["type"] == "check" && e.value("policy", "") == "ablation") out.push_back(e);
    return out;
  };
  // never prunes (max_cost under any cost): the costs of the last check against the final
  // model evaluated here with each head's output map at zero
  {
    std::string dir = tmpdir("abl_keep");
    REQUIRE(train(dir, {"model.attention.heads=3", "model.attention.d_k=4", "train.check_every=5",
                        "pruning={plugin: ablation, probe_every: 1, probe_examples: 16, grace: 0, "
                        "max_cost: -1000}"}) == 0);
    const auto checks = ablation_checks(lines(dir));
    REQUIRE(checks.size() == 8);  // steps 5, 10, ..., 40
    const json& last = checks.back();
    CHECK(last["step"].get<double>() == 40.0);
    auto ex = experiment_from_checkpoint(dir + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
    ex->load_weights(dir + "/checkpoints/last.safetensors");
    const auto& val = ex->data().val;
    const EvalResult base_r = ex->evaluate(val, 1, true);
    const double base = base_r.loss;
    CHECK(last["probe_loss"].get<double>() == doctest::Approx(base).epsilon(1e-6));
    // the per-example losses average to the probe loss (computed another way: the batch's
    // cross-entropy op)
    REQUIRE(base_r.example_losses.size() == base_r.examples);
    double mean_loss = 0;
    for (double l : base_r.example_losses) mean_loss += l / double(base_r.examples);
    CHECK(mean_loss == doctest::Approx(base).epsilon(1e-5));
    AttentionBlock* blk = ex->model().blocks()[0];
    const auto heads = blk->heads();
    REQUIRE(heads.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(last["head_ids"][i].get<double>() == double(heads[i].id));
      Tensor& w = const_cast<Var*>(heads[i].w_o)->value();
      const Tensor saved = w.clone();
      w.zero();
      const EvalResult muted = ex->evaluate(val, 1, true);
      const double without = muted.loss;
      w = saved;
      const double cost = (without - base) / std::max(base, 0.05);
      CHECK(last["cost"][i].get<double>() == doctest::Approx(cost).epsilon(1e-5).scale(1e-6));
      // the paired spread: the sample sd of muted - unmuted over the probe's examples
      REQUIRE(muted.example_losses.size() == base_r.example_losses.size());
      const size_t n = muted.example_losses.size();
      double mean = 0, ss = 0;
      for (size_t k = 0; k < n; ++k)
        mean += (muted.example_losses[k] - base_r.example_losses[k]) / double(n);
      for (size_t k = 0; k < n; ++k) {
        const double dev = muted.example_losses[k] - base_r.example_losses[k] - mean;
        ss += dev * dev;
      }
      const double sd = std::sqrt(ss / double(n - 1)) / std::max(base, 0.05);
      CHECK(sd > 0);
      CHECK(last["cost_sd"][i].get<double>() == doctest::Approx(sd).epsilon(1e-4).scale(1e-7));
    }
    for (const json& e : lines(dir)) CHECK(e["type"] != "prune");
    fs::remove_all(dir);
  }
  // prunes every head it can (max_cost over any cost), the cheapest first, after 2 probes
  // under it, one per check, down to min_heads 1; a run stopped at step 7 and resumed writes
  // the same events
  const std::vector<std::string> sets = {
      "model.attention.heads=3", "model.attention.d_k=4", "train.check_every=5",
      "pruning={plugin: ablation, probe_every: 1, probe_examples: 16, grace: 0, patience: 2, "
      "max_cost: 1000}"};
  std::string full = tmpdir("abl_full"), cut = tmpdir("abl_cut");
  REQUIRE(train(full, sets) == 0);
  REQUIRE(train(cut, sets, 7) == 0);
  auto ex = experiment_from_checkpoint(cut + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
  RunFlags f;
  f.quiet = true;
  REQUIRE(ex->resume(cut, f) == 0);
  const auto a = lines(full), b = lines(cut);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
  std::vector<json> prunes;
  const auto checks = ablation_checks(a);
  for (const json& e : a)
    if (e["type"] == "prune") prunes.push_back(e);
  REQUIRE(prunes.size() == 2);
  CHECK(prunes[0]["step"].get<double>() == 10.0);
  CHECK(prunes[1]["step"].get<double>() == 15.0);
  CHECK(prunes[1]["heads"][0].get<double>() == 1.0);
  CHECK(prunes[0]["reason"] == "removal_costs_under_max_cost");
  for (const json& p : prunes) {
    // the pruned head is the cheapest of its check
    const json* c = nullptr;
    for (const json& k : checks)
      if (k["step"] == p["step"]) c = &k;
    REQUIRE(c);
    double lowest = 1e300;
    for (const json& v : (*c)["cost"]) lowest = std::min(lowest, v.get<double>());
    CHECK(p["score"].get<double>() == lowest);
  }
  // with one head left nothing is ablated
  CHECK(checks.back()["step"].get<double>() == 15.0);
  fs::remove_all(full);
  fs::remove_all(cut);
  // heads in their grace are not judged: the same run with a grace longer than the run prunes
  // nothing, although every head's removal would be under max_cost
  std::string graced = tmpdir("abl_grace");
  REQUIRE(
      train(graced, {"model.attention.heads=3", "model.attention.d_k=4", "train.check_every=5",
                     "pruning={plugin: ablation, probe_every: 1, probe_examples: 16, grace: 1000, "
                     "patience: 1, max_cost: 1000}"}) == 0);
  for (const json& e : lines(graced)) CHECK(e["type"] != "prune");
  CHECK(ablation_checks(lines(graced)).empty());
  fs::remove_all(graced);
}

TEST_CASE("checkpoints: round trip, and corrupt or truncated files are refused") {
  std::string dir = tmpdir("ck");
  REQUIRE(train(dir) == 0);
  std::string ck = dir + "/checkpoints/last.safetensors";
  Checkpoint c = load_checkpoint(ck);
  CHECK(c.tensors.count("model.layers.0.attn.heads.0.w_q"));
  CHECK(c.metadata.count("architecture"));
  // eval of the loaded model equals eval in a fresh experiment restored from the file
  auto e1 = experiment_from_checkpoint(ck, {GF_PLUGIN_DIR});
  e1->load_weights(ck);
  auto r1 = e1->evaluate(e1->data().test);
  auto e2 = experiment_from_checkpoint(ck, {GF_PLUGIN_DIR});
  e2->load_weights(ck);
  auto r2 = e2->evaluate(e2->data().test);
  CHECK(r1.loss == r2.loss);
  // truncate
  std::string bad = dir + "/bad.safetensors";
  fs::copy_file(ck, bad);
  fs::resize_file(bad, fs::file_size(bad) / 2);
  CHECK_THROWS_WITH_AS(load_checkpoint(bad), doctest::Contains("bad.safetensors"), RuntimeError);
  // garbage header
  std::ofstream(bad, std::ios::trunc) << "\x10\0\0\0\0\0\0\0{not json!!!!!!}";
  CHECK_THROWS_WITH_AS(load_checkpoint(bad), doctest::Contains("corrupt"), RuntimeError);
  CHECK_THROWS_WITH_AS(load_checkpoint(dir + "/missing.safetensors"),
                       doctest::Contains("no such checkpoint"), RuntimeError);
  fs::remove_all(dir);
}

TEST_CASE("a NaN loss stops with a clear error and keeps the last good checkpoint") {
  std::string dir = tmpdir("nan");
  ConfigNode cfg = ConfigNode::load_string(kTiny, "tiny.yaml");
  Experiment ex(cfg, {GF_PLUGIN_DIR});
  // a poisoned positional row: the first forward pass produces NaN
  for (auto& [n, p] : ex.model().named_parameters())
    if (n == "pos") const_cast<Var&>(p).value()[0] = NAN;
  RunFlags f;
  f.run_dir = dir;
  f.quiet = true;
  std::string err;
  try {
    ex.train(f);
  } catch (const RuntimeError& e) {
    err = e.what();
  }
  CHECK(has(err, "non-finite loss"));
  CHECK(has(err, "at step 1 "));
  CHECK(has(err, "optimizer.lr"));
  CHECK(fs::exists(dir + "/metrics.jsonl"));
  std::ifstream ev(dir + "/events.jsonl");
  std::string line;
  std::getline(ev, line);
  CHECK(has(line, "nan_loss"));
  fs::remove_all(dir);
}

TEST_CASE("cli: exit codes and messages") {
  CHECK(run_cli("--help").status == 0);
  CHECK(run_cli("train --help").status == 0);
  Cli bogus = run_cli("trian x.yaml");
  CHECK(bogus.status == 2);
  CHECK(has(bogus.output, "did you mean `train`?"));
  CHECK(run_cli("train").status == 2);
  // a misspelt key in the quickstart config fails in config check and train with file:line
  std::string qs = std::string(GF_SOURCE_DIR) + "/configs/quickstart.yaml";
  std::ifstream in(qs);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  for (auto [from, to, hint] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"  d_model:", "  d_modle:", "d_model"},
           {"  batch_size:", "  bacth_size:", "batch_size"},
           {"  train_size:", "  trian_size:", "train_size"},
           {"    heads:", "    haeds:", "heads"},
           {"  weight_decay:", "  weight_dacay:", "weight_decay"}}) {
    std::string t = text;
    size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    size_t line = std::count(t.begin(), t.begin() + at, '\n') + 1;
    std::string path = tmpdir("typo") + ".yaml";
    std::ofstream(path) << t;
    for (std::string cmd :
         {"config check " + path, "train " + path + " --run-dir " + tmpdir("typo_run")}) {
      Cli c = run_cli(cmd);
      INFO(cmd << from << "\n" << c.output);
      CHECK(c.status == 2);
      CHECK(has(c.output, path + ":" + std::to_string(line) + ":"));
      CHECK(has(c.output, "did you mean `" + hint + "`?"));
      CHECK(!fs::exists(tmpdir("typo_run")));
    }
    fs::remove(path);
  }
  CHECK(run_cli("train /nonexistent.yaml").status == 2);
  CHECK(run_cli("eval /nonexistent.safetensors").status == 1);
  Cli list = run_cli("plugins list");
  CHECK(list.status == 0);
  CHECK(has(list.output, "mha"));
  Cli desc = run_cli("plugins describe adamw");
  CHECK(has(desc.output, "weight_decay"));
  CHECK(run_cli("plugins describe adamx").status == 2);
}

TEST_CASE("cli: data listops-check agrees with a correct file and flags a corrupted one") {
  std::string good = tmpdir("lo_good") + ".tsv", bad = tmpdir("lo_bad") + ".tsv";
  Rng rng(3, "t");
  listops::GeneratorConfig gc;
  gc.count = 200;
  gc.min_length = 4;
  gc.max_length = 60;
  auto trees = listops::generate(gc, rng);
  std::vector<listops::Row> rows;
  for (auto& t : trees) rows.push_back({listops::serialize(t.tokens), t.label, 0});
  listops::write_tsv(good, rows);
  Cli ok = run_cli("data listops-check " + good);
  CHECK(ok.status == 0);
  CHECK(has(ok.output, "200 rows, 0 mismatches"));
  rows[5].label = (rows[5].label + 1) % 10;
  rows[77].label = (rows[77].label + 3) % 10;
  listops::write_tsv(bad, rows);
  Cli no = run_cli("data listops-check " + bad);
  CHECK(no.status == 1);
  CHECK(has(no.output, "2 mismatches"));
  CHECK(has(no.output, bad + ":7:"));  // header + 6th row
  fs::remove(good);
  fs::remove(bad);
}

TEST_CASE("cli: resume, eval and inspect on a run") {
  std::string dir = tmpdir("cli_run"), cfg = tmpdir("cli_cfg") + ".yaml";
  std::ofstream(cfg) << kTiny;
  Cli t = run_cli("train " + cfg + " --run-dir " + dir + " --stop-after 20 --quiet");
  REQUIRE(t.status == 0);
  Cli r = run_cli("resume " + dir + " --quiet");
  CHECK(r.status == 0);
  Cli e = run_cli("eval " + dir + "/checkpoints/last.safetensors --json");
  CHECK(e.status == 0);
  json j = json::parse(e.output.substr(e.output.find('{')));
  CHECK(j["examples"] == 64);
  Cli i = run_cli("inspect " + dir + "/checkpoints/last.safetensors");
  CHECK(i.status == 0);
  CHECK(has(i.output, "layers.0.attn.heads.1"));
  // the run directory refuses to be overwritten
  CHECK(run_cli("train " + cfg + " --run-dir " + dir).status == 2);
  fs::remove_all(dir);
  fs::remove(cfg);
}

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
std::string id_list(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}
}  // namespace

TEST_CASE(
    "cli: the structure record of config.resolved.yaml follows the last checkpoint back to the "
    "starting heads when a grown head is removed again") {
  // one head; a second grown at step 10 (checkpoint 10 holds [0, 1]) and pruned at step 20 as
  // the weakest output map (checkpoint 20 holds [0], the heads the configuration builds)
  const std::string cfg = std::string(GF_SOURCE_DIR) + "/configs/quickstart.yaml";
  std::string sets;
  for (const char* s :
       {"threads=1", "data.train_size=300", "model.layers=1", "model.attention.heads=1",
        "train.steps=20", "train.check_every=10", "train.checkpoint_every=10",
        "growth={plugin: fixed_schedule, every: 10, start: 10, max_heads: 2}",
        "pruning={plugin: magnitude, threshold: 0.5, relative: true, grace: 5}"})
    sets += std::string(" --set \"") + s + "\"";
  const std::string dir = tmpdir("record_back");
  REQUIRE(run_cli("train " + cfg + " --run-dir " + dir + sets + " -q --stop-after 10").status ==
          0);  // stopped on request, with a checkpoint
  const std::string grown = slurp(dir + "/config.resolved.yaml");
  CHECK(has(grown, "\n#   final_heads: [2]  "));
  CHECK(has(grown, "\n#     layers.0.attn: [0, 1]\n"));
  REQUIRE(run_cli("resume " + dir + " -q").status == 0);
  const CheckpointModel m =
      read_checkpoint_model(load_checkpoint(dir + "/checkpoints/last.safetensors"), "last");
  REQUIRE(m.heads_per_block == std::vector<size_t>{1});
  const std::string back = slurp(dir + "/config.resolved.yaml");
  INFO(back);
  CHECK(back.find("# structure:") == std::string::npos);       // no record of heads since removed
  CHECK(back == grown.substr(0, grown.find("# structure:")));  // the configuration as it began
  fs::remove_all(dir);
}

TEST_CASE(
    "cli: a grown run's config.resolved.yaml names its final heads; the file still trains as "
    "its configuration, the run resumes exactly and eval reads it") {
  // INCRT on a small ListOps from the shipped config: the energy criterion grows at step 70
  const std::string cfg = std::string(GF_SOURCE_DIR) + "/configs/incrt_listops.yaml";
  std::string sets;
  for (const char* s :
       {"threads=1", "data.train_size=400", "data.val_size=100", "data.test_size=100",
        "data.min_length=8", "data.max_length=32", "model.max_len=32", "train.steps=100",
        "train.eval_every=20", "train.warmup=5", "train.batch_size=16", "growth.criterion=energy"})
    sets += std::string(" --set ") + s;
  const std::string full = tmpdir("grown_full"), cut = tmpdir("grown_cut");
  REQUIRE(run_cli("train " + cfg + " --run-dir " + full + sets + " -q").status == 0);
  // the heads of the last checkpoint, as its structure records them
  const CheckpointModel m =
      read_checkpoint_model(load_checkpoint(full + "/checkpoints/last.safetensors"), "last");
  REQUIRE(m.heads_per_block.size() == 1);
  REQUIRE(m.heads_per_block[0] > 1);  // the run grew (it starts from one head)
  const std::vector<int> ids = BlockStructure::parse(m.architecture[0], "last", 64).ids();
  const std::string text = slurp(full + "/config.resolved.yaml");
  INFO(text);
  const size_t at = text.find("\n# structure:");
  REQUIRE(at != std::string::npos);
  const std::string record = text.substr(at + 1);
  CHECK(has(record, "\n#   step: 100  "));
  CHECK(has(record, "\n#   final_heads: [" + std::to_string(ids.size()) + "]  "));
  CHECK(has(record, "\n#     layers.0.attn: " + id_list(ids) + "\n"));
  // the record is YAML without its comment marks
  std::string uncommented;
  std::istringstream lines(record);
  for (std::string line; std::getline(lines, line);) uncommented += line.substr(2) + "\n";
  ConfigNode st = ConfigNode::load_string(uncommented, "record").child("structure");
  CHECK(st.child("step").as_int() == 100);
  CHECK(st.child("head_ids").child("layers.0.attn").items().size() == ids.size());
  // above it the configuration as it started: one head, read as before
  CHECK(ConfigNode::load_string(text, "resolved")
            .child("model")
            .child("attention")
            .child("heads")
            .as_int() == 1);
  CHECK(run_cli("config check " + full + "/config.resolved.yaml").status == 0);
  // stopped after the growth and resumed: the record of step 80, then the same run and files
  REQUIRE(run_cli("train " + cfg + " --run-dir " + cut + sets + " --stop-after 80 -q").status == 0);
  CHECK(has(slurp(cut + "/config.resolved.yaml"), "\n#   step: 80  "));
  REQUIRE(run_cli("resume " + cut + " -q").status == 0);
  CHECK(metrics_without_timing(cut) == metrics_without_timing(full));
  CHECK(slurp(cut + "/config.resolved.yaml") == text);
  CHECK(slurp(cut + "/checkpoints/last.safetensors") ==
        slurp(full + "/checkpoints/last.safetensors"));
  // eval of the run directory
  Cli e = run_cli("eval " + full + " --json");
  REQUIRE(e.status == 0);
  CHECK(json::parse(e.output.substr(e.output.find('{')))["examples"] == 100);
  // a run whose heads never changed keeps its file as the configuration alone
  const std::string fixed = tmpdir("fixed_run");
  REQUIRE(train(fixed, {"train.steps=10"}) == 0);
  CHECK(!has(slurp(fixed + "/config.resolved.yaml"), "# structure:"));
  for (const std::string& d : {full, cut, fixed}) fs::remove_all(d);
}

TEST_CASE("cli: BLAS kernel selection re-executes with the matching kernels, and falls back") {
  std::ifstream cpu("/proc/cpuinfo");
  std::string all((std::istreambuf_iterator<char>(cpu)), std::istreambuf_iterator<char>());
  bool avx512 = has(all, " avx512f") && has(all, " avx512bw") && has(all, " avx512vl");
  bool avx2 = has(all, " avx2") && has(all, " fma");
  std::string env =
      "env -u OPENBLAS_CORETYPE -u GROWFORMER_BLAS_STAGE GROWFORMER_BLAS_ASSUME_GENERIC=1 ";
  std::string cmd = env + GF_BIN + " --version > /tmp/gf_blas.txt 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in("/tmp/gf_blas.txt");
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(out);
  if (avx512)
    CHECK(has(out, "SkylakeX (selected automatically; GEMM self-test"));
  else if (avx2)
    CHECK(has(out, "Haswell (selected automatically"));
  else
    CHECK(has(out, "OpenBLAS default"));
  if (avx512 || avx2) {
    cmd = env + "GROWFORMER_BLAS_SELFTEST_FAIL=1 " + GF_BIN + " --version > /tmp/gf_blas.txt 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream in2("/tmp/gf_blas.txt");
    std::string out2((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>());
    INFO(out2);
    CHECK(has(out2, "OpenBLAS default; automatic selection failed"));
  }
  // a kernel set chosen by the user is left alone
  cmd =
      std::string("env OPENBLAS_CORETYPE=Haswell ") + GF_BIN + " --version > /tmp/gf_blas.txt 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in3("/tmp/gf_blas.txt");
  std::string out3((std::istreambuf_iterator<char>(in3)), std::istreambuf_iterator<char>());
  CHECK(has(out3, "set by the user"));
}

TEST_CASE("cli: sweep runs every combination and writes one table") {
  std::string base = tmpdir("sw_base") + ".yaml", sw = tmpdir("sw") + ".yaml",
              out = tmpdir("sw_out");
  std::ofstream(base) << kTiny;
  std::ofstream(sw) << "name: t\nbase: " << base
                    << "\nseeds: [1, 2]\nset: [train.steps=6, train.eval_every=3]\n"
                       "axes:\n  growth:\n    - {plugin: none}\n"
                       "    - {plugin: fixed_schedule, every: 2, max_heads: 3}\n"
                       "  model.attention.heads: [1, 2]\n";
  Cli c = run_cli("sweep " + sw + " --out " + out + " --quiet");
  INFO(c.output);
  REQUIRE(c.status == 0);
  std::ifstream csv(out + "/summary.csv");
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(csv, line)) lines.push_back(line);
  REQUIRE(lines.size() == 1 + 2 * 2 * 2);
  CHECK(has(lines[0], "job,growth,model.attention.heads,seed,test_accuracy"));
  CHECK(fs::exists(out + "/fixed_schedule__2__seed2/metrics.jsonl"));
  CHECK(has(c.output, "| fixed_schedule__1__seed1 |"));
  fs::remove_all(out);
  fs::remove(base);
  fs::remove(sw);
}

TEST_CASE("cli: a sweep's `set` axis gives each arm several overrides; a bad arm is named") {
  std::string base = tmpdir("sws_base") + ".yaml", sw = tmpdir("sws") + ".yaml",
              out = tmpdir("sws_out");
  std::ofstream(base) << kTiny;
  std::ofstream(sw)
      << "name: t\nbase: " << base
      << "\nseeds: [1]\nset: [train.steps=4, train.eval_every=2]\n"
         "axes:\n  set:\n"
         "    fixed2: [model.attention.heads=2, \"growth={plugin: none}\"]\n"
         "    grown: [model.attention.heads=1, \"growth={plugin: fixed_schedule, every: 2, "
         "max_heads: 3}\"]\n";
  Cli c = run_cli("sweep " + sw + " --out " + out + " --quiet");
  INFO(c.output);
  REQUIRE(c.status == 0);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  // two jobs, not the product of the keys; each arm's keys reach its job's config
  CHECK(fs::exists(out + "/fixed2__seed1"));
  CHECK(fs::exists(out + "/grown__seed1"));
  CHECK(!fs::exists(out + "/fixed2__grown__seed1"));
  const std::string fixed = slurp(out + "/fixed2__seed1/config.resolved.yaml");
  const std::string grown = slurp(out + "/grown__seed1/config.resolved.yaml");
  CHECK(has(fixed, "heads: 2"));
  CHECK(has(grown, "heads: 1"));
  CHECK(has(grown, "fixed_schedule"));
  CHECK(!has(fixed, "fixed_schedule"));
  CHECK(has(slurp(out + "/summary.csv"), "job,set,seed"));
  fs::remove_all(out);
  // an arm that is not a list of KEY=VALUE is a config error naming it
  std::ofstream(sw) << "name: t\nbase: " << base
                    << "\naxes:\n  set:\n    a: [model.attention.heads]\n";
  Cli bad = run_cli("sweep " + sw + " --out " + out + " --quiet");
  CHECK(bad.status != 0);
  CHECK(has(bad.output, "expected KEY=VALUE, got 'model.attention.heads'"));
  fs::remove_all(out);
  fs::remove(base);
  fs::remove(sw);
}

TEST_CASE(
    "cli: a sweep records a failed job, goes on, and a rerun continues without redoing jobs") {
  std::string base = tmpdir("swr_base") + ".yaml", sw = tmpdir("swr") + ".yaml",
              out = tmpdir("swr_out");
  std::ofstream(base) << kTiny;
  // labelled axis values; the `broken` data's file is malformed: its config holds (the sweep
  // checks every job's config before the first runs), its jobs fail when they read the data
  std::string bad_tsv = tmpdir("swr_bad") + ".tsv";
  std::ofstream(bad_tsv) << "no header here\n";
  std::ofstream(sw)
      << "name: t\nbase: " << base
      << "\nseeds: [1, 2]\nset: [train.steps=6, train.eval_every=3]\n"
         "axes:\n  data:\n    plain: {plugin: listops, train_size: 256, val_size: 64, "
         "test_size: 64, min_length: 4, max_length: 24, max_depth: 3, max_args: 4}\n"
         "    broken: {plugin: text_tsv, train: "
      << bad_tsv << "}\n";
  Cli c = run_cli("sweep " + sw + " --out " + out + " --quiet");
  INFO(c.output);
  CHECK(c.status == 1);
  CHECK(has(c.output, bad_tsv));
  REQUIRE(fs::exists(out + "/plain__seed2/metrics.jsonl"));
  std::ifstream g(out + "/groups.csv");
  std::string header, plain, broken;
  std::getline(g, header);
  std::getline(g, plain);
  std::getline(g, broken);
  CHECK(header == "data,seeds,test_accuracy,best_val_accuracy,params,time_s");  // no policy columns
  CHECK(has(plain, "plain,2/2,"));
  CHECK(has(plain, " +- "));
  CHECK(has(broken, "broken,0/2,"));
  // the first job's record gone (as if killed after training): it resumes from its last
  // checkpoint and ends with the same test accuracy; the other finished job is not run again
  auto metrics_time = fs::last_write_time(out + "/plain__seed2/metrics.jsonl");
  std::ifstream csv(out + "/summary.csv");
  std::string line, first_row;
  std::getline(csv, line);
  std::getline(csv, first_row);
  fs::remove(out + "/plain__seed1/sweep_job.json");
  Cli c2 = run_cli("sweep " + sw + " --out " + out + " --quiet");
  INFO(c2.output);
  CHECK(c2.status == 1);  // the broken jobs fail again
  CHECK(has(c2.output, "plain__seed1: resumed, test accuracy"));
  CHECK(has(c2.output, "plain__seed2: finished earlier"));
  CHECK(fs::last_write_time(out + "/plain__seed2/metrics.jsonl") == metrics_time);
  std::ifstream csv2(out + "/summary.csv");
  std::string first_row2;
  std::getline(csv2, line);
  std::getline(csv2, first_row2);
  auto accuracy = [](const std::string& row) {  // job,growth,seed,test_accuracy,...
    std::stringstream s(row);
    std::string f;
    for (int i = 0; i < 4; ++i) std::getline(s, f, ',');
    return f;
  };
  CHECK(accuracy(first_row2) == accuracy(first_row));
  CHECK(!accuracy(first_row).empty());
  // the same directory with other overrides is refused before any job runs
  Cli c3 = run_cli("sweep " + sw + " --out " + out + " --quiet --set train.steps=7");
  CHECK(c3.status != 0);
  CHECK(has(c3.output, "ran with other overrides"));
  fs::remove_all(out);
  fs::remove(bad_tsv);
  fs::remove(base);
  fs::remove(sw);
}

TEST_CASE("cli: sweep shards split the jobs between processes and the last one's table holds all") {
  std::string base = tmpdir("sws_base") + ".yaml", sw = tmpdir("sws") + ".yaml",
              out = tmpdir("sws_out");
  std::ofstream(base) << kTiny;
  std::ofstream(sw) << "name: t\nbase: " << base
                    << "\nseeds: [1, 2, 3]\nset: [train.steps=4, train.eval_every=2]\n"
                       "axes:\n  model.attention.heads: [1, 2]\n";
  Cli a = run_cli("sweep " + sw + " --out " + out + " --quiet --shard 1/2");
  INFO(a.output);
  REQUIRE(a.status == 0);
  // jobs 0..5 in order 1__seed1, 1__seed2, 1__seed3, 2__seed1, ...: shard 1 runs 1, 3, 5
  CHECK(fs::exists(out + "/1__seed2/sweep_job.json"));
  CHECK(fs::exists(out + "/2__seed1/sweep_job.json"));
  CHECK(!fs::exists(out + "/1__seed1"));
  CHECK(has(a.output, "1__seed1: another shard's, not finished yet"));
  Cli b = run_cli("sweep " + sw + " --out " + out + " --quiet --shard 0/2");
  INFO(b.output);
  REQUIRE(b.status == 0);
  CHECK(has(b.output, "1__seed2: finished earlier"));
  CHECK(has(b.output, "| 2 | 3/3 |"));
  CHECK(run_cli("sweep " + sw + " --out " + out + " --shard 2/2").status == 2);
  fs::remove_all(out);
  fs::remove(base);
  fs::remove(sw);
}

namespace {

/// A training run under an address-space limit: what it printed and its events.
struct LimitedRun {
  std::string output;
  std::vector<json> events;
};

/// Trains CFG into RUN under `ulimit -v` of LIMIT_MB megabytes (one thread, killed after 120 s);
/// the run must finish normally: not 1 (out of memory at a step) nor 134.
LimitedRun train_under_limit(const std::string& cfg, const std::string& run, int limit_mb) {
  const gf_test::Shell sh =
      gf_test::run_shell("OPENBLAS_NUM_THREADS=1 timeout -s KILL 120 bash -c 'ulimit -v " +
                         std::to_string(limit_mb * 1000) + "; exec " + std::string(GF_BIN) +
                         " train " + cfg + " --run-dir " + run + "'");
  REQUIRE_MESSAGE(sh.status == 0, sh.output);
  LimitedRun r{sh.output, {}};
  std::ifstream ev(run + "/events.jsonl");
  for (std::string line; std::getline(ev, line);) r.events.push_back(json::parse(line));
  return r;
}

}  // namespace

TEST_CASE("memory: a head that would not fit is refused as an event, and training goes on") {
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("sanitizer build: an address-space limit stops the sanitizer itself; skipped");
#else
  const std::string dir = tmpdir("grow_oom"), cfg = dir + ".yaml";
  // every step asks for a head of d_k 1024 (some 18 MiB of activations at this batch): under an
  // address-space limit some way over what the process takes alone, the heads soon stop
  // fitting, which the up-front estimate cannot know. What the process takes alone depends on
  // the machine (about 340 MiB with OpenBLAS's SkylakeX kernels, less on others), so the limit
  // rises until a run both adds heads and refuses them; every run must finish normally.
  std::ofstream(cfg)
      << "name: grow\nseed: 3\nthreads: 1\n"
         "data: {plugin: listops, train_size: 64, val_size: 16, test_size: 16, "
         "min_length: 4, max_length: 12, max_depth: 2, max_args: 3}\n"
         "model: {d_model: 8, layers: 1, max_len: 16, attention: {plugin: mha, "
         "heads: 4, d_k: 1024, max_heads: 64}}\n"
         "optimizer: {plugin: adamw, lr: 0.003}\n"
         "train: {steps: 40, batch_size: 64, warmup: 1, eval_every: 0, log_every: 1, "
         "check_every: 1}\n"
         "growth: {plugin: random, probability: 1, max_heads: 64}\n";
  size_t refused = 0, grown = 0;
  for (int limit_mb : {350, 420, 500, 600, 750}) {
    CAPTURE(limit_mb);
    const std::string run = dir + "/run" + std::to_string(limit_mb);
    const LimitedRun r = train_under_limit(cfg, run, limit_mb);
    const std::string& text = r.output;
    INFO(text);
    refused = grown = 0;
    for (const json& e : r.events) {
      if (e["type"] == "growth_refused") {
        ++refused;
        CHECK(e["block"] == 0);
        CHECK(has(e["reason"].get<std::string>(), "would need about"));
      }
      if (e["type"] == "grow") ++grown;
    }
    CHECK(grown + refused == 40);
    if (refused > 0) {
      CHECK(has(text,
                ": a head is refused: a training step with one more head in block 0 would "
                "need about"));
      CHECK(has(text, "the address-space limit (ulimit -v); training goes on with "));
    }
    // the test ran on the final model
    std::ifstream metrics(run + "/metrics.jsonl");
    std::string all((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
    CHECK(has(all, "\"split\":\"test\""));
    if (grown > 0 && refused > 0) break;
  }
  CHECK(refused > 0);
  CHECK(grown > 0);  // heads that fit were added
  fs::remove_all(dir);
  fs::remove(cfg);
#endif
}

TEST_CASE(
    "memory: MLP units or a block that would not fit are refused as events, and training goes "
    "on") {
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("sanitizer build: an address-space limit stops the sanitizer itself; skipped");
#else
  // a batch of 256 rows up to 32 tokens: 2,048 MLP units take some 170 MiB of a step, a block
  // some 30 MiB. Under address-space limits some way over what the process takes alone (which
  // depends on the machine), the width doubles (mlp_onset, never at its onset) and blocks go
  // in at every check (depth_schedule) until the estimate refuses one; the limit rises until
  // a run both grows and is refused, and every run must finish normally (before the admission,
  // the width's run died out of memory at step 6 under 500 MB).
  for (const std::string growth :
       {"{plugin: mlp_onset, factor: 2, onset: 1, until: 1}",
        "{plugin: depth_schedule, at: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], index: 0, "
        "max_blocks: 64}"}) {
    CAPTURE(growth);
    const std::string dir = tmpdir("grow_oom_structure"), cfg = dir + ".yaml";
    std::ofstream(cfg) << "name: grow\nseed: 3\nthreads: 1\n"
                          "data: {plugin: listops, train_size: 512, val_size: 16, test_size: 16, "
                          "min_length: 4, max_length: 24, max_depth: 3, max_args: 4}\n"
                          "model: {d_model: 64, layers: 1, max_len: 32, mlp_ratio: 4, "
                          "attention: {plugin: mha, heads: 2}}\n"
                          "optimizer: {plugin: adamw, lr: 0.003}\n"
                          "train: {steps: 12, batch_size: 256, warmup: 1, eval_every: 0, "
                          "log_every: 1, check_every: 1}\n"
                          "growth: "
                       << growth << "\n";
    size_t refused = 0, grown = 0;
    for (int limit_mb : {450, 550, 700, 900, 1200}) {
      CAPTURE(limit_mb);
      const LimitedRun r =
          train_under_limit(cfg, dir + "/run" + std::to_string(limit_mb), limit_mb);
      refused = grown = 0;
      for (const json& e : r.events) {
        if (e["type"] == "growth_refused") {
          ++refused;
          CHECK(e["what"] == (growth.find("mlp") != std::string::npos ? "mlp_units" : "block"));
          CHECK(has(e["reason"].get<std::string>(), "would need about"));
        }
        if (e["type"] == "grow") ++grown;
      }
      if (grown > 0 && refused > 0) break;
    }
    CHECK(refused > 0);
    CHECK(grown > 0);
    fs::remove_all(dir);
    fs::remove(cfg);
  }
#endif
}

TEST_CASE("cli: pruning.min_heads 0 is refused when the config is read, naming the option") {
  const std::string cfg = tmpdir("min_heads0") + ".yaml";
  for (const char* plugin : {"magnitude", "directional_energy"}) {
    std::ofstream(cfg) << kTiny << "pruning: {plugin: " << plugin << ", min_heads: 0}\n";
    Cli c = run_cli("config check " + cfg);
    INFO(c.output);
    CHECK(c.status == 2);
    CHECK(has(c.output, "min_heads"));
  }
  fs::remove(cfg);
}
