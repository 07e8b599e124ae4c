/* libwaste: a C API for front ends of a running WASTE compute process (Engine RPC,
 * docs/PROTOCOL.md). A client and its sessions belong to one thread. Every function that can
 * fail returns NULL or -1 and leaves a message in waste_last_error() (per thread).
 *
 *   waste_client* c = waste_connect(NULL);            // the default run directory
 *   waste_session* s = waste_open_session(c, 0);
 *   waste_params p; waste_default_params(&p);
 *   waste_result r;
 *   waste_generate(s, "Hello", 0, &p, print_token, NULL, &r);
 *   waste_close_session(s); waste_disconnect(c);
 */
#ifndef WASTE_H
#define WASTE_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct waste_client waste_client;
typedef struct waste_session waste_session;

/* Gets each generated token and the UTF-8 text it completes (len may be 0; id -1 carries
 * held-back text at the end). Return non-zero to go on, 0 to stop the generation. */
typedef int (*waste_token_fn)(void* user, int32_t id, const char* text, size_t len);

typedef struct {
  uint32_t max_tokens;     /* 256 */
  float temperature;       /* 0: greedy */
  float top_p;             /* 1: off */
  uint32_t top_k;          /* 0: off */
  uint64_t seed;
  const char* const* stop; /* n_stop stop strings (may be NULL) */
  size_t n_stop;
} waste_params;

typedef struct {
  uint64_t prompt_tokens, tokens;
  double prefill_seconds, decode_seconds, tok_per_s;
  uint64_t hits, misses, bytes_read;
  char stop_reason[32];    /* max_tokens, stop_token, stop_string, context, cancelled */
} waste_result;

const char* waste_last_error(void);

/* where: a run directory, a socket path, "unix:PATH" or "host:port"; NULL: the default run
 * directory (WASTE_RUN_DIR, else $XDG_RUNTIME_DIR/waste, else /tmp/waste-UID). */
waste_client* waste_connect(const char* where);
void waste_disconnect(waste_client* c);

/* context 0: the engine's default. Closing (or disconnecting) frees the session's state. */
waste_session* waste_open_session(waste_client* c, uint32_t context);
void waste_close_session(waste_session* s);

void waste_default_params(waste_params* p);
/* chat != 0: prompt is one user message under the model's chat template; else plain text.
 * The session keeps the conversation: the next call continues it. 0 on success, -1 on error. */
int waste_generate(waste_session* s, const char* prompt, int chat, const waste_params* p, waste_token_fn on_token,
                   void* user, waste_result* out);
/* Writes up to cap ids; *n gets the full count. 0 on success, -1 on error. */
int waste_tokenize(waste_session* s, const char* text, int32_t* ids, size_t cap, size_t* n);
int waste_reset(waste_session* s);
/* The engine's statistics as JSON into buf (NUL-terminated, truncated to cap). Returns the
 * full length, or -1 on error. */
long waste_stats_json(waste_client* c, char* buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* WASTE_H */
