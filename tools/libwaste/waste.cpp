// libwaste's C API over the C++ client (engine_client.h): exceptions never cross into C.
#include "tools/libwaste/waste.h"

#include <cstring>
#include <string>

#include "tools/libwaste/engine_client.h"

struct waste_client {
  waste::client::Client c;
  explicit waste_client(const std::string& w) : c(w) {}
};
struct waste_session {
  std::unique_ptr<waste::client::Session> s;
};

namespace {

thread_local std::string g_error;

template <typename F>
auto guarded(F&& f, decltype(f()) on_error) -> decltype(f()) {
  try {
    g_error.clear();
    return f();
  } catch (const std::exception& e) {
    g_error = e.what();
  } catch (...) {
    g_error = "unknown error";
  }
  return on_error;
}

}  // namespace

extern "C" {

const char* waste_last_error(void) { return g_error.c_str(); }

waste_client* waste_connect(const char* where) {
  return guarded([&] { return new waste_client(where ? where : waste::client::default_run_dir()); },
                 static_cast<waste_client*>(nullptr));
}

void waste_disconnect(waste_client* c) { delete c; }

waste_session* waste_open_session(waste_client* c, uint32_t context) {
  return guarded([&] { return new waste_session{c->c.open_session(context)}; }, static_cast<waste_session*>(nullptr));
}

void waste_close_session(waste_session* s) {
  if (!s) return;
  try {
    delete s;
  } catch (...) {
  }
}

void waste_default_params(waste_params* p) {
  std::memset(p, 0, sizeof(*p));
  p->max_tokens = 256;
  p->top_p = 1.0f;
}

int waste_generate(waste_session* s, const char* prompt, int chat, const waste_params* p, waste_token_fn on_token,
                   void* user, waste_result* out) {
  return guarded(
      [&] {
        waste::client::Request r;
        if (chat) {
          r.kind = waste::client::Request::Kind::Chat;
          r.chat.emplace_back("user", prompt);
        } else {
          r.text = prompt;
        }
        waste_params d;
        waste_default_params(&d);
        if (!p) p = &d;
        r.max_tokens = p->max_tokens;
        r.temperature = p->temperature;
        r.top_p = p->top_p;
        r.top_k = p->top_k;
        r.seed = p->seed;
        for (size_t i = 0; i < p->n_stop; ++i) r.stop.emplace_back(p->stop[i]);
        auto res = s->s->generate(r, [&](int32_t id, std::string_view t) {
          return on_token ? on_token(user, id, t.data(), t.size()) != 0 : true;
        });
        if (out) {
          std::memset(out, 0, sizeof(*out));
          out->prompt_tokens = res.prompt_tokens;
          out->tokens = res.tokens;
          out->prefill_seconds = res.prefill_seconds;
          out->decode_seconds = res.decode_seconds;
          out->tok_per_s = res.tok_per_s;
          out->hits = res.hits;
          out->misses = res.misses;
          out->bytes_read = res.bytes_read;
          std::strncpy(out->stop_reason, res.stop_reason.c_str(), sizeof(out->stop_reason) - 1);
        }
        return 0;
      },
      -1);
}

int waste_tokenize(waste_session* s, const char* text, int32_t* ids, size_t cap, size_t* n) {
  return guarded(
      [&] {
        auto v = s->s->tokenize(text);
        for (size_t i = 0; i < v.size() && i < cap; ++i) ids[i] = v[i];
        if (n) *n = v.size();
        return 0;
      },
      -1);
}

int waste_reset(waste_session* s) {
  return guarded(
      [&] {
        s->s->reset();
        return 0;
      },
      -1);
}

long waste_stats_json(waste_client* c, char* buf, size_t cap) {
  return guarded(
      [&] {
        const std::string j = c->c.stats().dump();
        if (cap > 0) {
          const size_t n = std::min(cap - 1, j.size());
          std::memcpy(buf, j.data(), n);
          buf[n] = 0;
        }
        return long(j.size());
      },
      -1L);
}

}  // extern "C"
