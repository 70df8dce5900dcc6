// wgllm.d.ts - types of the browser package (web/src/wgllm.js).

export interface Progress {
  /** 'download' while a URL is fetched (into OPFS), 'read' while the bytes are copied into the wasm
   *  memory (from OPFS or a File), then 'load' while the core parses and validates the model. */
  stage: 'download' | 'read' | 'load';
  /** Overall fraction in [0, 1]: download up to 0.4, read up to 0.5, load the rest. */
  progress: number;
  /** Bytes so far and in all (download: of the shards whose size is known yet). */
  loaded?: number;
  total?: number;
  /** download: the shard being fetched (1-based; absent on summary events) and the shard count. */
  shard?: number;
  shards?: number;
}

/** A model in the browser's store (OPFS), as listModels() reports it. */
export interface StoredModel {
  /** Load it with `model: 'opfs:' + name`. */
  name: string;
  shards: number;
  /** Bytes of the shards stored completely. */
  bytes: number;
  /** False for a download that stopped part-way (loading its URL again resumes it). */
  complete: boolean;
  urls: string[];
}

export interface EngineOptions {
  /** A URL (string or URL; a split model by any shard's URL, or the list of its shard URLs),
   *  'opfs:NAME' (a model stored before), a File/Blob (or the list of a split model's shards),
   *  or the bytes of a GGUF file. URLs are downloaded into OPFS first (see `store`). */
  model: string | URL | (string | URL)[] | Blob | Blob[] | ArrayBuffer | ArrayBufferView;
  /** false: fetch URLs straight into memory, without keeping them in OPFS (default true where OPFS exists). */
  store?: boolean;
  onProgress?: (p: Progress) => void;
  /** 'auto' (default): WebGPU on a hardware adapter, else the wasm CPU backend (a software adapter such
   *  as SwiftShader counts as none); 'webgpu': navigator.gpu on any adapter, or fail; 'cpu': wasm only.
   *  On WebGPU the engine batches requests and computes embeddings as on the CPU.
   *  On a page that is not cross-origin isolated the single-threaded WebGPU core runs 'webgpu'
   *  (and 'auto' on a hardware adapter); 'auto' on a software adapter or none gets the
   *  single-threaded CPU core. */
  backend?: 'auto' | 'cpu' | 'webgpu';
  /** Jinja chat template used instead of the model's (e.g. CHATML). */
  chatTemplate?: string;
  /** On WebGPU, read the weights from the OPFS file / File / bytes straight into GPU buffers in
   *  chunks of at most 16 MiB, so they never sit in the wasm memory (default true). URLs fetched
   *  without OPFS, and the CPU backend, copy the model into the wasm memory instead. */
  streamWeights?: boolean;
  /** Compute threads (1..4; default half of navigator.hardwareConcurrency, at most 4; 1 in the single-threaded core). */
  nThreads?: number;
  /** false: use the single-threaded core even on a cross-origin isolated page (default: threads when isolated). */
  threaded?: boolean;
  /** Keep the engine's KV prefix snapshots in OPFS (folder wgllm-snapshots/): true (under the
   *  model's name) or a key of your own. They are restored at load (info.snapshots says how many
   *  bytes, or why not) and stored again after each finished request, so a returning user's long
   *  system prompt or document is not prefilled again. */
  persistSnapshots?: boolean | string;
  /** KV-cache positions per slot (default 2048, capped by the model). */
  nCtx?: number;
  /** Requests generated at once (default 1). */
  nSlots?: number;
  /** createWorkerEngine only: a Worker running web/dist/worker.js to use. */
  worker?: Worker;
}

/** createServiceWorkerEngine: the engine options, and which service worker hosts it. */
export interface ServiceWorkerEngineOptions extends EngineOptions {
  /** The host: a registration (your own service worker, which imports web/dist/sw-host.js and calls
   *  hostEngine(self)), or the URL of a module service worker script to register. Default: register
   *  web/dist/sw.js (type 'module'; it intercepts no fetches). */
  serviceWorker?: ServiceWorkerRegistration | string | URL;
  /** The scope to register it at (default: the script's folder). The pages need not be in it. */
  scope?: string;
  /** How often the page tells the worker it is still open (default 10000 ms; Chromium stops an
   *  idle service worker after ~30 s, and a message event restarts that timer). */
  heartbeatMs?: number;
}

/** What the service worker reports about itself (info.service_worker, serviceWorker.status()). */
export interface ServiceWorkerInfo {
  host: 'service-worker';
  /** Models loaded by this service worker since it started: the same model reused is not a load. */
  loads: number;
  /** In info: whether this engine found its model already loaded (or loading) by another page. */
  reused?: boolean;
  /** The loaded model (an absolute URL, opfs:NAME, a file's name), or null. */
  model: string | null;
  /** Engines (of any page of the origin) using the model. */
  engines: number;
  /** Connections open to the worker (engines, and engines still loading). */
  sessions: number;
  /** Requests in flight on the model, every page's. */
  requests: number;
  /** Whether the service worker has navigator.gpu (what `auto` and 'webgpu' can use there). */
  webgpu: boolean;
  /** Why the core is single-threaded there, and whether WebGPU is exposed. */
  core_reason: string;
}

/** The engine of createServiceWorkerEngine: the Engine API, and the host's own report. */
export interface ServiceWorkerEngine extends Engine {
  readonly info: EngineInfo & { service_worker: ServiceWorkerInfo };
  readonly capabilities: Capabilities & { host: 'service-worker'; host_reason: string };
  serviceWorker: {
    /** The host's report now (loads, engines, requests in flight...). */
    status(): Promise<ServiceWorkerInfo>;
    registration: ServiceWorkerRegistration;
    /** This engine's session id (what its heartbeats name). */
    session: string;
  };
}

export interface EngineInfo {
  backend: 'cpu' | 'webgpu';
  /** What it runs on and why, e.g. "webgpu: google swiftshader (browser, CPU)" or
   *  "cpu (auto: the WebGPU adapter 'google swiftshader' is a software/CPU adapter)". */
  backend_detail: string;
  /** The WebGPU adapter's name when backend is 'webgpu', else null. */
  adapter: string | null;
  /** GPU memory allocated at load (bytes; constant while generating); 0 on the CPU. */
  gpu_memory: number;
  threads: number;
  /** false: a single-threaded core (the page is not cross-origin isolated), driven from the JS event loop */
  threaded: boolean;
  /** The wasm core that runs: 'threaded' (wgllm-core.js), 'single-threaded' (wgllm-core-st.js, CPU) or
   *  'single-threaded-webgpu' (wgllm-core-st-gpu.js, Asyncify). */
  core: 'threaded' | 'single-threaded' | 'single-threaded-webgpu';
  /** Why that core, e.g. "the page is not cross-origin isolated (no COOP/COEP headers, so no
   *  SharedArrayBuffer): one thread, driven from this event loop; ...". */
  core_detail: string;
  arch: string;
  n_vocab: number;
  n_ctx_train: number;
  n_embd: number;
  n_layer: number;
  weight_bytes: number;
  simd128: boolean;
  /** true: the Q4_0 and Q4_K products run in a relaxed-SIMD kernel module (i16x8.relaxed_dot_i8x16_i7x16_s;
   *  Q4_0 ~1.5x the SIMD128 decode, ~2x its prefill), where the browser validates it (Chromium); false:
   *  the SIMD128 kernels (Q4_K its per-row ones). */
  relaxed_simd: boolean;
  crossOriginIsolated: boolean;
  /** Where the model's bytes came from. */
  source: 'opfs' | 'network' | 'file' | 'memory';
  /** true: the weights went from the files straight into GPU buffers, never into the wasm memory. */
  weights_streamed: boolean;
  /** Its name in the store when it came from OPFS, else null. */
  store: string | null;
  /** Size of the wasm memory right after the load (it only grows). */
  wasm_memory_bytes: number;
  worker?: boolean;
}

export type FinishReason = 'stop' | 'length' | 'abort' | 'tool_calls';

/** The request fields of `wgllm serve` (the same OpenAI layer checks both): unknown fields, wrong
 *  types and out-of-range values are refused with an OpenAIError naming the field. */
export interface SamplingParams {
  model?: string;
  /** Default: until the end of generation or of the context. */
  max_tokens?: number;
  max_completion_tokens?: number;
  /** Defaults are llama.cpp server's: temperature 0.8 (0 = greedy), top_k 40, top_p 0.95, min_p 0.05. */
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  typical_p?: number;
  seed?: number;
  /** The same field as repeat_penalty (give one of them); default 1 = off. */
  repetition_penalty?: number;
  repeat_penalty?: number;
  repeat_last_n?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  logit_bias?: Record<string, number>;
  stop?: string | string[];
  ignore_eos?: boolean;
  /** The engine keeps this conversation's KV cache for the next request with the same key. */
  context_key?: string;
  n?: 1;
  user?: string;
  cache_prompt?: boolean;
  stream_options?: { include_usage?: boolean };
  /** llama.cpp server's: a stream's chunks tell how far the prompt has been read (PromptProgress),
   *  before the first token; in the WebGPU cores also during one long pass. */
  return_progress?: boolean;
}

/** llama.cpp server's prompt_progress: processed / total overall; (processed - cache) / (total - cache) computed. */
export interface PromptProgress { total: number; cache: number; processed: number; time_ms: number }

/** How a request is refused: what the server's HTTP error carries. */
export interface OpenAIError extends Error {
  status: number;
  type: string | null;
  param: string | null;
  code: string | null;
}

/** Chat: logprobs true (+ top_logprobs 0..20); completions: logprobs 0..5. */
export interface TokenLogprob { token: string; logprob: number; bytes: number[]; top_logprobs?: TokenLogprob[] }
export interface ChatLogprobs { content: TokenLogprob[] }
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  /** The browser's addition (not in the server's answers): the request's timings. */
  extra: { ttft_ms: number; prefill_tokens_per_s: number; decode_tokens_per_s: number; total_ms: number };
}

export interface ToolCall {
  id: string;
  type: 'function';
  /** arguments: JSON text, as OpenAI sends it */
  function: { name: string; arguments: string };
}

/** A streamed piece of a call (delta.tool_calls[i]): assembled by index, strings appended. */
export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function?: { name?: string; arguments?: string };
}

export interface Tool {
  type: 'function';
  /** parameters: a JSON Schema; a required or named call is constrained to satisfy it */
  function: { name: string; description?: string; parameters?: object; strict?: boolean };
}

export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool' | string;
  content: string | null | { type: 'text'; text: string }[];
  /** an assistant's earlier calls, rendered back through the model's template */
  tool_calls?: ToolCall[];
  /** role 'tool': the call this answers */
  tool_call_id?: string;
  name?: string;
}

export interface AssistantMessage {
  role: 'assistant';
  /** null beside tool_calls */
  content: string | null;
  /** the <think> part of a reasoning model's answer (reasoning_format other than 'none') */
  reasoning_content?: string;
  tool_calls?: ToolCall[];
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: { index: 0; message: AssistantMessage; logprobs: ChatLogprobs | null; finish_reason: FinishReason }[];
  usage: Usage;
  system_fingerprint: string;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: { index: 0; delta: { role?: 'assistant'; content?: string; reasoning_content?: string;
                                tool_calls?: ToolCallDelta[] };
             logprobs: ChatLogprobs | null; finish_reason: FinishReason | null }[];
  /** With stream_options.include_usage: null on every chunk but the last (whose choices are []). */
  usage?: Usage | null;
  system_fingerprint: string;
  /** With return_progress: a chunk without content that says how far the prompt has been read. */
  prompt_progress?: PromptProgress;
}

export interface Completion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: { index: 0; text: string; logprobs: CompletionLogprobs | null; finish_reason: FinishReason | null }[];
  usage?: Usage | null;
  system_fingerprint?: string;
  /** A streamed chunk with return_progress: how far the prompt has been read (its text is ''). */
  prompt_progress?: PromptProgress;
}

export interface EmbeddingResponse {
  object: 'list';
  data: { object: 'embedding'; index: number; embedding: number[] | Float32Array }[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

export interface ChatParams {
  messages: ChatMessage[];
  logprobs?: boolean;
  top_logprobs?: number;
  response_format?: { type: 'text' } | { type: 'json_object' } |
    { type: 'json_schema'; json_schema: { name: string; schema: object; strict?: boolean; description?: string } };
  tools?: Tool[];
  tool_choice?: 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };
  parallel_tool_calls?: boolean;
  /** extra variables for the chat template, e.g. { enable_thinking: false } */
  chat_template_kwargs?: Record<string, unknown>;
  /** 'none' keeps <think> blocks in content; 'auto' / 'deepseek' (default) split them into reasoning_content */
  reasoning_format?: 'none' | 'auto' | 'deepseek';
  /** llama.cpp's local fields: a GBNF grammar, or a JSON Schema, the answer must follow */
  grammar?: string;
  json_schema?: object;
}

export interface Engine {
  chat: {
    completions: {
      create(p: SamplingParams & ChatParams & { stream?: false }): Promise<ChatCompletion>;
      create(p: SamplingParams & ChatParams & { stream: true }): Promise<AsyncIterableIterator<ChatCompletionChunk>>;
    };
  };
  completions: {
    create(p: SamplingParams & { prompt: string | [string]; logprobs?: number; stream?: false }): Promise<Completion>;
    create(p: SamplingParams & { prompt: string | [string]; logprobs?: number; stream: true }): Promise<AsyncIterableIterator<Completion>>;
  };
  embeddings: {
    create(p: { input: string | string[]; pooling?: 'mean' | 'cls' | 'last' | 'model'; normalize?: boolean;
                encoding_format?: 'float' | 'float32' }): Promise<EmbeddingResponse>;
  };
  /** Stops every request in flight (they finish with finish_reason 'abort'). */
  interrupt(): void;
  /** Frees the model (and ends the worker). */
  unload(): Promise<void>;
  /** The engine's KV prefix snapshots: an exported file, restorable into an engine of the same model
   *  and backend (others are refused); flush() waits for persistSnapshots' pending write. */
  snapshots: {
    save(): Promise<Uint8Array>;
    restore(bytes: Uint8Array | ArrayBuffer): Promise<number>;
    flush(): Promise<void>;
  };
  readonly info: EngineInfo;
  /** The capability report: the backend chosen and why, the adapter, GPU memory. */
  readonly capabilities: Capabilities;
}

export interface Capabilities {
  backend: 'cpu' | 'webgpu';
  /** Same text as EngineInfo.backend_detail. */
  reason: string;
  adapter: string | null;
  /** Bytes. */
  gpu_memory: number;
  /** Whether the engine's thread has navigator.gpu (the service worker's, for createServiceWorkerEngine). */
  webgpu: boolean;
  threads: number;
  crossOriginIsolated: boolean;
  /** Same as EngineInfo.core and EngineInfo.core_detail. */
  core: 'threaded' | 'single-threaded' | 'single-threaded-webgpu';
  core_reason: string;
}

/** ChatML, for models whose GGUF has no chat template. */
export const CHATML: string;
/** The engine on this thread (loading blocks the page; prefer createWorkerEngine). */
export function createEngine(options: EngineOptions): Promise<Engine>;
/** Removes the persisted snapshots of a key (persistSnapshots); false when there were none. */
export function deleteSnapshots(key: string): Promise<boolean>;
/** The engine in a Web Worker (web/dist/worker.js). */
export function createWorkerEngine(options: EngineOptions): Promise<Engine>;
/** The engine in a Service Worker (web/dist/sw.js), shared by the origin's pages and tabs: the
 *  same model with the same options is loaded once and reused (no reload on the next page).
 *  unload() by the last engine using the model frees it; a page that closes or navigates leaves
 *  it loaded until the browser stops the idle worker (~30 s after the last page is gone). */
export function createServiceWorkerEngine(options: ServiceWorkerEngineOptions): Promise<ServiceWorkerEngine>;
/** The models kept in the browser's store (OPFS); [] where OPFS is missing. */
export function listModels(): Promise<StoredModel[]>;
/** Removes a stored model; false when there was none of that name. */
export function deleteModel(name: string): Promise<boolean>;

/** One target of a route: the local engine, or an OpenAI-compatible server. */
export type RouteTarget =
  | { engine: Engine; name?: string; /** per 1M tokens; default 0 */ cost?: number }
  | { baseURL: string; apiKey?: string; model?: string; name?: string; cost?: number };

export interface RouterOptions {
  /** NAME -> its targets (1 to 16, exactly one of them a local engine: the policy runs in its core). */
  routes: Record<string, RouteTarget[]>;
  /** ms of estimated time to first token one unit of cost is worth (default 1000). */
  costWeight?: number;
  /** the fetch the remote calls use (default globalThis.fetch). */
  fetch?: typeof fetch;
}

/** A candidate's inputs and outputs in a routing decision (wgllm.h, "Routes"). */
export interface RouteCandidate {
  target: string;
  kind: 'local' | 'remote';
  eligible: boolean;
  /** why it could not take the request (a local-only field, a prompt too long) */
  refused?: string;
  healthy: boolean;
  prompt_tokens: number;
  cached_tokens?: number;
  prefill_tok_s?: number;
  request_ms?: number;
  queue_depth?: number;
  busy_slots?: number;
  n_slots?: number;
  latency_ms?: number;
  in_flight?: number;
  cost_per_mtok: number;
  estimated_ttft_ms: number;
  estimated_cost: number;
  /** estimated_ttft_ms + costWeight * estimated_cost; the lowest healthy eligible one wins */
  score: number;
}

export interface RouteDecision {
  name: string;
  /** the target that answered */
  target: string | null;
  /** the server the policy chose failed, and the local engine answered instead */
  fallback?: { from: string; error: string };
  completion_tokens: number;
  candidates: RouteCandidate[];
}

/** What a routed answer (or a routed stream's last chunk) carries besides the OpenAI fields. */
export interface Routed { wgllm: { route: RouteDecision } }

export interface Router {
  chat: {
    completions: {
      create(p: SamplingParams & ChatParams & { model: string; stream?: false }): Promise<ChatCompletion & Routed>;
      create(p: SamplingParams & ChatParams & { model: string; stream: true }):
        Promise<AsyncIterableIterator<ChatCompletionChunk & Partial<Routed>>>;
    };
  };
  completions: {
    create(p: SamplingParams & { model: string; prompt: string | [string]; stream?: false }): Promise<Completion & Routed>;
    create(p: SamplingParams & { model: string; prompt: string | [string]; stream: true }):
      Promise<AsyncIterableIterator<Completion & Partial<Routed>>>;
  };
  /** Each route's remote targets as measured: latency (ms to the first byte), calls in flight, health. */
  readonly stats: Record<string, { name: string; latency_ms: number; in_flight: number; healthy: boolean }[]>;
}

/** Routes, as `wgllm serve --route`: a request whose `model` names a route goes to the target the
 *  routing policy picks (the engine's warm prefix, queue and prefill rate; the servers' latency,
 *  load, health and cost). Errors (a bad route, a cost that is no number) are thrown at once. */
export function createRouter(options: RouterOptions): Router;
