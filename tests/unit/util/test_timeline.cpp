#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "shared/util/error.h"
#include "shared/util/timeline.h"
#include "tests/support/temp_dir.h"

using namespace waste;
using waste::test::TempDir;

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

}  // namespace

TEST_CASE("timeline: off by default, spans from several threads land in a Chrome trace") {
  CHECK_FALSE(timeline::enabled());
  timeline::span("ignored", "test", 1, 2);  // off: nothing recorded, nothing written

  TempDir tmp;
  const std::string path = tmp / "a.json";
  timeline::start(path, "unit-test", 1000);
  CHECK(timeline::enabled());
  const int64_t t0 = timeline::now_ns();
  std::thread other([] {
    for (int i = 0; i < 10; ++i) timeline::Span s("kernel", "compute", 3, i);
  });
  { timeline::Span s("attention", "compute", 2); }
  timeline::instant("prefetch", "iod", 5, 7);
  other.join();
  CHECK(timeline::stop() == 12);
  CHECK_FALSE(timeline::enabled());

  const auto j = read_json(path);
  const auto& ev = j.at("traceEvents");
  REQUIRE(ev.size() == 13);  // + process_name metadata
  CHECK(ev[0].at("ph") == "M");
  CHECK(ev[0].at("args").at("name") == "unit-test");
  int kernels = 0, attention = 0, instants = 0;
  for (size_t i = 1; i < ev.size(); ++i) {
    const auto& e = ev[i];
    CHECK(e.at("pid") == int(::getpid()));
    CHECK(e.at("ts").get<double>() >= double(t0) / 1e3);
    if (e.at("name") == "kernel") {
      ++kernels;
      CHECK(e.at("ph") == "X");
      CHECK(e.at("args").at("layer") == 3);
      CHECK(e.at("dur").get<double>() >= 0);
    } else if (e.at("name") == "attention") {
      ++attention;
      CHECK(e.at("args").at("layer") == 2);
      CHECK_FALSE(e.at("args").contains("expert"));
    } else if (e.at("name") == "prefetch") {
      ++instants;
      CHECK(e.at("ph") == "i");
      CHECK(e.at("args").at("expert") == 7);
    }
  }
  CHECK(kernels == 10);
  CHECK(attention == 1);
  CHECK(instants == 1);
  CHECK(j.at("otherData").at("dropped_events") == 0);
}

TEST_CASE("timeline: a full buffer drops and counts; merge joins files; bad input is an error") {
  TempDir tmp;
  const std::string a = tmp / "b.json", b = tmp / "c.json", out = tmp / "m.json";
  timeline::start(a, "first", 4);
  for (int i = 0; i < 6; ++i) timeline::span("read", "iod", 100 + i, 200 + i, 1, i);
  CHECK(timeline::stop() == 4);
  CHECK(read_json(a).at("otherData").at("dropped_events") == 2);

  timeline::start(b, "second", 8);
  timeline::span("fetch", "compute", 10, 5);  // end before begin: a zero-length span, not negative
  timeline::stop();
  CHECK(read_json(b).at("traceEvents")[1].at("dur").get<double>() == 0);

  const std::string ins[] = {a, b};
  timeline::merge(out, ins, 2);
  CHECK(read_json(out).at("traceEvents").size() == 5 + 2);

  const std::string missing[] = {a, tmp / "missing.json"};
  CHECK_THROWS_AS(timeline::merge(out, missing, 2), Error);
  { std::ofstream(b) << "{\"nope\": 1}"; }
  CHECK_THROWS_AS(timeline::merge(out, ins, 2), Error);
  CHECK_THROWS_AS(timeline::start("/nonexistent-dir/x.json", "x"), Error);
  CHECK_FALSE(timeline::enabled());
}
