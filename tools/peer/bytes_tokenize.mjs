// Tokenizes arbitrary BYTE strings (including invalid UTF-8) with llama.cpp's own
// llama_tokenize, for the peer tests.
//
// Why not node-llama-cpp's model.tokenize(): it takes a JS string, and N-API turns
// any invalid UTF-8 into U+FFFD before llama.cpp sees it, so llama.cpp's handling of
// invalid bytes (e.g. SPM byte fallback to <0xFF>) cannot be reached that way. Node
// has no FFI, so this calls the very same libllama.so that node-llama-cpp installed
// (@node-llama-cpp/linux-x64 3.21.1, llama.cpp tag v0.4.0 in its gitRelease.bundle)
// from Python's ctypes. The llama_model_params layout below is copied from that
// version's include/llama.h; the exact npm pin keeps it valid, and a self-check
// (params defaults n_gpu_layers=-1, vocab_only=false, use_extra_bufts=true) refuses
// to run if the layout ever stops matching.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const BINS = join(here, 'node_modules/@node-llama-cpp/linux-x64/bins/linux-x64');

const PY = String.raw`
import ctypes, json, sys
D = sys.argv[1] + '/'
ctypes.CDLL(D + 'libggml-base.so', mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL(D + 'libggml.v0.4.0.so', mode=ctypes.RTLD_GLOBAL)
L = ctypes.CDLL(D + 'libllama.v0.4.0.so')
class ModelParams(ctypes.Structure):
    _fields_ = [('devices', ctypes.c_void_p), ('tensor_buft_overrides', ctypes.c_void_p),
                ('n_gpu_layers', ctypes.c_int32), ('split_mode', ctypes.c_int32),
                ('load_mode', ctypes.c_int32), ('lazy_mode', ctypes.c_int32),
                ('main_gpu', ctypes.c_int32), ('tensor_split', ctypes.c_void_p),
                ('progress_callback', ctypes.c_void_p), ('progress_callback_user_data', ctypes.c_void_p),
                ('kv_overrides', ctypes.c_void_p), ('vocab_only', ctypes.c_bool),
                ('check_tensors', ctypes.c_bool), ('use_extra_bufts', ctypes.c_bool),
                ('no_host', ctypes.c_bool), ('no_alloc', ctypes.c_bool), ('load_mtp', ctypes.c_bool)]
LOG = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
quiet = LOG(lambda level, text, ud: None)
L.llama_log_set(quiet, None)
L.llama_backend_init()
L.llama_model_default_params.restype = ModelParams
p = L.llama_model_default_params()
if not (p.n_gpu_layers == -1 and not p.vocab_only and not p.check_tensors and p.use_extra_bufts):
    sys.exit('bytes_tokenize: llama_model_params layout does not match this libllama')
p.vocab_only = True
L.llama_model_load_from_file.restype = ctypes.c_void_p
L.llama_model_load_from_file.argtypes = [ctypes.c_char_p, ModelParams]
L.llama_model_get_vocab.restype = ctypes.c_void_p
L.llama_model_get_vocab.argtypes = [ctypes.c_void_p]
L.llama_tokenize.restype = ctypes.c_int32
L.llama_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                             ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_bool, ctypes.c_bool]
req = json.load(sys.stdin)
m = L.llama_model_load_from_file(req['model'].encode(), p)
if not m:
    sys.exit('bytes_tokenize: llama.cpp could not load ' + req['model'])
v = L.llama_model_get_vocab(m)
for item in req['items']:
    b = bytes.fromhex(item['hex'])
    cap = len(b) * 2 + 16
    buf = (ctypes.c_int32 * cap)()
    n = L.llama_tokenize(v, b, len(b), buf, cap, item['add'], item['parse'])
    if n < 0:
        sys.exit('bytes_tokenize: buffer too small')
    # one line per item, flushed: when llama.cpp aborts on an item, the lines before it stand
    sys.stdout.write(json.dumps(list(buf[:n])) + '\n')
    sys.stdout.flush()
`;

function runBatch(modelPath, items) {
  const req = {
    model: modelPath,
    items: items.map((it) => ({ hex: Buffer.from(it.bytes).toString('hex'), add: !!it.addSpecial, parse: !!it.parseSpecial })),
  };
  // GGML_NO_BACKTRACE: llama.cpp aborts on some invalid input (see below); without
  // it ggml would attach gdb to print a backtrace
  const r = spawnSync('python3', ['-c', PY, BINS], {
    input: JSON.stringify(req), encoding: 'utf8', maxBuffer: 64 << 20,
    env: { ...process.env, GGML_NO_BACKTRACE: '1' },
  });
  if (r.error) throw r.error;
  return r;
}

/* items: [{bytes: Buffer|Uint8Array, addSpecial: bool, parseSpecial: bool}] ->
 * array of token-id arrays, in order. An entry is null where llama.cpp itself dies
 * on that input: its BPE pre-tokenizer throws std::invalid_argument ("invalid
 * codepoint") on e.g. F4 90 80 80 (above U+10FFFF) and the exception escapes
 * llama_tokenize, aborting the process, so there is no reference answer there.
 * The process prints each answer as it goes: after an abort, the answers before
 * the item stand and a new process takes the items after it (one process per
 * abort, not one per item). */
export function tokenizeBytes(modelPath, items) {
  if (!existsSync(join(BINS, 'libllama.v0.4.0.so')))
    throw new Error(`bytes_tokenize: ${BINS}/libllama.v0.4.0.so missing (run npm ci --omit=optional in tools/peer)`);
  const out = [];
  while (out.length < items.length) {
    const rest = items.slice(out.length);
    const r = runBatch(modelPath, rest);
    const lines = r.stdout.split('\n').filter((l) => l !== '');
    if (r.status === 0 && lines.length === rest.length) {
      for (const l of lines) out.push(JSON.parse(l));
      break;
    }
    if (r.signal == null || lines.length >= rest.length)
      throw new Error(`bytes_tokenize failed (status ${r.status}, signal ${r.signal}): ${r.stderr.slice(-1000)}`);
    for (const l of lines) out.push(JSON.parse(l));
    out.push(null); // the item it died on
  }
  return out;
}
