# The compute process's RPC interface (docs/PROTOCOL.md, "Engine"). Front ends (waste chat,
# waste-serve, libwaste) connect to <run-dir>/compute.sock, call openSession, then generate on the
# returned Session; tokens stream back into a TokenSink capability the client passes in.
# A Session belongs to its connection: when the connection closes, the session's state is freed
# and any generation it has running is cancelled.
@0xdd3d891eac33da0b;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("waste::proto");

struct EngineInfo {
  model @0 :Text;             # container directory
  family @1 :Text;            # kimi_linear, kimi_k3, deepseek_v3
  layers @2 :UInt32;
  hidden @3 :UInt32;
  vocab @4 :UInt32;
  routedExperts @5 :UInt32;
  topK @6 :UInt32;
  defaultContext @7 :UInt32;  # a session's context when openSession asks for 0
  maxContext @8 :UInt32;      # the most openSession grants
  maxSessions @9 :UInt32;
  maxQueued @10 :UInt32;      # generate requests waiting or running at once
  expertPath @11 :Text;       # "iod at <socket>, N slots" or "in-process reads"
  budgetBytes @12 :UInt64;    # expert cache bytes (iod slots x slot size, or the in-process cache)
  trunkBytes @13 :UInt64;     # resident trunk
  hasTokenizer @14 :Bool;
  chatFormat @15 :Text;
  vision @16 :Bool;           # the container holds a vision tower: prompts may carry images
  imagePatches @17 :UInt32;   # the default patch budget per image (GenerateRequest.imagePatches)
}

struct SessionOptions {
  context @0 :UInt32;         # tokens; 0 = the engine's default
}

# One message of a chat request (shared/chat/chat_request.h has the meaning of each field).
struct ContentPart {
  text @0 :Text;              # the text, or for an image its reference: a data: URL (base64),
                              # used when `data` is empty; compute fetches nothing
  image @1 :Bool;
  data @2 :Data;              # an image: the encoded file (PNG or JPEG) itself
}

struct ToolCall {
  id @0 :Text;
  hasId @1 :Bool;
  name @2 :Text;
  arguments @3 :Text;         # JSON text as the client sent it (may not parse: rendered raw)
}

struct ChatMessage {
  role @0 :Text;              # system, user, assistant, tool
  content @1 :Text;           # a text-only message; ignored when `parts` is not empty
  parts @2 :List(ContentPart);
  name @3 :Text;              # "" = none
  reasoning @4 :Text;         # assistant: reasoning_content
  toolCalls @5 :List(ToolCall);  # assistant
  toolCallId @6 :Text;        # tool: the call it answers
  hasToolCallId @7 :Bool;
  tool @8 :Text;              # tool: the tool's name, when the client gave it
  hasTool @9 :Bool;
  toolsJson @10 :Text;        # system: tools declared mid-conversation (a JSON array); "" = none
}

# The request-level chat fields (OpenAI's and K3's own).
struct ChatOptions {
  toolsJson @0 :Text;         # JSON array of {"type": "function", "function": {...}}; "" = none
  toolChoice @1 :Text;        # "" (not given), auto, none, required, or "function:NAME"
  responseFormat @2 :Text;    # "" / text, json_object, json_schema
  schemaJson @3 :Text;        # json_schema: the schema
  thinking @4 :Bool = true;
  thinkingGiven @5 :Bool;
  thinkingEffort @6 :Text;    # "" = none; low, high, max
  addGenerationPrompt @7 :Bool = true;
}

struct GenerateRequest {
  prompt :union {
    text @0 :Text;            # plain text, no special tokens
    tokens @1 :List(Int32);   # model ids as they are
    chat @2 :List(ChatMessage);  # the chat template + the generation prompt (a continuing session
                              # gets no second default system message)
  }
  maxTokens @3 :UInt32 = 256;
  temperature @4 :Float32;    # <= 0: greedy
  topP @5 :Float32 = 1.0;
  topK @6 :UInt32;
  minP @7 :Float32;
  repetitionPenalty @8 :Float32 = 1.0;
  seed @9 :UInt64;
  stop @10 :List(Text);       # generation ends before the first occurrence of any (in content)
  chatOptions @11 :ChatOptions;  # with a chat prompt: tools, tool_choice, response_format, thinking
  presencePenalty @12 :Float32;  # OpenAI's: minus this from the logit of every id generated so far
  frequencyPenalty @13 :Float32; # ... and this times how often it was generated
  logprobs @14 :Bool;         # report each generated token's log probability
  topLogprobs @15 :UInt32;    # and this many most likely alternatives (at most 20)
  cacheScope @16 :Text;       # whose prompt-cache checkpoints a new session may start from and
                              # adds to ("" = shared by all who send ""; waste-serve: the API key's)
  images @17 :List(Data);     # a `tokens` prompt's images (encoded PNG/JPEG files): each media
                              # placeholder id (<|media_pad|>) of the prompt takes the next one
                              # and expands into one position per image token (docs/VISION.md)
  imagePatches @18 :UInt32;   # the patch budget per image (tokens = patches / 4); 0: the engine's
}

struct GenerateStats {
  promptTokens @0 :UInt64;
  tokens @1 :UInt64;          # generated
  prefillSeconds @2 :Float64;
  decodeSeconds @3 :Float64;
  tokPerSecond @4 :Float64;   # decode
  queueSeconds @5 :Float64;   # waited before the first step
  hits @6 :UInt64;            # expert lookups during this request's steps
  misses @7 :UInt64;
  bytesRead @8 :UInt64;
  stopReason @9 :Text;        # max_tokens, stop_token, stop_string, context, cancelled
  toolCalls @10 :UInt32;      # tool calls in the reply (a chat): finish_reason "tool_calls"
  cachedTokens @11 :UInt64;   # of promptTokens, restored from a prompt-cache checkpoint (not prefilled)
  imageTokens @12 :UInt64;    # of promptTokens, the positions images expanded into
  imageSeconds @13 :Float64;  # running the vision tower on the request's images
  prefetchIssued @14 :UInt64;  # expert records read on a lookahead hint
  prefetchUsed @15 :UInt64;    # ... that a lookup then asked for
  prefetchWasted @16 :UInt64;  # ... evicted before any lookup asked for them
}

# The numbers of SessionStats, EngineStats and PromptCacheStats are the lines of
# shared/stats/engine_stats.h (name, kind, unit, help); the expert counters those of
# shared/stats/expert_stats.h.
struct SessionStats {
  id @0 :UInt64;
  position @1 :UInt64;        # tokens held in the session's state
  context @2 :UInt64;
  generating @3 :Bool;
  requests @4 :UInt64;
  promptTokens @5 :UInt64;
  tokens @6 :UInt64;
  decodeSeconds @7 :Float64;
  tokPerSecond @8 :Float64;
  hits @9 :UInt64;
  misses @10 :UInt64;
  bytesRead @11 :UInt64;
  prefetchIssued @12 :UInt64;  # expert records read on a lookahead hint
  prefetchUsed @13 :UInt64;    # ... that a lookup then asked for
  prefetchWasted @14 :UInt64;  # ... evicted before any lookup asked for them
}

struct EngineStats {
  uptimeSeconds @0 :Float64;
  sessions @1 :UInt32;
  maxSessions @2 :UInt32;
  queued @3 :UInt32;          # generate requests waiting or running
  running @4 :UInt32;         # of those, being stepped now
  maxQueued @5 :UInt32;
  requests @6 :UInt64;        # generate requests finished (any outcome)
  failed @7 :UInt64;
  promptTokens @8 :UInt64;
  tokens @9 :UInt64;          # generated, all sessions
  decodeSeconds @10 :Float64; # wall time with at least one session decoding
  tokPerSecond @11 :Float64;  # tokens / decodeSeconds: aggregate over concurrent sessions
  hits @12 :UInt64;
  misses @13 :UInt64;
  bytesRead @14 :UInt64;
  expertPath @15 :Text;
  reattaches @16 :UInt32;     # times compute reconnected to a restarted iod
  batches @17 :UInt64;        # batched forward steps run (each: every decoding session + <= 1 prefill chunk)
  batchedSessions @18 :UInt64;  # sessions in those steps, summed (/ batches = mean batch size)
  maxBatch @19 :UInt32;       # the most sessions in one step
  promptCache @20 :PromptCacheStats;
  prefetchIssued @21 :UInt64;  # expert records read on a lookahead hint
  prefetchUsed @22 :UInt64;    # ... that a lookup then asked for
  prefetchWasted @23 :UInt64;  # ... evicted before any lookup asked for them
  liveSessions @24 :UInt32;    # session states in memory (the rest parked on disk or empty)
  maxLiveSessions @25 :UInt32; # the most at once (--sessions: what the memory plan counts)
  parked @26 :UInt64;          # idle sessions' states written to disk to make room
  unparked @27 :UInt64;        # parked states read back for their session's next request
}
struct PromptCacheStats {
  budgetBytes @0 :UInt64;     # 0: the prompt cache is off
  bytes @1 :UInt64;           # held by checkpoints now
  entries @2 :UInt64;
  lookups @3 :UInt64;         # prompts of sessions that held nothing
  hits @4 :UInt64;            # ... that started from a checkpoint
  cachedTokens @5 :UInt64;    # prompt tokens restored instead of prefilled
  inserted @6 :UInt64;
  evicted @7 :UInt64;         # dropped, least recently used first, to stay in the budget
  tooLarge @8 :UInt64;        # checkpoints not kept: one alone exceeds the budget
}

struct ToolCallDelta {
  index @0 :UInt32;           # of the call in the reply, from 0
  id @1 :Text;                # set in a call's first delta only
  name @2 :Text;              # set in a call's first delta only
  arguments @3 :Text;         # the next piece of the arguments (JSON text)
}

struct TopLogprob {
  id @0 :Int32;
  bytes @1 :Data;             # the token's bytes (may be part of a UTF-8 character)
  logprob @2 :Float32;
}

struct TokenLogprob {
  logprob @0 :Float32;        # of the generated token, in the model's distribution (temperature 1)
  top @1 :List(TopLogprob);   # the most likely ids, most likely first
  bytes @2 :Data;             # the generated token's bytes (a special token: its name)
}

interface TokenSink {
  # One generated token. `text` is what it adds to the reply's content: the parsed reply of a
  # chat (never markup, never a special token), the decoded text otherwise; it may be empty (a
  # partial UTF-8 character, a held-back possible stop string, markup). id -1 carries held-back
  # text at the end. `reasoning` and `toolCalls` are what it adds to the reasoning channel and
  # the tool calls of a chat reply; `logprob` is set when the request asked for logprobs.
  # Flow-controlled.
  token @0 (id :Int32, text :Text, reasoning :Text, toolCalls :List(ToolCallDelta), logprob :TokenLogprob) -> stream;
}

interface Session {
  # Feeds the prompt after what the session already holds, then streams tokens into `sink` and
  # returns when generation ended (after every token was delivered). One at a time per session.
  generate @0 (request :GenerateRequest, sink :TokenSink) -> (stats :GenerateStats);
  tokenize @1 (text :Text) -> (tokens :List(Int32));
  detokenize @2 (tokens :List(Int32)) -> (text :Text);
  reset @3 () -> ();           # forget everything (position 0)
  cancel @4 () -> ();          # ends a running generate (stopReason "cancelled"); keeps the state
  # The session's state to a session file on the compute host and back (docs/PROTOCOL.md,
  # "Session files"): load replaces the state with the file's, no prefill. A file of another
  # model, another version or damaged is refused, naming what is wrong. path: absolute.
  save @5 (path :Text) -> (tokens :UInt64, bytes :UInt64, seconds :Float64);
  load @6 (path :Text) -> (tokens :UInt64, bytes :UInt64, seconds :Float64);
  stats @7 () -> (stats :SessionStats);
  # The logits after each of `tokens` (model ids), computed on a fresh state: the session's own
  # state (its conversation, position) is neither read nor changed. `logits` is little-endian
  # f32 [tokens.size() x vocab], row i the logits after tokens[i]. stepwise: one token at a time
  # through the decode path (as `waste eval --step`), else prefill chunks (as `waste eval`).
  # Bounded: at most the session's context tokens and 64 MiB of logits. Runs between steps.
  # With `images`, each media placeholder id takes the next image and expands as in generate
  # (the logits then have a row per expanded position). With `padEmbeddings` (f32 [n x hidden])
  # instead, the placeholder ids are not expanded: the i-th of them is fed row i in place of
  # the embedding table's row (the tower's output given directly).
  eval @8 (tokens :List(Int32), stepwise :Bool, images :List(Data), padEmbeddings :Data, imagePatches :UInt32)
      -> (logits :Data, vocab :UInt32);
}

# What compute knows of itself and its iod (Engine.health). Answered by compute's RPC thread
# without waiting on the worker or iod, so a client that gets no answer in time knows compute
# itself is stopped or wedged.
struct EngineHealth {
  enum IodState {
    none @0;          # experts are read in-process (no iod)
    ok @1;
    notAnswering @2;  # a call to iod has waited longer than the asked threshold
    down @3;          # the last call failed (iodDetail says how); compute reattaches when it can
  }
  iodState @0 :IodState;
  iodDetail @1 :Text;
  iodSinceAnswerSeconds @2 :Float64;  # since iod last answered (-1: never)
  busySeconds @3 :Float64;            # how long the worker's current step has run (0: idle)
  reattaches @4 :UInt32;
}

interface Engine {
  info @0 () -> (info :EngineInfo);
  openSession @1 (options :SessionOptions) -> (session :Session);
  stats @2 () -> (stats :EngineStats, sessions :List(SessionStats));
  # notAnsweringAfterMs: how long a call to iod may wait before iod counts as not answering
  # (0: compute's own --iod-timeout).
  health @3 (notAnsweringAfterMs :UInt32) -> (health :EngineHealth);
}
