// The run-directory reader (read_run_log, read_metrics): hand-written lines read back field by
// field, the reporter's own lines read back as written, and the refusals of bad input (corrupt
// line, torn last line, over-long line, malformed `blocks`, bad plugin lock) with FILE:LINE.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "growformer/errors.hpp"
#include "growformer/reporter.hpp"
#include "growformer/run_events.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;

namespace {

// Checks that F throws a RuntimeError whose message holds WHERE.
#define CHECK_REFUSED(f, where) \
  CHECK_THROWS_WITH_AS(f, doctest::Contains(std::string(where).c_str()), gf::RuntimeError)

const char* kTrain =
    R"({"step":10,"split":"train","loss":2.5,"accuracy":0.25,"lr":0.001,"heads":[2,3],)"
    R"("tokens_per_s":null,"elapsed_s":1.5,"blocks":[{"lambda":[0.5,0.25,0.25],)"
    R"("heads":{"0":{"beta":-0.5,"gate":0.375},"10":{"beta":2}}},{}]})";
const char* kVal =
    R"({"step":10,"split":"val","loss":2.0,"accuracy":0.5,"examples":40,"heads":[2,3]})";
const char* kTest =
    R"({"step":20,"split":"test","loss":1.75,"accuracy":0.625,"examples":40,"heads":[2,4],)"
    R"J("model":"best (step 10)","evaluated_on":"val","majority_class_accuracy":0.125})J";
const char* kGrow =
    R"({"step":12,"type":"grow","block":1,"head":3,"policy":"incrt","W_t":0.5,"phi_w":null,"heads":[2,4]})";
const char* kLock =
    R"([{"plugin":"mha","version":"1.0","path":"/x/libgf_mha.so","checksum":"abc123"}])";

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("read_run_log: hand-written lines read back field by field, nested blocks typed") {
  gf_test::TempDir dir;
  gf::RunDir run(dir.path.string());
  write(run.metrics(), std::string(kTrain) + "\n\n  \n" + kVal + "\n" + kTest + "\n");
  write(run.events(), std::string(kGrow) + "\n");
  write(run.resolved_config(), "name: x\nseed: 1\n");
  write(run.plugins_lock(), kLock);
  gf::RunLog log = gf::read_run_log(run);

  REQUIRE(log.train.size() == 1);
  const gf::MetricsLine& t = log.train[0];
  CHECK(t.step == 10);
  CHECK(t.split == "train");
  CHECK(t.number("loss") == 2.5);
  CHECK(t.number("lr") == 0.001);
  CHECK(std::isnan(*t.number("tokens_per_s")));  // logged as null
  CHECK_FALSE(t.number("examples").has_value());
  CHECK(t.list("heads") == std::vector<double>{2, 3});
  CHECK(t.list("missing").empty());
  REQUIRE(t.blocks.size() == 2);
  CHECK(t.blocks[0].lists.at("lambda") == std::vector<double>{0.5, 0.25, 0.25});
  REQUIRE(t.blocks[0].heads.size() == 2);
  CHECK(t.blocks[0].heads.at(0).at("beta") == -0.5);
  CHECK(t.blocks[0].heads.at(0).at("gate") == 0.375);
  CHECK(t.blocks[0].heads.at(10).at("beta") == 2);
  CHECK(t.blocks[1].lists.empty());
  CHECK(t.blocks[1].heads.empty());

  REQUIRE(log.val.size() == 1);
  CHECK(log.val[0].number("examples") == 40);
  CHECK(log.val[0].blocks.empty());
  REQUIRE(log.test.has_value());
  CHECK(log.test->step == 20);
  CHECK(log.test->text("model") == "best (step 10)");
  CHECK(log.test->text("evaluated_on", "test") == "val");
  CHECK(log.test->text("missing", "fallback") == "fallback");
  CHECK(log.test->number("majority_class_accuracy") == 0.125);

  REQUIRE(log.events.size() == 1);
  const gf::RunEvent& e = log.events[0];
  CHECK(e.step == 12);
  CHECK(e.event.type == "grow");
  CHECK(e.event.block == 1);
  CHECK(e.event.head == 3);
  CHECK(e.text("policy") == "incrt");
  CHECK(e.number("W_t") == 0.5);
  CHECK(std::isnan(*e.number("phi_w")));
  CHECK(e.list("heads") == std::vector<double>{2, 4});

  CHECK(log.config == "name: x\nseed: 1\n");
  REQUIRE(log.plugins.size() == 1);
  CHECK(log.plugins[0].plugin == "mha");
  CHECK(log.plugins[0].version == "1.0");
  CHECK(log.plugins[0].path == "/x/libgf_mha.so");
  CHECK(log.plugins[0].checksum == "abc123");
}

TEST_CASE("read_run_log: reads back what the reporter wrote; absent optional files are empty") {
  gf_test::TempDir dir;
  gf::RunDir run(dir.path.string());
  {
    gf::Reporter r(run, 20, true);
    gf::TrainWindow w;
    w.loss = 3;  // mean loss 0.75, accuracy 0.25 over 4 examples
    w.correct = 1;
    w.count = 4;
    r.train(10, w, 0.5, {2, 3}, R"([{"lambda":[0.75,0.25],"heads":{"1":{"beta":0.5}}}])");
    r.validation(10, {1.25, 0.5, 8}, {2, 3});
    r.test(20, {{1.5, 0.375, 8}, "last", "test", 0.25}, {3, 3});
  }
  fs::remove(run.events());  // a run whose policies emitted nothing may have no events file
  gf::RunLog log = gf::read_run_log(run);
  REQUIRE(log.train.size() == 1);
  CHECK(log.train[0].number("loss") == 0.75);
  CHECK(log.train[0].number("accuracy") == 0.25);
  CHECK(log.train[0].number("lr") == 0.5);
  CHECK(log.train[0].list("heads") == std::vector<double>{2, 3});
  REQUIRE(log.train[0].blocks.size() == 1);
  CHECK(log.train[0].blocks[0].lists.at("lambda") == std::vector<double>{0.75, 0.25});
  CHECK(log.train[0].blocks[0].heads.at(1).at("beta") == 0.5);
  REQUIRE(log.val.size() == 1);
  CHECK(log.val[0].number("loss") == 1.25);
  CHECK(log.val[0].number("examples") == 8);
  REQUIRE(log.test.has_value());
  CHECK(log.test->number("accuracy") == 0.375);
  CHECK(log.test->text("model") == "last");
  CHECK(log.test->text("evaluated_on") == "test");
  CHECK(log.test->number("majority_class_accuracy") == 0.25);
  CHECK(log.test->list("heads") == std::vector<double>{3, 3});
  CHECK(log.events.empty());
  CHECK(log.config.empty());
  CHECK(log.plugins.empty());
}

TEST_CASE("read_metrics: corrupt, torn, over-long and malformed lines are refused with FILE:LINE") {
  gf_test::TempDir dir;
  std::string m = dir.file("metrics.jsonl");
  auto refused = [&](const std::string& text, const std::string& where) {
    INFO(text.substr(0, 80));
    write(m, text);
    CHECK_REFUSED(gf::read_metrics(m), where);
  };
  std::string ok = std::string(kVal) + "\n";
  refused(ok + "not json\n" + ok, m + ":2: corrupt line (not a JSON object): not json");
  // a torn last line (a crash mid-write), after a blank line that still counts
  refused(ok + "\n{\"step\":20,\"split\":\"tra", m + ":3: corrupt line (not a JSON object)");
  refused(ok + "[1, 2]\n", m + ":2: corrupt line (not a JSON object)");
  refused("{\"split\":\"val\"}\n", m + ":1: corrupt line (no numeric `step`)");
  refused("{\"step\":1,\"split\":\"dev\"}\n", m + ":1: corrupt line (`split` is not train");
  // a float step no integer can hold (casting it would be undefined behaviour; found by fuzzing)
  refused("{\"step\":1e300,\"split\":\"val\"}\n", m + ":1: corrupt line (`step` is out of range)");
  refused(ok + "{\"step\":-2e19,\"split\":\"val\"}\n",
          m + ":2: corrupt line (`step` is out of range)");
  refused("{\"step\":1,\"split\":\"val\",\"x\":{\"a\":1}}\n", m + ":1: field `x` is no number");
  refused("{\"step\":1,\"split\":\"train\",\"blocks\":[{\"heads\":{\"h\":{\"beta\":1}}}]}\n",
          m + ":1: `blocks` names head `h`");
  refused("{\"step\":1,\"split\":\"train\",\"blocks\":[{\"lambda\":1}]}\n",
          m + ":1: `blocks` field `lambda` is no list");
  refused("{\"step\":1,\"split\":\"train\",\"heads\":[1,\"a\"]}\n", m + ":1: `\"a\"` is no number");

  // a line of exactly 1 MiB is read; one byte more is refused before it is read whole
  std::string head = "{\"step\":1,\"split\":\"val\",\"pad\":\"", tail = "\"}";
  std::string full = head + std::string((size_t(1) << 20) - head.size() - tail.size(), 'x') + tail;
  REQUIRE(full.size() == (size_t(1) << 20));
  write(m, ok + full + "\n");
  CHECK(gf::read_metrics(m).size() == 2);
  refused(ok + head + "x" + full.substr(head.size()) + "\n", m + ":2: a line longer than 1 MiB");

  CHECK_REFUSED(gf::read_metrics(dir.file("none.jsonl")), "cannot open");
  fs::create_directories(dir.file("dir.jsonl"));
  CHECK_REFUSED(gf::read_metrics(dir.file("dir.jsonl")),
                dir.file("dir.jsonl") + ": the run log is not a regular file");
}

TEST_CASE("read_run_log: a bad events line or plugin lock names its file") {
  gf_test::TempDir dir;
  gf::RunDir run(dir.path.string());
  write(run.metrics(), std::string(kVal) + "\n");
  write(run.events(), std::string(kGrow) + "\n{\"step\": 4}\n");
  CHECK_REFUSED(gf::read_run_log(run), run.events() + ":2: not an event");
  write(run.events(), std::string(kGrow) + "\n{\"step\": 4, \"type\": \"gr");
  CHECK_REFUSED(gf::read_run_log(run), run.events() + ":2: corrupt line");
  write(run.events(), "");
  write(run.plugins_lock(), R"([{"plugin":"mha"}])");
  CHECK_REFUSED(gf::read_run_log(run), run.plugins_lock() + ": not a plugin lock");
  write(run.plugins_lock(), "{oops");
  CHECK_REFUSED(gf::read_run_log(run), run.plugins_lock() + ": not a plugin lock");
}
