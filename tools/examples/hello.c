/* A minimal libwaste program: connect to a running WASTE instance, generate from a prompt with
 * streamed output, print the statistics.
 *
 *   waste-hello [RUN_DIR_OR_SOCKET] [PROMPT] [MAX_TOKENS]
 *
 * Prints each token's id on stderr as "id N" lines and the text on stdout, then a line
 * "tokens=N stop=REASON". Exit status 0 on success. */
#include <stdio.h>
#include <stdlib.h>

#include "waste.h"

static int print_token(void* user, int32_t id, const char* text, size_t len) {
  (void)user;
  if (id >= 0) fprintf(stderr, "id %d\n", (int)id);
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 1;
}

int main(int argc, char** argv) {
  const char* where = argc > 1 ? argv[1] : NULL;
  const char* prompt = argc > 2 ? argv[2] : "Hello";
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
  waste_params p;
  waste_default_params(&p);
  p.max_tokens = argc > 3 ? (uint32_t)atoi(argv[3]) : 16;
  waste_result r;
  int rc = waste_generate(s, prompt, 0, &p, print_token, NULL, &r);
  if (rc != 0) {
    fprintf(stderr, "waste-hello: %s\n", waste_last_error());
  } else {
    printf("\ntokens=%llu stop=%s tok/s=%.1f\n", (unsigned long long)r.tokens, r.stop_reason, r.tok_per_s);
    char stats[4096];
    if (waste_stats_json(c, stats, sizeof stats) >= 0) fprintf(stderr, "stats %s\n", stats);
  }
  waste_close_session(s);
  waste_disconnect(c);
  return rc == 0 ? 0 : 1;
}
