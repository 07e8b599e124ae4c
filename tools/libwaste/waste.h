/* libwaste: a C API for front ends of a running WASTE compute process (Engine RPC,
 * docs/PROTOCOL.md), plus what a front end computes locally from a container (its tokenizer and
 * chat formats, its memory plan). A client and its sessions belong to one thread.
 *
 * Errors: no C++ exception ever crosses this boundary. The first functions below (waste_connect
 * ... waste_stats_json) return NULL or -1 on error; every later one returns a waste_status
 * (WASTE_OK = 0, negative on error). Either way the message is in waste_last_error() (per
 * thread, until the next call of this API on the thread), and when a request field was at fault
 * waste_last_error_field() names it ("messages[1].tool_calls[0].name").
 *
 * A plain completion:
 *   waste_client* c = waste_connect(NULL);            // the default run directory
 *   waste_session* s = waste_open_session(c, 0);
 *   waste_params p; waste_default_params(&p);
 *   waste_result r;
 *   waste_generate(s, "Hello", 0, &p, print_token, NULL, &r);
 *   waste_close_session(s); waste_disconnect(c);
 *
 * A chat, streamed, with tools (the reply is parsed by compute in the model's chat format):
 *   waste_message m[1] = {{0}};
 *   m[0].role = "user"; m[0].content = "Weather in Paris?";
 *   waste_request q; waste_default_request(&q);
 *   q.messages = m; q.n_messages = 1;
 *   q.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}]";
 *   waste_reply* reply = NULL;
 *   if (waste_generate_request(s, &q, on_event, NULL, &reply) == WASTE_OK) {
 *     ... reply->reasoning, reply->content, reply->tool_calls[i].name / .arguments ...
 *     waste_reply_free(reply);
 *   }
 *
 * An image in a chat (a model with a vision tower: waste_info_json's "vision"): a part whose
 * data is the encoded PNG or JPEG file, before the text it is about:
 *   waste_content_part parts[2] = {{WASTE_PART_IMAGE, NULL, png, png_size}, {WASTE_PART_TEXT, "What is this?"}};
 *   m[0].role = "user"; m[0].parts = parts; m[0].n_parts = 2;
 *   ... reply->result.image_tokens: the prompt positions the image took ...
 */
#ifndef WASTE_H
#define WASTE_H
#include <stddef.h>
#include <stdint.h>

/* The version of this API's layouts and meanings, incremented with the library's soversion
 * (libwaste.so.N) whenever a struct changes layout or a function its meaning: a program built
 * against one version must be rebuilt for another.
 *   1: the first API (a library without a soversion).
 *   2 (libwaste.so.1): images. waste_content_part gained data and size, waste_request images,
 *      n_images and image_patches, waste_result image_tokens and image_seconds: the layouts of
 *      all three (and of waste_reply, which holds a waste_result) changed. */
#define WASTE_API_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

typedef struct waste_client waste_client;
typedef struct waste_session waste_session;

/* ==== The first API (kept as it was) ==================================================== */

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
  uint64_t cached_tokens;  /* of prompt_tokens, restored from compute's prompt cache (not prefilled) */
  uint64_t image_tokens;   /* of prompt_tokens, the positions the request's images expanded into */
  double image_seconds;    /* compute's vision tower on the request's images */
} waste_result;

/* The message of the last error on this thread ("" after a call that succeeded). */
const char* waste_last_error(void);

/* where: a run directory, a socket path, "unix:PATH" or "host:port"; NULL: the default run
 * directory (WASTE_RUN_DIR, else $XDG_RUNTIME_DIR/waste, else /tmp/waste-UID). NULL on error. */
waste_client* waste_connect(const char* where);
/* Closes the connection (NULL: nothing). Close its sessions first: a session must not outlive
 * its client. */
void waste_disconnect(waste_client* c);

/* context 0: the engine's default. Closing frees the session's state in compute. NULL on
 * error. */
waste_session* waste_open_session(waste_client* c, uint32_t context);
void waste_close_session(waste_session* s);

/* max_tokens 256, top_p 1, everything else 0. */
void waste_default_params(waste_params* p);
/* chat != 0: prompt is one user message under the model's chat template (on_token then gets the
 * reply's content only, never markup or reasoning); else plain text. The session keeps the
 * conversation: the next call continues it. p NULL: the defaults; out may be NULL.
 * 0 on success, -1 on error. */
int waste_generate(waste_session* s, const char* prompt, int chat, const waste_params* p, waste_token_fn on_token,
                   void* user, waste_result* out);
/* Plain text (never special tokens) -> ids. Writes up to cap ids; *n gets the full count (n may
 * be NULL). 0 on success, -1 on error. */
int waste_tokenize(waste_session* s, const char* text, int32_t* ids, size_t cap, size_t* n);
/* Forgets the conversation (position 0). 0 on success, -1 on error. */
int waste_reset(waste_session* s);
/* The engine's statistics as JSON into buf (NUL-terminated, truncated to cap). Returns the
 * full length, or -1 on error. */
long waste_stats_json(waste_client* c, char* buf, size_t cap);

/* ==== Status codes of everything below ================================================== */

typedef enum {
  WASTE_OK = 0,
  WASTE_ERROR = -1,              /* the engine refused or failed (its message says why) */
  WASTE_ERROR_ARGUMENT = -2,     /* a bad argument or request field, found before anything was sent;
                                    waste_last_error_field() names the field */
  WASTE_ERROR_DISCONNECTED = -3, /* compute went away: this client and its sessions are dead */
  WASTE_ERROR_NO_MEMORY = -4
} waste_status;

/* The request field of the last error ("" when none was at fault), e.g. "messages[0].role",
 * "sampling.top_p", "tools[1].function.name", for an OpenAI-style error's "param". */
const char* waste_last_error_field(void);

/* Copies text into buf as a NUL-terminated string truncated to cap bytes (nothing when cap is
 * 0) and sets *len (may be NULL) to the full length: a caller whose buffer was too small calls
 * again with *len + 1. Every function below with (buf, cap, len) does this. */

/* ==== Chat requests and replies ========================================================= */

/* A tool call of an earlier assistant message. */
typedef struct {
  const char* id;        /* NULL: none (the chat format numbers it) */
  const char* name;      /* required */
  const char* arguments; /* JSON text (an object); NULL or "": no arguments */
} waste_tool_call;

typedef enum { WASTE_PART_TEXT = 0, WASTE_PART_IMAGE = 1 } waste_part_kind;
/* One part of a message's content (OpenAI's content parts). An IMAGE part is either the encoded
 * file itself (data, size: PNG or JPEG bytes, copied when the request is sent; text NULL) or a
 * data: URL in text ("data:image/png;base64,..."; data NULL): compute fetches nothing, so an
 * http(s) URL is refused. Images need a model with a vision tower: compute refuses them
 * otherwise (WASTE_ERROR, waste_last_error_field() naming the part). */
typedef struct {
  waste_part_kind kind;
  const char* text;      /* TEXT: the text; IMAGE: a data: URL, or NULL with data */
  const void* data;      /* IMAGE: the encoded file, or NULL with text; TEXT: NULL */
  size_t size;           /* bytes at data */
} waste_content_part;

/* An encoded image file (PNG or JPEG) for an ids prompt (waste_request.images). */
typedef struct {
  const void* data;
  size_t size;
} waste_image;

/* One message. Fields a role does not have must be NULL / 0 (an error names the field
 * otherwise): reasoning and tool_calls are the assistant's, tool_call_id and tool the tool's,
 * tools_json the system's. */
typedef struct {
  const char* role;                 /* system, developer (= system), user, assistant, tool */
  const char* content;              /* the text; NULL: none (or the parts below) */
  const waste_content_part* parts;  /* instead of content (not both): n_parts content parts */
  size_t n_parts;
  const char* name;                 /* the speaker's name; a tool message: the tool's name; NULL: none */
  const char* reasoning;            /* assistant: its earlier reasoning (reasoning_content); NULL: none */
  const waste_tool_call* tool_calls;/* assistant: n_tool_calls calls */
  size_t n_tool_calls;
  const char* tool_call_id;         /* tool: the id of the call this answers; NULL: none */
  const char* tools_json;           /* system: tools declared mid-conversation (a JSON array); NULL: none */
} waste_message;

typedef struct {
  uint32_t max_tokens;        /* 256 */
  float temperature;          /* 0: greedy; at most 100 */
  float top_p;                /* (0, 1]; 1: off */
  uint32_t top_k;             /* 0: off */
  float min_p;                /* [0, 1]; 0: off */
  float repetition_penalty;   /* (0, 100]; 1: off */
  float presence_penalty;     /* [-2, 2]; 0: off (OpenAI's, over the generated ids) */
  float frequency_penalty;    /* [-2, 2]; 0: off */
  uint64_t seed;
  const char* const* stop;    /* n_stop stop strings, matched in the content (may be NULL) */
  size_t n_stop;
  int logprobs;               /* non-zero: every event carries the token's log probability */
  uint32_t top_logprobs;      /* with logprobs: this many alternatives per token, 0 to 20 */
} waste_sampling;

typedef enum {
  WASTE_THINKING_DEFAULT = 0, /* not given: the format's default (K3 thinks; kimi has no such switch) */
  WASTE_THINKING_ON = 1,      /* K3 only: the kimi format refuses it */
  WASTE_THINKING_OFF = 2      /* K3: the prompt opens the response channel */
} waste_thinking;

/* What to generate. The prompt is exactly one of: messages (a chat, rendered by compute in the
 * model's chat format, its reply parsed into reasoning, content and tool calls), text (plain
 * text, no special tokens) or ids (model ids as they are). The chat fields (tools_json ...
 * add_generation_prompt) need messages. Start from waste_default_request(). */
typedef struct {
  const waste_message* messages;
  size_t n_messages;
  const char* text;
  const int32_t* ids;
  size_t n_ids;
  const char* tools_json;           /* JSON array of {"type": "function", "function": {...}}; NULL: none */
  const char* tool_choice;          /* NULL: not given; "auto", "none", "required" or "function:NAME" */
  const char* response_format_json; /* NULL: text; {"type": "json_object"} or
                                       {"type": "json_schema", "json_schema": {"schema": {...}}} */
  waste_thinking thinking;
  const char* thinking_effort;      /* NULL: none; K3: "low", "high" or "max" */
  int add_generation_prompt;        /* 1 (default): the reply starts a new assistant turn */
  waste_sampling sampling;
  /* An ids prompt's images, in order: each media placeholder id of ids (the model's
   * media_placeholder_token_id, K3's <|media_pad|>) takes the next one and expands into its image
   * tokens. A chat's images are image parts of its messages instead. */
  const waste_image* images;
  size_t n_images;
  uint32_t image_patches;           /* patch budget per image (image tokens = patches / 4 at most);
                                       0: compute's default (waste_info_json's "image_patches") */
} waste_request;

/* Everything NULL / 0 but add_generation_prompt = 1 and the sampling defaults (max_tokens 256,
 * top_p 1, repetition_penalty 1). */
void waste_default_request(waste_request* r);

/* A piece of a tool call in the reply: a call's first delta has its id and name, later ones ""
 * and the next piece of its arguments (JSON text). */
typedef struct {
  size_t index;           /* of the call in the reply, from 0 */
  const char* id;
  const char* name;
  const char* arguments;
  size_t arguments_len;
} waste_tool_call_delta;

typedef struct {
  int32_t id;
  const char* bytes;      /* the token's bytes (may be part of a UTF-8 character; a special: its name) */
  size_t len;
  float logprob;          /* natural log, the model's distribution at temperature 1 */
} waste_logprob;

/* What one generated token adds to the reply. Every pointer is valid during the callback only;
 * strings are NUL-terminated and also have their length. */
typedef struct {
  int32_t id;                               /* -1: held-back text at the end */
  const char* content;                      /* the reply's content (never markup); may be "" */
  size_t content_len;
  const char* reasoning;                    /* the reasoning channel (a chat); may be "" */
  size_t reasoning_len;
  const waste_tool_call_delta* tool_calls;  /* n_tool_calls pieces of tool calls (a chat) */
  size_t n_tool_calls;
  int has_logprob;                          /* the request asked for logprobs (not for id -1) */
  waste_logprob token;                      /* with has_logprob: the generated token */
  const waste_logprob* top;                 /* with has_logprob: n_top alternatives, most likely first */
  size_t n_top;
} waste_event;

/* Return non-zero to go on, 0 to stop the generation (stop_reason "cancelled"). */
typedef int (*waste_event_fn)(void* user, const waste_event* ev);

typedef struct {
  char* id;
  char* name;
  char* arguments;        /* JSON text (OpenAI's function.arguments) */
} waste_reply_tool_call;

/* The whole reply: the events' pieces joined, field by field. Free with waste_reply_free(). */
typedef struct {
  char* reasoning;
  size_t reasoning_len;
  char* content;
  size_t content_len;
  waste_reply_tool_call* tool_calls;
  size_t n_tool_calls;
  char finish_reason[16]; /* OpenAI's: "length" (max_tokens, context), "tool_calls", else "stop" */
  waste_result result;    /* the figures and compute's stop_reason */
} waste_reply;

/* Generates the request on the session (which keeps the conversation: a continuing chat sends
 * only the new messages). on_event (may be NULL) gets each token's pieces as they come; *reply
 * (reply may be NULL) gets the whole reply, or NULL on error. A stop by on_event is not an
 * error. WASTE_ERROR_ARGUMENT for a request that is wrong before it is sent (the field is
 * named); WASTE_ERROR for what compute refuses (its message names the field). */
waste_status waste_generate_request(waste_session* s, const waste_request* r, waste_event_fn on_event, void* user,
                                    waste_reply** reply);
/* Frees a reply of waste_generate_request (NULL: nothing). */
void waste_reply_free(waste_reply* reply);

/* ==== More of the session =============================================================== */

/* Ids -> text (bytes joined; a special token decodes to its name), into buf (see above). */
waste_status waste_detokenize(waste_session* s, const int32_t* ids, size_t n, char* buf, size_t cap, size_t* len);
/* The session's state to a session file on the compute host, and back: load replaces the
 * session's state with the file's, with no prefill (a file of another model, another version
 * or damaged is refused, naming what is wrong). A relative path is made absolute here; the file
 * is where compute runs, which may not be where the caller runs. *tokens (may be NULL): how
 * many tokens the state holds. */
waste_status waste_save(waste_session* s, const char* path, uint64_t* tokens);
waste_status waste_load(waste_session* s, const char* path, uint64_t* tokens);
/* Eval: the model's logits after each of ids[0..n), computed by compute on a fresh state (this
 * session's conversation and position are neither read nor changed). stepwise != 0: one token
 * at a time through the decode path, else prefill chunks (as `waste eval [--step]`; the two
 * agree to rounding). On success *logits_out gets n x *vocab_out floats, row i = the logits
 * after ids[i], to be freed with waste_logits_free(); on error *logits_out is NULL. Compute
 * refuses (WASTE_ERROR, the message names the limit) an id outside the vocabulary, more ids
 * than the session's context, and more than 64 MiB of logits (n x vocab x 4 bytes: e.g. 102
 * ids at a vocabulary of 163840). vocab_out may be NULL. */
waste_status waste_eval(waste_session* s, const int32_t* ids, size_t n, int stepwise, float** logits_out,
                        uint32_t* vocab_out);
/* Frees the logits of waste_eval (NULL: nothing). */
void waste_logits_free(float* logits);
/* The session's figures as JSON ({"id", "position", "context", "generating", "requests",
 * "prompt_tokens", "tokens", ...}) into buf. */
waste_status waste_session_stats_json(waste_session* s, char* buf, size_t cap, size_t* len);
/* What compute serves as JSON ({"model", "family", "chat_format", "vocab", "default_context",
 * "max_context", "max_sessions", "has_tokenizer", "vision", "image_patches", ...}) into buf.
 * "vision": the model has a vision tower (requests may carry images). */
waste_status waste_info_json(waste_client* c, char* buf, size_t cap, size_t* len);

/* ==== Locally, from a container directory ================================================ */

/* A container's tokenizer, loaded in this process: the chat prompt a request renders to, as
 * compute renders it (the same code). Needs the container's files where the caller runs. */
typedef struct waste_tokenizer waste_tokenizer;
waste_status waste_tokenizer_open(const char* container_dir, waste_tokenizer** out);
void waste_tokenizer_close(waste_tokenizer* t);
/* Plain text -> ids (special token names stay text). Ids as waste_tokenize. */
waste_status waste_tokenizer_encode(const waste_tokenizer* t, const char* text, int32_t* ids, size_t cap, size_t* n);
/* Ids -> text into buf, as waste_detokenize. */
waste_status waste_tokenizer_decode(const waste_tokenizer* t, const int32_t* ids, size_t n, char* buf, size_t cap,
                                    size_t* len);
/* The prompt ids of a chat request (r->messages and the chat fields; its sampling is not read):
 * the markup of the model's chat format as special ids, every text as plain text. continuation
 * != 0: the messages continue a session that holds the conversation (no BOS, no default system
 * message), as compute renders a session's later requests. Ids as waste_tokenize. */
waste_status waste_tokenizer_render_chat(const waste_tokenizer* t, const waste_request* r, int continuation,
                                         int32_t* ids, size_t cap, size_t* n);

/* The memory plan of a container on this machine (what `waste plan --json` prints): the floor
 * (trunk + session state + scratch + experts in flight), the expert cache, the total, against
 * the usable RAM (physical RAM and cgroup limits). */
typedef struct {
  uint64_t trunk_bytes, session_state_bytes, scratch_bytes, experts_in_flight_bytes, floor_bytes;
  uint64_t record_stride, working_set_records, working_set_bytes;
  uint64_t cache_bytes, total_bytes, slots;  /* slots: iod's expert slots (in flight + cache) */
  double cache_working_sets;
  uint64_t budget_limit_bytes;               /* 7/8 of usable RAM (auto) or the budget given */
  int auto_budget;
  uint64_t usable_bytes, physical_bytes;
  int fits;                                  /* total <= usable RAM */
} waste_plan;
/* context: tokens per session (0: 8192, as `waste plan`); sessions: 0 means 1; budget_bytes 0:
 * auto. A budget under the floor is an error whose message has the breakdown. */
waste_status waste_plan_container(const char* container_dir, uint64_t context, uint32_t sessions,
                                  uint64_t budget_bytes, waste_plan* out);

#ifdef __cplusplus
}
#endif
#endif /* WASTE_H */
