// HTTP for integration tests through curl (a real client, nothing shell-quoted: the body goes in
// a file), and the Prometheus text of /metrics.
#pragma once
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "tests/integration/process.h"

namespace waste::test {

struct Http {
  int status = 0;  // 0: no answer (curl's own error or its -m timeout)
  std::string body;
  double seconds = 0;
};

// curl (from `from`, a loopback address) with the body in a file under `dir`. curl gives up
// after 60 s (-m): nothing waits longer than that for an answer.
inline Http curl(const std::string& url, const std::string& dir, const std::string& body = "",
                 const std::string& extra = "", const std::string& from = "127.0.0.1") {
  std::string cmd = "curl -sS -m 60 --interface " + from + " -o " + dir + "/out.txt -w '%{http_code} %{time_total}' " + extra;
  if (!body.empty()) {
    std::ofstream(dir + "/body.json", std::ios::binary) << body;
    cmd += " -H 'Content-Type: application/json' --data-binary @" + dir + "/body.json";
  }
  auto r = run_command("rm -f " + dir + "/out.txt; " + cmd + " " + url);
  Http h;
  std::istringstream in(r.output);
  in >> h.status >> h.seconds;
  std::ifstream f(dir + "/out.txt", std::ios::binary);
  h.body.assign(std::istreambuf_iterator<char>(f), {});
  return h;
}

// A Prometheus value of /metrics (-1 when absent).
inline double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

}  // namespace waste::test
