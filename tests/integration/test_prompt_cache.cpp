// The prompt cache and session files end to end, with real processes. For each tiny family a
// conversation of several turns over HTTP gives the same replies and the same logprobs with the
// prompt cache on and off, and each turn after the first starts from the checkpoint the turn
// before left (cached_tokens = the previous turn's prompt); another API key never gets those
// checkpoints; a session saved and loaded continues exactly as the original. The cache's byte
// budget holds: filled far past it, the oldest checkpoints go and compute's heap stays bounded.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/support/child_process.h"
#include "tests/integration/test_engine_instance.h"
#include "tests/sanitizer.h"
#include "tools/libwaste/engine_client.h"

using namespace waste;
using namespace waste::test;
using json = nlohmann::ordered_json;

namespace {

struct Http {
  int status = 0;
  json body;
  std::string raw;
};

Http post(int port, const std::string& path, const json& body, const std::string& dir, const std::string& key = "") {
  const std::string file = dir + "/body.json";
  std::ofstream(file, std::ios::binary) << body.dump();
  const std::string auth = key.empty() ? "" : " -H 'Authorization: Bearer " + key + "'";
  auto r = run_command("curl -sS -o " + dir + "/out.txt -w '%{http_code}' -H 'Content-Type: application/json'" + auth +
                       " --data-binary @" + file + " http://127.0.0.1:" + std::to_string(port) + path);
  Http h;
  h.status = std::atoi(r.output.c_str());
  std::ifstream f(dir + "/out.txt", std::ios::binary);
  h.raw.assign(std::istreambuf_iterator<char>(f), {});
  h.body = json::parse(h.raw, nullptr, false);
  return h;
}

std::string get(int port, const std::string& path, const std::string& key = "") {
  const std::string auth = key.empty() ? "" : " -H 'Authorization: Bearer " + key + "'";
  return run_command("curl -sS" + auth + " http://127.0.0.1:" + std::to_string(port) + path).output;
}

// One line of Prometheus text: the value of `name`.
double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  FAIL("no metric " << name << " in:\n" << text);
  return 0;
}

struct Turn {
  json reply;  // the assistant message as the server returned it
  json logprobs;
  int64_t prompt_tokens = 0, cached_tokens = 0;
};

const char* kUserTurns[] = {
    "Tell me about the weather on the coast today, and whether it will rain later in the week.",
    "And what about the mountains? I am planning a long walk there with two friends on Saturday.",
    "Thanks. Which of the two would you pick for a quiet weekend, and why would you pick it?",
    "One more: how early should we leave in the morning to be back before it gets dark?",
};

// The conversation, turn after turn: each request re-sends everything, as OpenAI clients do.
std::vector<Turn> converse(int port, const std::string& dir, const std::string& key = "") {
  json messages = json::array({{{"role", "system"}, {"content", "You are terse."}}});
  std::vector<Turn> turns;
  for (const char* user : kUserTurns) {
    messages.push_back({{"role", "user"}, {"content", user}});
    json req = {{"model", "tiny"},       {"messages", messages}, {"max_tokens", 6},
                {"temperature", 0},   {"logprobs", true},     {"top_logprobs", 5}};
    Http h = post(port, "/v1/chat/completions", req, dir, key);
    REQUIRE_MESSAGE(h.status == 200, h.raw);
    Turn t;
    const json& msg = h.body["choices"][0]["message"];
    t.reply = msg;
    t.logprobs = h.body["choices"][0]["logprobs"];
    t.prompt_tokens = h.body["usage"]["prompt_tokens"].get<int64_t>();
    t.cached_tokens = h.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    turns.push_back(t);
    // The reply goes back as the client got it (K3 drops past reasoning from the prompt itself).
    json back = {{"role", "assistant"}, {"content", msg.contains("content") && msg["content"].is_string() ? msg["content"] : json("")}};
    messages.push_back(back);
  }
  return turns;
}

}  // namespace

TEST_CASE("prompt cache over HTTP: the same replies and logprobs on and off, every turn resumes where the last began") {
  for (const std::string preset : {"tiny-kimi-linear", "tiny-k3", "tiny-k2"}) {
    CAPTURE(preset);
    const int on_port = free_port();
    Instance on("--http 127.0.0.1:" + std::to_string(on_port) + " --ctx 2048", "512M", preset);
    REQUIRE_MESSAGE(on.ok(), on.why());
    const int off_port = free_port();
    Instance off("--http 127.0.0.1:" + std::to_string(off_port) + " --ctx 2048 --prompt-cache 0", "512M", preset);
    REQUIRE_MESSAGE(off.ok(), off.why());

    const std::vector<Turn> with = converse(on_port, on.run_dir());
    const std::vector<Turn> without = converse(off_port, off.run_dir());
    REQUIRE(with.size() == without.size());
    for (size_t i = 0; i < with.size(); ++i) {
      CAPTURE(i);
      CHECK(with[i].reply == without[i].reply);
      CHECK(with[i].logprobs == without[i].logprobs);  // every top-5 logprob, to the last bit printed
      CHECK(with[i].prompt_tokens == without[i].prompt_tokens);
      CHECK(without[i].cached_tokens == 0);
      // The previous prompt is the prefix this one shares: only the reply and the new turn are
      // prefilled.
      CHECK(with[i].cached_tokens == (i == 0 ? 0 : with[i - 1].prompt_tokens));
    }
    REQUIRE(with.back().logprobs["content"].size() > 0);

    // The same last request again: the whole prompt is a checkpoint, nothing is prefilled, and
    // the reply is still the same.
    const std::string m = get(on_port, "/metrics");
    CHECK(metric(m, "waste_prompt_cache_hits_total") == double(with.size() - 1));
    CHECK(metric(m, "waste_prompt_cache_lookups_total") == double(with.size()));
    CHECK(metric(m, "waste_prompt_cache_entries") == double(with.size()));
    CHECK(metric(m, "waste_prompt_cache_bytes") > 0);
    CHECK(metric(m, "waste_prompt_cache_bytes") <= metric(m, "waste_prompt_cache_budget_bytes"));
    const std::string m_off = get(off_port, "/metrics");
    CHECK(metric(m_off, "waste_prompt_cache_budget_bytes") == 0);
    // Exact, not rounded to 6 digits: the default budget is 64 MiB for a tiny model.
    CHECK(metric(m, "waste_prompt_cache_budget_bytes") == double(64ull << 20));
    CHECK(metric(m_off, "waste_prompt_cache_entries") == 0);

    // `waste status` reports the same.
    auto st = run_command(waste_bin() + " status --run-dir " + on.run_dir());
    CHECK_MESSAGE(st.output.find("in " + std::to_string(with.size()) + " checkpoints; " + std::to_string(with.size() - 1) +
                                 " of " + std::to_string(with.size()) + " prompts hit") != std::string::npos,
                  st.output);
  }
}

TEST_CASE("prompt cache: one API key's checkpoints never serve another key") {
  const int port = free_port();
  Instance inst("--http 127.0.0.1:" + std::to_string(port) + " --ctx 2048", "512M", "tiny-kimi-linear");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  // A second serve in front of the same compute, with two keys.
  const int keyed = free_port();
  ChildProcess serve({env_or("WASTE_SERVE", "waste-serve"), "--connect", inst.run_dir(), "--listen",
                      "127.0.0.1:" + std::to_string(keyed), "--api-key", "alpha", "--api-key", "beta"});
  // It logs "listening" once its socket is bound (connections queue from then on).
  const bool listening =
      serve.wait_for([&] { return (serve.out() + serve.err()).find("listening on") != std::string::npos; }, 30);
  REQUIRE_MESSAGE(listening, serve.out() << serve.err());
  const std::vector<Turn> a = converse(keyed, inst.run_dir(), "alpha");
  CHECK(a[1].cached_tokens == a[0].prompt_tokens);
  const std::vector<Turn> b = converse(keyed, inst.run_dir(), "beta");
  // The same conversation under another key: nothing of alpha's serves beta, yet each of
  // beta's turns resumes from beta's own.
  CHECK(b[0].cached_tokens == 0);
  CHECK(b[1].cached_tokens == b[0].prompt_tokens);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].reply == b[i].reply);
  // No key at all: the unkeyed front end's scope is a third one.
  const std::vector<Turn> open = converse(port, inst.run_dir());
  CHECK(open[0].cached_tokens == 0);
  CHECK(post(keyed, "/v1/chat/completions", json{{"model", "tiny"}, {"messages", json::array()}}, inst.run_dir(), "gamma").status == 401);
}

TEST_CASE("session files: a saved and loaded session continues exactly, every family; bad files are refused by name") {
  for (const std::string preset : {"tiny-kimi-linear", "tiny-k3", "tiny-k2"}) {
    CAPTURE(preset);
    Instance inst("--ctx 1024", "512M", preset);
    REQUIRE_MESSAGE(inst.ok(), inst.why());
    client::Client c(inst.run_dir());
    auto s = c.open_session();
    client::Request r;
    r.set_chat({{"user", kUserTurns[0]}});
    r.max_tokens = 5;
    r.logprobs = true;
    r.top_logprobs = 4;
    auto collect = [](client::Session& ss, const client::Request& req) {
      std::vector<std::pair<int32_t, float>> out;
      ss.generate_events(req, [&](const client::TokenEvent& ev) {
        if (ev.id >= 0) out.push_back({ev.id, ev.logprob});
        for (const auto& t : ev.top) out.push_back({t.id, t.logprob});
        return true;
      });
      return out;
    };
    collect(*s, r);
    const std::string path = inst.run_dir() + "/turn1.session";
    const client::FileResult saved = s->save(path);
    CHECK(saved.tokens == uint64_t(s->stats()["position"].get<int64_t>()));
    CHECK(saved.bytes == std::filesystem::file_size(path));

    client::Request next;
    next.set_chat({{"user", kUserTurns[1]}});
    next.max_tokens = 6;
    next.logprobs = true;
    next.top_logprobs = 4;
    const auto original = collect(*s, next);
    auto s2 = c.open_session();
    const client::FileResult loaded = s2->load(path);
    CHECK(loaded.tokens == saved.tokens);
    const auto restored = collect(*s2, next);
    CHECK(restored == original);  // ids and logprobs, bit for bit
    CHECK(restored.size() >= 6);

    // A damaged file is refused naming the file and what is damaged; the session is unchanged.
    const std::string bad = inst.run_dir() + "/bad.session";
    std::filesystem::copy_file(path, bad);
    {
      std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-2, std::ios::end);
      f.put('\x7f');
    }
    const int64_t pos = s2->stats()["position"].get<int64_t>();
    try {
      s2->load(bad);
      FAIL("a damaged session file was loaded");
    } catch (const std::exception& e) {
      CHECK_MESSAGE(std::string(e.what()).find(bad) != std::string::npos, e.what());
      CHECK_MESSAGE(std::string(e.what()).find("damaged") != std::string::npos, e.what());
    }
    CHECK(s2->stats()["position"].get<int64_t>() == pos);
    // Compute's directory is not the client's: a relative path is refused as such (not as absent).
    try {
      s2->load("relative.session");
      FAIL("a relative path was accepted");
    } catch (const std::exception& e) {
      CHECK_MESSAGE(std::string(e.what()).find("give an absolute path") != std::string::npos, e.what());
    }
  }
  // Another model's file: the K2 session into a Kimi-Linear instance.
  Instance kl("--ctx 1024", "512M", "tiny-kimi-linear");
  Instance k2("--ctx 1024", "512M", "tiny-k2");
  REQUIRE(kl.ok());
  REQUIRE(k2.ok());
  client::Client c2(k2.run_dir()), ckl(kl.run_dir());
  auto a = c2.open_session();
  client::Request r;
  r.text = "hello";
  r.max_tokens = 2;
  a->generate(r, [](int32_t, std::string_view) { return true; });
  const std::string foreign = k2.run_dir() + "/k2.session";
  a->save(foreign);
  auto b = ckl.open_session();
  try {
    b->load(foreign);
    FAIL("another model's session file was loaded");
  } catch (const std::exception& e) {
    CHECK_MESSAGE(std::string(e.what()).find("another model") != std::string::npos, e.what());
  }
}

TEST_CASE("prompt cache: filled far past its budget, the oldest go, the bytes stay under it and compute's heap is bounded") {
  // Full-width Kimi-Linear layers (two KDA layers: 4 MiB of recurrent state per checkpoint), so
  // every checkpoint is large against the heap's noise.
  const int port = free_port();
  const uint64_t budget = 24ull << 20;
  Instance inst("--http 127.0.0.1:" + std::to_string(port) + " --ctx 512 --prompt-cache 24M", "2G",
                "kimi-linear-48b --layers 2 --experts 8 --vocab 4096");
  REQUIRE_MESSAGE(inst.ok(), inst.why());
  const int compute = inst.pid_of("compute");
  REQUIRE(compute > 0);
  auto rss_anon = [&] {  // heap pages: the expert slots iod shares are RssShmem, not counted here
    std::ifstream f("/proc/" + std::to_string(compute) + "/status");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
    return 0ull;
  };
  auto ask = [&](int i) {
    json req = {{"model", "tiny"}, {"prompt", "prompt number " + std::to_string(i) + " of many, all different"},
                {"max_tokens", 1}, {"temperature", 0}};
    Http h = post(port, "/v1/completions", req, inst.run_dir());
    REQUIRE_MESSAGE(h.status == 200, h.raw);
    return h.body["usage"];
  };
  for (int i = 0; i < 3; ++i) ask(i);  // warm: every expert read once, scratch allocated
  const uint64_t rss0 = rss_anon();
  const int n = 40;
  for (int i = 3; i < n; ++i) ask(i);
  const uint64_t rss1 = rss_anon();
  const std::string m = get(port, "/metrics");
  const double per = metric(m, "waste_prompt_cache_bytes") / metric(m, "waste_prompt_cache_entries");
  MESSAGE("checkpoint ", per / 1048576.0, " MiB, ", metric(m, "waste_prompt_cache_entries"), " held, ",
          metric(m, "waste_prompt_cache_evictions_total"), " evicted; RssAnon ", rss0 / 1048576.0, " -> ", rss1 / 1048576.0, " MiB");
  CHECK(per > 4.0 * 1048576.0);
  CHECK(metric(m, "waste_prompt_cache_bytes") <= double(budget));
  CHECK(metric(m, "waste_prompt_cache_evictions_total") >= double(n) - double(budget) / per);
  // Inserted: n checkpoints, about 8x the budget; held: at most the budget. The heap may grow by
  // the budget (the cache filling up) and allocator slack, never by what was inserted.
  CHECK(double(n) * per > 6.0 * double(budget));
  if (!sanitizer::active) {
    CHECK(rss1 < rss0 + budget + (16ull << 20));
  } else {
    // ASan holds freed blocks back in its quarantine (256 MiB by default: the evicted
    // checkpoints) and both ASan and TSan add shadow pages to RssAnon, so the heap's size says
    // nothing about the cache's bound here; the cache's own byte count above still does.
    MESSAGE("RssAnon bound not checked under ", sanitizer::name, " (quarantine and shadow memory)");
  }
  // The newest prompt is still a checkpoint, the oldest is gone.
  CHECK(ask(n - 1)["prompt_tokens_details"]["cached_tokens"].get<int64_t>() == ask(n - 1)["prompt_tokens"].get<int64_t>());
  CHECK(ask(0)["prompt_tokens_details"]["cached_tokens"].get<int64_t>() == 0);
}
