// wgllm.d.ts - types of the browser package (web/src/wgllm.js).

export interface Progress {
  /** 'download' while the file is read (URL or File), then 'load' while the core parses and validates it. */
  stage: 'download' | 'load';
  /** Overall fraction in [0, 1]; the download is the first half. */
  progress: number;
  loaded?: number;
  total?: number;
}

export interface EngineOptions {
  /** A URL (string or URL), a File/Blob, or the bytes of a GGUF file. */
  model: string | URL | Blob | ArrayBuffer | ArrayBufferView;
  onProgress?: (p: Progress) => void;
  /** Only 'cpu' (wasm) exists in this build; 'auto' picks it. */
  backend?: 'auto' | 'cpu' | 'webgpu';
  /** Jinja chat template used instead of the model's (e.g. CHATML). */
  chatTemplate?: string;
  /** Compute threads (1..4, default 1; 1 in the single-threaded core). */
  nThreads?: number;
  /** false: use the single-threaded core even on a cross-origin isolated page (default: threads when isolated). */
  threaded?: boolean;
  /** KV-cache positions per slot (default 2048, capped by the model). */
  nCtx?: number;
  /** Requests generated at once (default 1). */
  nSlots?: number;
  /** createWorkerEngine only: a Worker running web/dist/worker.js to use. */
  worker?: Worker;
}

export interface EngineInfo {
  backend: 'cpu';
  threads: number;
  /** false: the single-threaded core (the page is not cross-origin isolated), driven from the JS event loop */
  threaded: boolean;
  arch: string;
  n_vocab: number;
  n_ctx_train: number;
  n_embd: number;
  n_layer: number;
  weight_bytes: number;
  simd128: boolean;
  crossOriginIsolated: boolean;
  worker?: boolean;
}

export type FinishReason = 'stop' | 'length' | 'abort';

export interface SamplingParams {
  max_tokens?: number;
  max_completion_tokens?: number;
  /** Default 1 (OpenAI's); 0 = greedy. */
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  seed?: number;
  repetition_penalty?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  stop?: string | string[];
  ignore_eos?: boolean;
  n?: 1;
  stream_options?: { include_usage?: boolean };
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  extra: { ttft_ms: number; prefill_tokens_per_s: number; decode_tokens_per_s: number; total_ms: number };
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | string;
  content: string | { type: 'text'; text: string }[];
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: { index: 0; message: { role: 'assistant'; content: string }; logprobs: null; finish_reason: FinishReason }[];
  usage: Usage;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: { index: 0; delta: { role?: 'assistant'; content?: string }; logprobs: null; finish_reason: FinishReason | null }[];
  usage?: Usage;
}

export interface Completion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: { index: 0; text: string; logprobs: null; finish_reason: FinishReason | null }[];
  usage?: Usage;
}

export interface EmbeddingResponse {
  object: 'list';
  data: { object: 'embedding'; index: number; embedding: number[] | Float32Array }[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

export interface Engine {
  chat: {
    completions: {
      create(p: SamplingParams & { messages: ChatMessage[]; stream?: false }): Promise<ChatCompletion>;
      create(p: SamplingParams & { messages: ChatMessage[]; stream: true }): Promise<AsyncIterableIterator<ChatCompletionChunk>>;
    };
  };
  completions: {
    create(p: SamplingParams & { prompt: string; stream?: false }): Promise<Completion>;
    create(p: SamplingParams & { prompt: string; stream: true }): Promise<AsyncIterableIterator<Completion>>;
  };
  embeddings: {
    create(p: { input: string | string[]; pooling?: 'mean' | 'cls' | 'last' | 'model'; normalize?: boolean;
                encoding_format?: 'float' | 'float32' }): Promise<EmbeddingResponse>;
  };
  /** Stops every request in flight (they finish with finish_reason 'abort'). */
  interrupt(): void;
  /** Frees the model (and ends the worker). */
  unload(): Promise<void>;
  readonly info: EngineInfo;
}

/** ChatML, for models whose GGUF has no chat template. */
export const CHATML: string;
/** The engine on this thread (loading blocks the page; prefer createWorkerEngine). */
export function createEngine(options: EngineOptions): Promise<Engine>;
/** The engine in a Web Worker (web/dist/worker.js). */
export function createWorkerEngine(options: EngineOptions): Promise<Engine>;
