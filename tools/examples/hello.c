/* A minimal libwaste program: connect to a running WASTE instance, generate from a prompt with
 * streamed output, print the statistics.
 *
 *   waste-hello [RUN_DIR_OR_SOCKET] [PROMPT] [MAX_TOKENS] [chat]
 *
 * Prints each token's id on stderr as "id N" lines and the text on stdout, then a line
 * "tokens=N stop=REASON". Exit status 0 on success.
 *
 * With "chat": PROMPT is one user message of a chat request (waste_generate_request) that
 * declares one tool, get_weather(city). The reply streams as in the plain mode (content on
 * stdout, "id N" on stderr); then stdout gets the whole reply, one field a line:
 *   reasoning=TEXT / content=TEXT / tool_call INDEX ID NAME ARGUMENTS (one line per call) /
 *   streamed=same (the streamed pieces joined equal the reply) or streamed=DIFFERENT /
 *   tokens=N stop=REASON finish=FINISH_REASON */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "waste.h"

static int print_token(void* user, int32_t id, const char* text, size_t len) {
  (void)user;
  if (id >= 0) fprintf(stderr, "id %d\n", (int)id);
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 1;
}

/* ---- chat mode -------------------------------------------------------------------------- */

/* A growing string: the streamed pieces, joined, to compare with the final reply. */
typedef struct {
  char* data;
  size_t len, cap;
} text_buf;

static int append(text_buf* b, const char* s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char* p = realloc(b->data, cap);
    if (!p) return 0;
    b->data = p;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = 0;
  return 1;
}

/* What the events added up to: reasoning, content and every tool call's name + arguments. */
typedef struct {
  text_buf reasoning, content, calls;
  int ok;
} streamed;

static int on_event(void* user, const waste_event* ev) {
  streamed* s = user;
  size_t i;
  if (ev->id >= 0) fprintf(stderr, "id %d\n", (int)ev->id);
  fwrite(ev->content, 1, ev->content_len, stdout);
  fflush(stdout);
  s->ok &= append(&s->reasoning, ev->reasoning, ev->reasoning_len);
  s->ok &= append(&s->content, ev->content, ev->content_len);
  for (i = 0; i < ev->n_tool_calls; ++i) {
    const waste_tool_call_delta* d = &ev->tool_calls[i];
    s->ok &= append(&s->calls, d->name, strlen(d->name));
    s->ok &= append(&s->calls, d->arguments, d->arguments_len);
  }
  return 1;
}

/* The reply's calls joined the same way as streamed.calls. */
static int same_calls(const waste_reply* r, const text_buf* calls) {
  text_buf b = {0};
  size_t i;
  int same, ok = 1;
  for (i = 0; i < r->n_tool_calls; ++i) {
    ok &= append(&b, r->tool_calls[i].name, strlen(r->tool_calls[i].name));
    ok &= append(&b, r->tool_calls[i].arguments, strlen(r->tool_calls[i].arguments));
  }
  same = ok && b.len == calls->len && (b.len == 0 || memcmp(b.data, calls->data, b.len) == 0);
  free(b.data);
  return same;
}

static int same_text(const char* a, size_t n, const text_buf* b) {
  return n == b->len && (n == 0 || memcmp(a, b->data, n) == 0);
}

static int chat(waste_session* s, const char* prompt, uint32_t max_tokens) {
  waste_message m;
  waste_request q;
  waste_reply* reply = NULL;
  streamed st = {{0}, {0}, {0}, 1};
  size_t i;
  int rc;
  memset(&m, 0, sizeof m);
  m.role = "user";
  m.content = prompt;
  waste_default_request(&q);
  q.messages = &m;
  q.n_messages = 1;
  q.tools_json =
      "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
      "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}]";
  q.sampling.max_tokens = max_tokens;
  rc = waste_generate_request(s, &q, on_event, &st, &reply);
  if (rc != WASTE_OK) {
    fprintf(stderr, "waste-hello: %s (status %d, field \"%s\")\n", waste_last_error(), rc, waste_last_error_field());
  } else {
    printf("\nreasoning=%s\ncontent=%s\n", reply->reasoning, reply->content);
    for (i = 0; i < reply->n_tool_calls; ++i)
      printf("tool_call %zu %s %s %s\n", i, reply->tool_calls[i].id, reply->tool_calls[i].name,
             reply->tool_calls[i].arguments);
    printf("streamed=%s\n", st.ok && same_text(reply->reasoning, reply->reasoning_len, &st.reasoning) &&
                                    same_text(reply->content, reply->content_len, &st.content) &&
                                    same_calls(reply, &st.calls)
                                ? "same"
                                : "DIFFERENT");
    printf("tokens=%llu stop=%s finish=%s\n", (unsigned long long)reply->result.tokens, reply->result.stop_reason,
           reply->finish_reason);
  }
  waste_reply_free(reply);
  free(st.reasoning.data);
  free(st.content.data);
  free(st.calls.data);
  return rc == WASTE_OK ? 0 : -1;
}

int main(int argc, char** argv) {
  const char* where = argc > 1 ? argv[1] : NULL;
  const char* prompt = argc > 2 ? argv[2] : "Hello";
  const uint32_t max_tokens = argc > 3 ? (uint32_t)atoi(argv[3]) : 16;
  const int chat_mode = argc > 4 && strcmp(argv[4], "chat") == 0;
  if (argc > 4 && !chat_mode) {
    fprintf(stderr, "waste-hello: unknown mode \"%s\" (expected chat)\n", argv[4]);
    return 2;
  }
  waste_client* c = waste_connect(where);
  if (!c) {
    fprintf(stderr, "waste-hello: %s\n", waste_last_error());
    return 1;
  }
  waste_session* s = waste_open_session(c, 0);
  if (!s) {
    fprintf(stderr, "waste-hello: %s\n", waste_last_error());
    waste_disconnect(c);
    return 1;
  }
  int rc;
  if (chat_mode) {
    rc = chat(s, prompt, max_tokens);
  } else {
    waste_params p;
    waste_default_params(&p);
    p.max_tokens = max_tokens;
    waste_result r;
    rc = waste_generate(s, prompt, 0, &p, print_token, NULL, &r);
    if (rc != 0) {
      fprintf(stderr, "waste-hello: %s\n", waste_last_error());
    } else {
      printf("\ntokens=%llu stop=%s tok/s=%.1f\n", (unsigned long long)r.tokens, r.stop_reason, r.tok_per_s);
      char stats[4096];
      if (waste_stats_json(c, stats, sizeof stats) >= 0) fprintf(stderr, "stats %s\n", stats);
    }
  }
  waste_close_session(s);
  waste_disconnect(c);
  return rc == 0 ? 0 : 1;
}
